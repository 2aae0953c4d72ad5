#!/usr/bin/python3
"""torchvision_baseline.py - the torchvision side of `stoker-bench augment`.

One thread (torch.set_num_threads(1); stoker-bench also sets
OMP_NUM_THREADS=1): PIL open + convert('RGB'), RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize over the files listed in FILE
(--list FILE, one path per line: the samples stoker's pipeline read), or
over the first N files of an ImageFolder directory DIR (sorted classes,
sorted files). One untimed warm-up pass over the same files, then one
timed pass. Prints images_per_s=X wall=Y (per CPU second, per wall
second). Exit 77 when torch/torchvision are missing.
"""
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def files_of(argv):
    if "--list" in argv:
        with open(argv[argv.index("--list") + 1]) as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    root = argv[1]
    n = 1000
    if "--images" in argv:
        n = int(argv[argv.index("--images") + 1])
    files = []
    for c in sorted(e.name for e in os.scandir(root) if e.is_dir()):
        d = os.path.join(root, c)
        files += [os.path.join(d, f) for f in sorted(os.listdir(d))
                  if f.lower().endswith((".jpg", ".jpeg"))]
    return files[:n]


def main():
    if len(sys.argv) < 2:
        print("usage: torchvision_baseline.py (--list FILE | DIR [--images N])",
              file=sys.stderr)
        return 2
    try:
        import torch
        from PIL import Image
        from torchvision import transforms as T
    except ImportError as e:
        print(f"missing: {e}", file=sys.stderr)
        return 77
    torch.set_num_threads(1)
    torch.manual_seed(0)
    files = files_of(sys.argv)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                    T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    for f in files:  # warm-up pass: page cache, lazy imports, allocator
        with Image.open(f) as im:
            tf(im.convert("RGB"))
    t0, w0 = time.process_time(), time.perf_counter()
    for f in files:
        with Image.open(f) as im:
            tf(im.convert("RGB"))
    dt, dw = time.process_time() - t0, time.perf_counter() - w0
    # per CPU second (one thread), and the wall-clock rate
    print(f"images_per_s={len(files) / dt:.1f} wall={len(files) / dw:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
