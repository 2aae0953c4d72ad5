"""test_recipe_mix.py - timm's ImageNet recipe chain with Mixup/CutMix
through real daemons:

  pipeline = random_resized_crop(32) | hflip | rand_augment(2, 9) |
             normalize(imagenet) | random_erasing(0.25) |
             mixup_cutmix(0.8, 1.0)

on a generated ImageFolder (4 classes), float32, B = 6, two epochs, the
last step padded. A stoker.Loader (rank 0 of 1) consumes every step from
1 worker, then from 3, then from 3 of which one is SIGKILLed after the
third batch; then the same for the chain with aug_mix and timm's elem
mode with cutmix_minmax,

  pipeline = random_resized_crop(32) | hflip | aug_mix |
             normalize(imagenet) |
             mixup_cutmix(0.8, 1.0, mode=elem, minmax=0.2:0.8)

from 1 worker and from 3 with a kill. Every batch must equal the client's reference build
(Loader.reference, stk_client_reference: what stoker-train-loop --verify
compares), and the three runs must deliver the same bytes, step for step
(sha256 of each payload). The loop yields (images, targets): targets is
the float32 [6, 4] soft-target tensor, each row summing to 1 within
float32 rounding, and the dict's "label" the rows' own classes. The
coordinator exits 0 after the last step of each run. Last, the same job
for stoker-train-loop --verify against two workers (both chains): every
batch verified, exit 0.
Exit 77 without torch, or under sanitizers whose runtime cannot be
preloaded."""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, require, spawn, wait_exit, wait_port  # noqa: E402

COORD, WORKER, DATASET, LOOP = require(torch=True, bins=("STOKER_COORDINATOR_BIN",
                                                         "STOKER_WORKER_BIN",
                                                         "STOKER_DATASET_BIN",
                                                         "STOKER_TRAIN_LOOP_BIN"))
import torch  # noqa: E402
import stoker  # noqa: E402

SLOW = 3 if os.environ.get("STOKER_SANITIZED") == "1" else 1
CHAIN = ("random_resized_crop(32) | hflip | rand_augment(2, 9) | normalize(imagenet) | "
         "random_erasing(0.25) | mixup_cutmix(0.8, 1.0)")
CHAIN_ELEM = ("random_resized_crop(32) | hflip | aug_mix | normalize(imagenet) | "
              "mixup_cutmix(0.8, 1.0, mode=elem, minmax=0.2:0.8)")
JOB = """name = recipe-mix
source = imagefolder
dataset = imagefolder
num_classes = 4
pipeline = %s
dtype = float32
batch_size = 6
world_size = 1
epochs = 2
drop_last = false
seed = 27
"""
N, B, C = 50, 6, 4  # samples: ceil(50 / 6) = 9 steps per epoch, the last padded


def start(tmp, root, tag, nworkers, chain):
    """A coordinator of the job with chain and nworkers workers:
    (coordinator process, its address, the workers)."""
    job = os.path.join(tmp, tag + "-job.conf")
    with open(job, "w") as f:
        f.write(JOB % chain)
    pf = os.path.join(tmp, tag + ".port")
    c = spawn([COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--job", job,
               "--idle-timeout-s", "60"], os.path.join(tmp, tag + "-coord.log"))
    coord = "127.0.0.1:%d" % wait_port(pf, c, 15 * SLOW)
    ws = []
    for i in range(nworkers):
        wpf = os.path.join(tmp, "%s-w%d.port" % (tag, i))
        w = spawn([WORKER, "--coordinator", coord, "--listen", "127.0.0.1:0",
                   "--port-file", wpf, "--threads", "1", "--data-root", root],
                  os.path.join(tmp, "%s-w%d.log" % (tag, i)))
        wait_port(wpf, w, 15 * SLOW)
        ws.append(w)
    return c, coord, ws


def run_loop(tmp, root, chain, tag):
    """stoker-train-loop --verify (rank 0 of 1) against two workers: exit 0
    only if every batch equals its reference."""
    try:
        c, coord, _ = start(tmp, root, tag, 2, chain)
        out = os.path.join(tmp, tag + ".log")
        p = spawn([LOOP, "--coordinator", coord, "--rank", "0", "--world-size", "1",
                   "--verify", "--data-root", root], out)
        code = wait_exit(p, 120 * SLOW)
        with open(out, errors="replace") as f:
            summary = [ln for ln in f if "summary" in ln]
        check(code == 0 and summary and "batches 18 " in summary[0] and
              "verify_failures 0" in summary[0],
              "%s: stoker-train-loop --verify: exit %s, %s" % (tag, code, summary))
        check(wait_exit(c, 30 * SLOW) == 0, "%s: the coordinator exits 0" % tag)
    finally:
        reap()


def run(tmp, root, nworkers, kill_after=None, chain=CHAIN, name=""):
    """One job: a coordinator, nworkers workers, a Loader over every step.
    Returns the payloads' sha256 in step order."""
    tag = "%sw%d%s" % (name, nworkers, "-kill" if kill_after else "")
    digests = []
    try:
        c, coord, ws = start(tmp, root, tag, nworkers, chain)
        L = stoker.Loader(coord, rank=0, world_size=1, with_meta=True, prefetch=4,
                          join_timeout_ms=15000 * SLOW)
        n, mixed = 0, [0]
        for epoch in range(2):
            steps = 0
            for images, targets, batch in L:
                steps += 1
                n += 1
                pay = L.payload()
                digests.append(hashlib.sha256(pay).hexdigest())
                ref = L.reference(batch.epoch, batch.step, root)
                check(pay == ref, "%s: epoch %d step %d equals the reference" %
                      (tag, batch.epoch, batch.step))
                check(tuple(images.shape) == (B, 3, 32, 32) and
                      images.dtype == torch.float32, "%s: images %s" % (tag, images.shape))
                check(tuple(targets.shape) == (B, C) and targets.dtype == torch.float32 and
                      batch.target is targets, "%s: targets %s" % (tag, targets.shape))
                check(torch.allclose(targets.sum(1), torch.ones(B), atol=1e-5),
                      "%s: each target row sums to 1" % tag)
                # the row's own class and its pair's get the weight (timm:
                # at least the smoothing's share, 0.1 / 4, elsewhere)
                own = targets[torch.arange(B), batch.label]
                check(bool((own >= 0.025 - 1e-6).all()),
                      "%s: the row's own class has weight" % tag)
                mixed[0] += int((targets.max(1).values < 0.9).sum())
                if kill_after and n == kill_after:
                    ws[0].send_signal(signal.SIGKILL)
            check(steps == 9, "%s: epoch %d has 9 steps, got %d" % (tag, epoch, steps))
        L.close()
        check(mixed[0] > 0, "%s: rows mixed with their pair: %d of %d" % (tag, mixed[0], n * B))
        code = wait_exit(c, 30 * SLOW)
        check(code == 0, "%s: the coordinator exits 0 after the job (got %s)" % (tag, code))
    finally:
        reap()
    return digests


def main():
    tmp = tempfile.mkdtemp(prefix="stoker-recipe-mix-")
    try:
        root = os.path.join(tmp, "data")
        subprocess.run([DATASET, "gen", "--out", root, "--count", str(N), "--classes",
                        str(C), "--layout", "imagefolder", "--min-side", "40",
                        "--max-side", "120", "--seed", "9"],
                       check=True, stdout=subprocess.DEVNULL)
        one = run(tmp, root, 1)
        three = run(tmp, root, 3)
        killed = run(tmp, root, 3, kill_after=3)
        run_loop(tmp, root, CHAIN, "loop")
        check(len(one) == 18, "18 batches from one worker, got %d" % len(one))
        check(one == three, "one worker and three deliver the same bytes")
        check(one == killed, "three workers with one killed deliver the same bytes")
        print("%d batches, identical across 1, 3 and 3-with-a-kill workers: %s" %
              (len(one), one == three == killed))
        e_one = run(tmp, root, 1, chain=CHAIN_ELEM, name="elem-")
        e_killed = run(tmp, root, 3, kill_after=3, chain=CHAIN_ELEM, name="elem-")
        run_loop(tmp, root, CHAIN_ELEM, "loop-elem")
        check(len(e_one) == 18 and e_one == e_killed,
              "aug_mix + elem mode: 1 worker and 3 with a kill deliver the same bytes")
        check(e_one != one, "the two chains make different batches")
        print("aug_mix + elem mode: %d batches, identical across 1 and 3-with-a-kill "
              "workers: %s" % (len(e_one), e_one == e_killed))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if fails:
        print("FAILED: %d check(s)" % len(fails))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
