"""test_tokens_elastic.py - elastic resume of a token job (source = megatron)
through the Python Loader in local mode (the client library's own plan,
state and reorder code; batches built in-process): W=4 ranks take 6 steps
of epoch 0 and save; the rest of the epoch is taken by W=2 from those
states, and in a second chain by W=3 (which saves once more mid-epoch, and
W=4 finishes from there). Over each chain, the union of delivered samples
(the `index` tensor) equals the whole epoch, each exactly once, and every
sample's tokens/labels rows equal those of an uninterrupted W=1 run.
The job has 240 samples (a one-prefix blend takes a subset), batch 2, so
every world's steps divide what is left and drop_last drops nothing."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, require  # noqa: E402

require(torch=True)
import torch  # noqa: E402
import stoker

N, B = 240, 2


def job(world):
    return ("source = megatron\ndataset = lm:1.0\nnum_samples = %d\nseq_len = 16\n"
            "batch_size = %d\nworld_size = %d\nepochs = 1\nseed = 9\n"
            "token_dtype = int32\neod_token = 0\n" % (N, B, world))


def take(world, rank, root, state=None, steps=None):
    """(rows {index: (tokens, labels)}, state after) of one rank."""
    L = stoker.Loader(job=job(world), data_root=root, rank=rank, world_size=world,
                      as_dict=True, state=state)
    rows, n = {}, 0
    it = iter(L)
    while steps is None or n < steps:
        try:
            b = next(it)
        except StopIteration:
            break
        for i, idx in enumerate(b["index"].tolist()):
            check(idx not in rows, "w%d r%d: sample %d twice within a rank" % (world, rank, idx))
            rows[idx] = (b["tokens"][i].clone(), b["labels"][i].clone())
        n += 1
    st = L.state_dict()["stoker_state"]
    L.close()
    return rows, st


def chain(root, ref, phases, what):
    """phases: [(world, steps or None)]; the first starts fresh, each next
    one resumes every new rank from the previous phase's rank-0 state (any
    old rank's state serves: they are in step)."""
    seen = {}
    state = None
    for world, steps in phases:
        states = []
        for r in range(world):
            rows, st = take(world, r, root, state, steps)
            states.append(st)
            for idx, row in rows.items():
                check(idx not in seen, "%s: sample %d delivered twice" % (what, idx))
                seen[idx] = row
        state = states[0]
    check(sorted(seen) == list(range(N)),
          "%s: %d of %d samples delivered (each once)" % (what, len(seen), N))
    bad = [i for i, (t, l) in seen.items()
           if i in ref and not (torch.equal(t, ref[i][0]) and torch.equal(l, ref[i][1]))]
    check(not bad, "%s: rows equal the uninterrupted run's (%d differ)" % (what, len(bad)))
    print("%s: %d samples, each once, rows identical" % (what, len(seen)))


def main():
    d = tempfile.mkdtemp(prefix="stoker-tokens-elastic.")
    with open(f"{d}/corpus.txt", "w") as f:
        for k in range(200):
            f.write(" ".join(str(1 + (k * 7 + i) % 500) for i in range(20 + k % 17)) + "\n")
    subprocess.run([os.environ["STOKER_DATASET_BIN"], "tokens", "--in", f"{d}/corpus.txt",
                    "--out", f"{d}/lm", "--eod", "0"], check=True, timeout=60,
                   stdout=subprocess.DEVNULL)
    ref, _ = take(1, 0, d)
    check(sorted(ref) == list(range(N)), "W=1 delivers all %d samples" % N)
    chain(d, ref, [(4, 6), (2, None)], "W=4 -> W=2")
    chain(d, ref, [(4, 6), (3, 8), (4, None)], "W=4 -> W=3 -> W=4")
    if fails:
        print("%d failure(s); data kept in %s" % (len(fails), d))
        return 1
    shutil.rmtree(d, ignore_errors=True)
    print("test_tokens_elastic: passed")
    return 0


sys.exit(main())
