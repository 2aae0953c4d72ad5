#!/usr/bin/python3
"""torch_loader.py - the user's alternative to stoker on a homogeneous
host: PyTorch's DataLoader with torchvision transforms of the same
pipeline as the job file's `train` (decode, RandomResizedCrop, horizontal
flip, 8-bit CHW tensors: a uint8 job, normalized on the accelerator), and
a simulated accelerator step (sleep). pricecluster.py runs it under the
accelerator host's CPU quota.

    torch_loader.py ROOT --batch B --side S --steps N --step-ms MS [--workers W]
                    [--max-seconds T]

Prints the lines stoker-train-loop prints, so one parser reads both: a
header (`rank 0/1: job torch, N steps/epoch, ...`), a progress line about
every second (`rank 0: epoch E step S  R batches/s ...  stall P%`) and a
summary (`summary rank 0: batches N ...`). Exit 0 when N batches of the
right shape arrived (or fewer, all of the right shape, when --max-seconds
from the first batch ran out first); 2 on bad arguments; 77 without
torch/torchvision.
"""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--side", type=int, default=224)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--step-ms", type=float, default=25)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=0)
    a = ap.parse_args()
    if a.batch < 1 or a.side < 8 or a.steps < 1 or a.step_ms < 0 or a.workers < 0:
        print("torch_loader.py: --batch, --side, --steps want positive numbers",
              file=sys.stderr)
        return 2
    try:
        import torch
        import torchvision.datasets as dsets
        import torchvision.transforms as T
    except ImportError as e:
        print("torch_loader.py: torch/torchvision not importable: %s" % e, file=sys.stderr)
        return 77
    torch.set_num_threads(1)  # the quota is a fraction of one core
    tf = T.Compose([T.RandomResizedCrop(a.side), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = dsets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                                     num_workers=a.workers,
                                     persistent_workers=a.workers > 0)
    spe = len(dl)
    if spe == 0:
        print("torch_loader.py: fewer images than one batch under %s" % a.root,
              file=sys.stderr)
        return 2
    print("rank 0/1: job torch, %d steps/epoch, %d epoch(s), %d bytes/batch" %
          (spe, (a.steps + spe - 1) // spe, a.batch * 3 * a.side * a.side), flush=True)
    n, wait, epoch = 0, 0.0, 0
    t0 = last = time.monotonic()
    last_n, last_wait, bad = 0, 0.0, 0
    t_first, out_of_time = None, False
    while n < a.steps and not out_of_time:
        it = iter(dl)
        step = 0
        while n < a.steps:
            w0 = time.monotonic()
            try:
                x, _ = next(it)
            except StopIteration:
                break
            wait += time.monotonic() - w0
            if tuple(x.shape) != (a.batch, 3, a.side, a.side) or x.dtype != torch.uint8:
                bad += 1
            n += 1
            step += 1
            if t_first is None:
                t_first = time.monotonic()
            if a.step_ms > 0:
                time.sleep(a.step_ms / 1e3)
            now = time.monotonic()
            if now - last >= 1.0:
                print("rank 0: epoch %d step %d  %.1f batches/s  0.0 MB/s  stall %.1f%%  "
                      "workers %d" % (epoch, step, (n - last_n) / (now - last),
                                      100 * (wait - last_wait) / (now - last), a.workers),
                      flush=True)
                last, last_n, last_wait = now, n, wait
            if a.max_seconds > 0 and now - t_first >= a.max_seconds:
                out_of_time = True
                break
        epoch += 1
    dt = time.monotonic() - t0
    print("summary rank 0: batches %d  GB %.3f  %.1f batches/s  0.0 MB/s  stall %.1f%%  "
          "reissued 0  duplicates 0  crc_errors 0  verify_failures %d (not verified: "
          "shapes and dtype checked)  order_failures 0  substituted_samples 0" %
          (n, n * a.batch * 3 * a.side * a.side / 1e9, n / dt, 100 * wait / dt, bad),
          flush=True)
    return 0 if bad == 0 and (n == a.steps or out_of_time) else 1


if __name__ == "__main__":
    sys.exit(main())
