"""gpu_loader_check.py - the Python half of scripts/gpu-check.sh: the
Loader's CUDA tensors on a real GPU, against the same job's CPU tensors.

1. device="cuda", a float32 job (8-bit images on the wire, converted on the
   device when the kernel loads): every batch equal to the CPU Loader's.
2. convert="bfloat16" on a uint8 job: the same against the CPU.
3. A loop that keeps every batch (list of tensors) and modifies them in
   place: each kept tensor still equals the CPU batch at the end of the
   epoch, after close() and after garbage collection.
4. Throughput of device="cuda" against device="cpu" + .cuda(), medians of
   alternating rounds.
Prints one line per check; exit 0 only if all hold.
"""
import gc
import statistics
import sys
import time

import torch

import stoker

F32 = ("source = synthetic\nnum_samples = 2048\nheight = 224\nwidth = 224\n"
       "batch_size = 32\nworld_size = 1\nepochs = 1\nseed = 7\n")
U8 = F32 + "dtype = uint8\n"
failed = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failed.append(what)


def batches(job, device, **kw):
    out = []
    with stoker.Loader(job=job, rank=0, world_size=1, device=device, **kw) as L:
        for x, y in L:
            out.append((x.cpu().clone(), y.cpu().clone()))
        conv = L.stats().get("device_convert")
    return out, conv


print("torch %s, CUDA %s, %s" % (torch.__version__, torch.version.cuda,
                                 torch.cuda.get_device_name(0)))
stream = torch.cuda.current_stream()

# 1, 2: device tensors equal the CPU's
for name, job, kw in (("float32 job", F32, {}),
                      ("uint8 job, convert=bfloat16", U8, {"convert": "bfloat16"})):
    ref, _ = batches(job, "cpu", **kw)
    got, conv = batches(job, "cuda", cuda_stream=stream, **kw)
    same = len(ref) == len(got) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(ref, got))
    check(same, "%s: %d CUDA batches equal the CPU's (conversion on the %s)"
          % (name, len(got), "device" if conv else "CPU"))

# 3: kept tensors stay what they are
ref, _ = batches(F32, "cpu")
kept = []
L = stoker.Loader(job=F32, rank=0, world_size=1, device="cuda", cuda_stream=stream, log=False)
for i, (x, y) in enumerate(L):
    check_now = torch.equal(x.cpu(), ref[i][0])
    if not check_now:
        check(False, "batch %d differs when handed out" % i)
    kept.append(x)
    x.add_(0)  # an in-place op on a kept tensor must be harmless
torch.cuda.synchronize()
n_ok = sum(torch.equal(k.cpu(), r[0]) for k, r in zip(kept, ref))
check(n_ok == len(ref), "kept every batch: %d of %d equal at the end of the epoch" % (n_ok, len(ref)))
L.close()
gc.collect()
n_ok = sum(torch.equal(k.cpu(), r[0]) for k, r in zip(kept, ref))
check(n_ok == len(ref), "after close() and gc: %d of %d equal" % (n_ok, len(ref)))
kept.clear()
gc.collect()

# 4: rates, alternating rounds
JOB = F32.replace("num_samples = 2048", "num_samples = 8192")


def rate(mode):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    with stoker.Loader(job=JOB, rank=0, world_size=1, log=False,
                       device="cuda" if mode == "cuda" else "cpu",
                       cuda_stream=stream if mode == "cuda" else None) as L:
        for x, y in L:
            if mode != "cuda":
                x = x.cuda(non_blocking=False)
            s = x.float().mean()  # a kernel reading the batch
            n += 1
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


r = {"cuda": [], "cpu": []}
for _ in range(3):
    for m in ("cuda", "cpu"):
        r[m].append(rate(m))
c, h = statistics.median(r["cuda"]), statistics.median(r["cpu"])
print("rate: device='cuda' %.0f batches/s, device='cpu' + .cuda() %.0f batches/s "
      "(%.2fx; medians of 3 alternating rounds, in-process source, 224x224x3 float32 x 32)"
      % (c, h, c / h))
print("gpu_loader_check: %s" % ("PASS" if not failed else "FAIL: " + "; ".join(failed)))
sys.exit(1 if failed else 0)
