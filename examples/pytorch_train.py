#!/usr/bin/python3
"""pytorch_train.py - a small CNN trained on batches streamed by stoker.

Runs --steps training steps (loss printed, and it must decrease), saves a
checkpoint holding the model, the optimizer and the loader's state_dict at
step --steps/2, and finally resumes a fresh Loader from that checkpoint and
checks that its first batch is exactly the one the uninterrupted run got
next (same sample indices). Prints the input stall from stats(). With
--verify every batch's payload is also compared byte for byte with the
reference built in-process (as stoker-train-loop --verify does).

    examples/pytorch_train.py --coordinator 127.0.0.1:7000 --rank 0 --world-size 1
    examples/pytorch_train.py --local        # no daemons: in-process batches

Meant for a uint8 image job (e.g. the synthetic source, raw pipeline, small
images); the loader converts to normalized float32 NCHW. Exit 0 on success.
"""
import argparse
import io
import os
import sys
import time

import torch
import torch.nn as nn

try:
    import stoker
except ImportError:  # run from a source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "client", "python"))
    import stoker

LOCAL_JOB = ("source = synthetic\nnum_samples = 4096\nheight = 32\nwidth = 32\n"
             "batch_size = 32\nworld_size = 1\nepochs = 3\nnum_classes = 10\nseed = 1\n")


class Net(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(32, classes))

    def forward(self, x):
        return self.f(x)


def make_loader(a, state=None):
    kw = dict(rank=a.rank, world_size=a.world_size, convert="float32",
              prefetch=a.prefetch, with_meta=True,
              join_timeout_ms=a.join_timeout_ms,
              auto_finish=False)  # finished at the end, after the resume check
    if a.local:
        L = stoker.Loader(job=LOCAL_JOB, **kw)
    else:
        L = stoker.Loader(a.coordinator, **kw)
    if state is not None:
        L.load_state_dict(state)
    return L


def batches(L):
    """Endless (images, labels, meta) over epochs until the job ends."""
    while True:
        n = 0
        for item in L:
            n += 1
            yield item
        if n == 0:
            return


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--coordinator", help="HOST:PORT (default $STOKER_COORDINATOR)")
    p.add_argument("--local", action="store_true", help="in-process batches, no daemons")
    p.add_argument("--rank", type=int, default=None,
                   help="default $RANK (else OMPI_COMM_WORLD_RANK, SLURM_PROCID), else 0")
    p.add_argument("--world-size", type=int, default=None,
                   help="default $WORLD_SIZE (else OMPI_COMM_WORLD_SIZE, "
                        "SLURM_NTASKS), else 1")
    p.add_argument("--steps", type=int, default=300,
                   help="training steps (0: every step of the job, all epochs)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--prefetch", type=int, default=8)
    p.add_argument("--join-timeout-ms", type=int, default=60000)
    p.add_argument("--checkpoint", help="write the checkpoint here too")
    p.add_argument("--no-finish", action="store_true", help="do not call finish at the end")
    p.add_argument("--verify", action="store_true",
                   help="compare each batch with the in-process reference")
    p.add_argument("--data-root", help="dataset root for --verify of file datasets")
    a = p.parse_args()
    if not a.local and not a.coordinator and not os.environ.get("STOKER_COORDINATOR"):
        p.error("give --coordinator HOST:PORT (or set STOKER_COORDINATOR) or --local")
    torch.manual_seed(0)
    L = make_loader(a)
    classes = int(L.job["num_classes"])
    if a.steps <= 0:
        a.steps = L.epochs * L.steps_per_epoch
    model = Net(classes)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss()
    ck_at = a.steps // 2
    ckpt, expect_next, losses = None, None, []
    verified = differ = 0
    t0 = time.time()
    step = 0
    for images, labels, meta in batches(L):
        if step == ck_at + 1:
            expect_next = meta.index.clone()  # the batch a resume must yield first
        if a.verify:
            verified += 1
            if L.payload() != L.reference(meta.epoch, meta.step, a.data_root):
                differ += 1
                if differ <= 5:
                    print("verify: epoch %d step %d differs from the reference" %
                          (meta.epoch, meta.step), flush=True)
        loss = lossf(model(images), labels)  # images: zero-copy view of the slot
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 25 == 0:
            print("step %4d  epoch %d  batch step %3d  loss %.4f" %
                  (step, meta.epoch, meta.step, losses[-1]), flush=True)
        if step == ck_at:
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "loader": L.state_dict(), "step": step}, buf)
            ckpt = buf.getvalue()
            if a.checkpoint:
                with open(a.checkpoint, "wb") as f:
                    f.write(ckpt)
        step += 1
        if step >= a.steps:
            break
    s = L.stats()
    print("trained %d steps in %.1f s; input stall %.1f%% (workers alive %d, "
          "reissued %d, crc errors %d)" % (step, time.time() - t0,
                                           100 * s["stall_fraction"], s["workers_alive"],
                                           s["reissued"], s["crc_errors"]))
    if (ckpt is None or expect_next is None) and not a.no_finish:
        L.finish()  # no resume check below: this rank is done now
    L.close()
    ok = True
    if a.verify:
        print("verified %d batches against the reference: %d differ" % (verified, differ))
        ok = verified == step and differ == 0
    k = max(1, min(20, len(losses) // 4))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    print("loss: first %d steps %.4f, last %d steps %.4f" % (k, first, k, last))
    if not last < first:
        print("FAIL: loss did not decrease")
        ok = False
    if ckpt is not None and expect_next is not None:
        c = torch.load(io.BytesIO(ckpt))
        model.load_state_dict(c["model"])
        R = make_loader(a, state=c["loader"])
        got = None
        for images, labels, meta in R:
            got = meta.index.clone()
            break
        same = got is not None and torch.equal(got, expect_next)
        print("resume from step %d: next batch %s the uninterrupted run's" %
              (c["step"], "matches" if same else "DIFFERS FROM"))
        ok = ok and same
        if not a.no_finish:
            R.finish()
        R.close()
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
