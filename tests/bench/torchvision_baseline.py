#!/usr/bin/python3
"""torchvision_baseline.py - the torchvision side of `stoker-bench augment`.

One thread (torch.set_num_threads(1); stoker-bench also sets
OMP_NUM_THREADS=1): PIL open + convert('RGB') and a recipe's Compose over
the files listed in FILE (--list FILE, one path per line: the samples
stoker's pipeline read), or over the first N files of an ImageFolder
directory DIR (sorted classes, sorted files). One untimed warm-up pass
over the same files, then one timed pass. Prints images_per_s=X wall=Y
(per CPU second, per wall second). Exit 77 when torch/torchvision are
missing.

--recipe NAME picks the Compose, torchvision's side of stoker's chain of
the same name (`stoker-bench augment --recipes`, bench_recipes.c):
  base     RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
           Normalize (the default: the train pipeline)
  recipe   timm's: the same with RandAugment(2, 9) before ToTensor and
           RandomErasing(0.25) after Normalize
  tawide   torchvision's ResNet-50 v2 image part: RandomResizedCrop(176),
           RandomHorizontalFlip, TrivialAugmentWide, ToTensor, Normalize,
           RandomErasing(0.1)
  autoaug  base with AutoAugment before ToTensor
  augmix   base with AugMix before ToTensor
  mix      recipe's Compose, then per batch of --batch B files (in list
           order: stoker's batches) torch.stack and timm's Mixup(0.8, 1.0,
           switch_prob 0.5, label_smoothing 0.1) formula in torch, the
           labels from each file's class folder
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
RECIPES = ("base", "recipe", "tawide", "autoaug", "augmix", "mix")


def compose(T, name):
    """torchvision's Compose of recipe `name` (mix: recipe's)."""
    crop = T.RandomResizedCrop(176 if name == "tawide" else 224)
    policy = {"recipe": [T.RandAugment(2, 9)], "mix": [T.RandAugment(2, 9)],
              "tawide": [T.TrivialAugmentWide()], "autoaug": [T.AutoAugment()],
              "augmix": [T.AugMix()]}.get(name, [])
    erasing = {"recipe": [T.RandomErasing(0.25)], "mix": [T.RandomErasing(0.25)],
               "tawide": [T.RandomErasing(0.1)]}.get(name, [])
    return T.Compose([crop, T.RandomHorizontalFlip()] + policy +
                     [T.ToTensor(), T.Normalize(MEAN, STD)] + erasing)


def timm_mix(torch, np, x, target, num_classes, rng):
    """timm's Mixup(0.8, 1.0, switch_prob=0.5, label_smoothing=0.1) on a
    stacked float32 batch, in torch (timm/data/mixup.py, batch mode)."""
    use_cutmix = rng.random() < 0.5
    lam = float(rng.beta(1.0, 1.0) if use_cutmix else rng.beta(0.8, 0.8))
    if use_cutmix:
        H, W = x.shape[-2:]
        ratio = np.sqrt(1 - lam)
        ch, cw = int(H * ratio), int(W * ratio)
        cy, cx = rng.integers(0, H), rng.integers(0, W)
        yl, yh = np.clip(cy - ch // 2, 0, H), np.clip(cy + ch // 2, 0, H)
        xl, xh = np.clip(cx - cw // 2, 0, W), np.clip(cx + cw // 2, 0, W)
        x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        lam = 1. - (yh - yl) * (xh - xl) / float(H * W)
    else:
        x_flipped = x.flip(0).mul_(1. - lam)
        x.mul_(lam).add_(x_flipped)
    off = 0.1 / num_classes
    y1 = torch.full((len(target), num_classes), off).scatter_(1, target.view(-1, 1),
                                                              1. - 0.1 + off)
    y2 = y1.flip(0)
    return x, y1 * lam + y2 * (1. - lam)


def files_of(a):
    if a.list:
        with open(a.list) as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    files = []
    for c in sorted(e.name for e in os.scandir(a.dir) if e.is_dir()):
        d = os.path.join(a.dir, c)
        files += [os.path.join(d, f) for f in sorted(os.listdir(d))
                  if f.lower().endswith((".jpg", ".jpeg"))]
    return files[:a.images]


def main():
    ap = argparse.ArgumentParser(
        usage="torchvision_baseline.py (--list FILE | DIR [--images N]) [--recipe NAME] "
        "[--batch B]")
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--list")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--recipe", choices=RECIPES, default="base")
    ap.add_argument("--batch", type=int, default=32, help="mix: files per batch")
    a = ap.parse_args()
    if not a.list and not a.dir or a.batch < 1:
        ap.print_usage(sys.stderr)
        return 2
    try:
        import numpy as np
        import torch
        from PIL import Image
        from torchvision import transforms as T
    except ImportError as e:
        print(f"missing: {e}", file=sys.stderr)
        return 77
    torch.set_num_threads(1)
    torch.manual_seed(0)
    files = files_of(a)
    tf = compose(T, a.recipe)
    if a.recipe == "mix":  # whole batches only, labels from the class folders
        files = files[:len(files) // a.batch * a.batch]
        classes = {}
        for f in files:
            root = os.path.dirname(os.path.dirname(f))
            if root not in classes:
                classes[root] = sorted(e.name for e in os.scandir(root) if e.is_dir())
        labels = torch.tensor([classes[os.path.dirname(os.path.dirname(f))].index(
            os.path.basename(os.path.dirname(f))) for f in files], dtype=torch.int64)
        nclass = max(len(c) for c in classes.values())
        rng = np.random.default_rng(1)

    def one_pass():
        if a.recipe != "mix":
            for f in files:
                with Image.open(f) as im:
                    tf(im.convert("RGB"))
            return
        for s in range(0, len(files), a.batch):
            xs = []
            for f in files[s:s + a.batch]:
                with Image.open(f) as im:
                    xs.append(tf(im.convert("RGB")))
            timm_mix(torch, np, torch.stack(xs), labels[s:s + a.batch], nclass, rng)

    one_pass()  # warm-up pass: page cache, lazy imports, allocator
    t0, w0 = time.process_time(), time.perf_counter()
    one_pass()
    dt, dw = time.process_time() - t0, time.perf_counter() - w0
    # per CPU second (one thread), and the wall-clock rate
    print(f"images_per_s={len(files) / dt:.1f} wall={len(files) / dw:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
