"""eval_folder.py - exact distributed evaluation of an ImageFolder with
stoker: every sample counted exactly once over all ranks.

The job (on the coordinator) says, besides the dataset and the eval
pipeline:

    shuffle = false      # index order, partitioned across ranks
    drop_last = false    # the tail is padded (mask 0), not dropped

and each rank reads it with Loader(last_batch="trim"), so the padding rows
of the last step never reach the loop: `for images, labels in loader` sees
this rank's share of the samples and nothing else (the last step may be
shorter than batch_size). Rank r's step s holds samples (s*W + r)*B .. +B,
as DistributedSampler(shuffle=False) would partition them, except that
nothing is repeated.

Run one process per rank (stoker-launch, torchrun or by hand):

    RANK=0 WORLD_SIZE=2 STOKER_COORDINATOR=host:port python3 eval_folder.py
    RANK=1 WORLD_SIZE=2 STOKER_COORDINATOR=host:port python3 eval_folder.py

Without a model (the default) it counts the samples and labels it saw;
--model a TorchScript file scores them (top-1). With torch.distributed
initialized (torchrun) the counts are summed over the ranks; else each
rank prints its own and --indices-out writes the sample indices it saw
(one per line), which a test unions.
"""
import argparse
import os
import sys

import stoker
import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coordinator", default=os.environ.get("STOKER_COORDINATOR"))
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--model", help="TorchScript model to score (top-1)")
    ap.add_argument("--indices-out", help="write the sample indices this rank saw here")
    args = ap.parse_args()
    if not args.coordinator:
        sys.exit("give --coordinator host:port or set STOKER_COORDINATOR")

    loader = stoker.Loader(args.coordinator, rank=args.rank, world_size=args.world_size,
                           convert="float32", with_meta=True, last_batch="trim")
    job = loader.job
    if job["drop_last"] or job["shuffle"]:
        print("eval_folder: rank %d: the job says drop_last = %s, shuffle = %s: "
              "set drop_last = false and shuffle = false to count every sample once"
              % (loader.rank, job["drop_last"], job["shuffle"]), file=sys.stderr)
    model = torch.jit.load(args.model).eval() if args.model else None
    seen, correct, indices = 0, 0, []
    with torch.no_grad():
        for images, labels, batch in loader:  # the job's one epoch
            n = labels.shape[0]  # batch_size, or fewer on the last step
            indices += batch.index[:n].tolist()
            seen += n
            if model is not None:
                correct += int((model(images).argmax(1) == labels).sum())
    loader.close()

    totals = torch.tensor([seen, correct], dtype=torch.int64)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(totals)
    print("rank %d: %d samples%s; %s: %d samples" % (
        loader.rank, seen, " (top-1 %d)" % correct if model is not None else "",
        "all ranks" if dist.is_available() and dist.is_initialized() else "this rank",
        int(totals[0])))
    if model is not None and totals[0]:
        print("top-1 accuracy %.4f" % (float(totals[1]) / float(totals[0])))
    if args.indices_out:
        with open(args.indices_out, "w") as f:
            f.write("".join("%d\n" % i for i in indices))


if __name__ == "__main__":
    main()
