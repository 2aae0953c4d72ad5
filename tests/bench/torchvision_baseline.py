#!/usr/bin/python3
"""torchvision_baseline.py - the torchvision side of `stoker-bench augment`.

Single thread: PIL open + convert('RGB'), RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize over the first N files of an
ImageFolder directory (sorted classes, sorted files). Prints
images_per_s=X wall=Y (per CPU second, per wall second). Exit 77 when torch/torchvision are missing.
"""
import os
import sys
import time


def main():
    if len(sys.argv) < 2:
        print("usage: torchvision_baseline.py DIR [--images N]", file=sys.stderr)
        return 2
    root = sys.argv[1]
    n = 1000
    if "--images" in sys.argv:
        n = int(sys.argv[sys.argv.index("--images") + 1])
    try:
        import torch
        from PIL import Image
        from torchvision import transforms as T
    except ImportError as e:
        print(f"missing: {e}", file=sys.stderr)
        return 77
    torch.set_num_threads(1)
    torch.manual_seed(0)
    files = []
    for c in sorted(e.name for e in os.scandir(root) if e.is_dir()):
        d = os.path.join(root, c)
        files += [os.path.join(d, f) for f in sorted(os.listdir(d))
                  if f.lower().endswith((".jpg", ".jpeg"))]
    files = files[:n]
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                    T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    for f in files[:20]:  # warm-up
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
