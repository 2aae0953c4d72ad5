#!/usr/bin/python3
"""torchvision_baseline.py - the torchvision side of `stoker-bench augment`.

Single thread: PIL open + convert('RGB'), RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize over the first N files of an
ImageFolder directory (sorted classes, sorted files). Prints
images_per_s=X. Exit 77 when torch/torchvision are missing.
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
    t0 = time.perf_counter()
    for f in files:
        with Image.open(f) as im:
            tf(im.convert("RGB"))
    dt = time.perf_counter() - t0
    print(f"images_per_s={len(files) / dt:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
