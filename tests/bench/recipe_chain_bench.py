#!/usr/bin/python3
"""recipe_chain_bench.py - images per second of the recipe chains
against torchvision's same recipes on the same files, one thread each,
alternating rounds, medians and per-round ratios.

stoker builds each sample through `aug_probe chainf` (a builder with
batch size 1, float32 NCHW, output to /dev/null: the process start and the
dataset open are timed too, amortized over the round); torchvision runs the
Compose on PIL images in this process (torch.set_num_threads(1)).

usage: recipe_chain_bench.py AUG_PROBE STOKER_DATASET [--count N] [--rounds R]
                              [--batch B] [--files DIR] [--only NAME,...]
The recipes (each round runs every one, stoker then torchvision):
  recipe   timm's: random_resized_crop(224) | hflip(0.5) |
           rand_augment(2, 9) | normalize(imagenet) | random_erasing(0.25)
  base     the same without its two policies (a reference)
  tawide   torchvision's ResNet-50 v2 image part: random_resized_crop(176) |
           hflip(0.5) | trivial_augment_wide | normalize(imagenet) |
           random_erasing(0.1) (TrivialAugmentWide's default NEAREST)
  autoaug  random_resized_crop(224) | hflip(0.5) | auto_augment |
           normalize(imagenet)
  augmix   random_resized_crop(224) | hflip(0.5) | aug_mix |
           normalize(imagenet)
--files DIR times an ImageFolder of your own (real photos) instead of
--count generated JPEGs. Then the recipe with
timm's Mixup/CutMix, `| mixup_cutmix(0.8, 1.0)`, in batches of --batch
(`aug_probe mix`: float32 NCHW, the dataset's 4 classes) against torchvision's
Compose, torch.stack and timm's Mixup formula in torch (batch mode,
flip pairing, mixup_target) on the stacked batch.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit",
                                "augment"))
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from test_aug_parity import MEAN, STD, listing  # noqa: E402

RECIPES = [
    ("recipe", "random_resized_crop(224) | hflip(0.5) | rand_augment(2, 9) | "
     "normalize(imagenet) | random_erasing(0.25)",
     T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.RandAugment(2, 9),
                T.ToTensor(), T.Normalize(MEAN, STD), T.RandomErasing(0.25)])),
    ("base", "random_resized_crop(224) | hflip(0.5) | normalize(imagenet)",
     T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize(MEAN, STD)])),
    ("tawide", "random_resized_crop(176) | hflip(0.5) | trivial_augment_wide | "
     "normalize(imagenet) | random_erasing(0.1)",
     T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
                T.ToTensor(), T.Normalize(MEAN, STD), T.RandomErasing(0.1)])),
    ("autoaug", "random_resized_crop(224) | hflip(0.5) | auto_augment | normalize(imagenet)",
     T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.AutoAugment(),
                T.ToTensor(), T.Normalize(MEAN, STD)])),
    ("augmix", "random_resized_crop(224) | hflip(0.5) | aug_mix | normalize(imagenet)",
     T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.AugMix(),
                T.ToTensor(), T.Normalize(MEAN, STD)])),
]


def recipe_rates(a, root, files, recipes):
    """Every recipe, stoker then torchvision, in each of a.rounds rounds:
    {(name, "stoker" | "torchvision"): [img/s per round]}."""
    rates = {(n, w): [] for n, _, _ in recipes for w in ("stoker", "torchvision")}
    for r in range(a.rounds):
        for name, chain, tf in recipes:
            t0 = time.perf_counter()
            subprocess.run([a.probe, "chainf", root, a.ds, chain, "/dev/null"], check=True,
                           stdout=subprocess.DEVNULL)
            rates[(name, "stoker")].append(len(files) / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for f in files:
                with Image.open(f) as im:
                    tf(im.convert("RGB"))
            rates[(name, "torchvision")].append(len(files) / (time.perf_counter() - t0))
    return rates


def report(a, files, recipes, rates):
    for name, chain, _ in recipes:
        rs, rt = rates[(name, "stoker")], rates[(name, "torchvision")]
        s, t = statistics.median(rs), statistics.median(rt)
        per = [x / y for x, y in zip(rs, rt)]
        print(f"{name}: {chain}\n  stoker {s:.0f} img/s, torchvision {t:.0f} img/s, "
              f"ratio of medians {s / t:.2f}x, per-round ratios "
              f"{' '.join(f'{v:.2f}' for v in per)} (median {statistics.median(per):.2f}x); "
              f"{a.rounds} alternating rounds, {len(files)} images, one thread")


def timm_mix(x, target, num_classes, rng):
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


def bench_mix(a, root, files):
    """The recipe with mixup_cutmix in batches: (stoker, torchvision) img/s
    per round."""
    chain = RECIPES[0][1] + " | mixup_cutmix(0.8, 1.0)"
    tf = RECIPES[0][2]
    B = a.batch
    steps = len(files) // B
    n = steps * B
    classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    labels = torch.tensor([classes.index(os.path.basename(os.path.dirname(f)))
                           for f in files], dtype=torch.int64)
    rng = np.random.default_rng(1)
    rs, rt = [], []
    for r in range(a.rounds):
        t0 = time.perf_counter()
        subprocess.run([a.probe, "mix", root, a.ds, chain, "float32", "nchw",
                        str(len(classes)), str(B), str(steps), "/dev/null"], check=True,
                       stdout=subprocess.DEVNULL)
        rs.append(n / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for s in range(steps):
            xs = []
            for f in files[s * B:(s + 1) * B]:
                with Image.open(f) as im:
                    xs.append(tf(im.convert("RGB")))
            timm_mix(torch.stack(xs), labels[s * B:(s + 1) * B], len(classes), rng)
        rt.append(n / (time.perf_counter() - t0))
    return rs, rt, chain, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("gen")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--files", help="an ImageFolder root to time instead of generated JPEGs")
    ap.add_argument("--only", help="recipes to run, comma-separated (mix: the batch one)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-recipe-")
    try:
        root = os.path.join(tmp, "d")
        a.ds = "imagefolder"
        if a.files:  # the probe reads ROOT/DATASET
            d = os.path.abspath(a.files).rstrip("/")
            root, a.ds = os.path.dirname(d), os.path.basename(d)
        else:
            subprocess.run([a.gen, "gen", "--out", root, "--count", str(a.count), "--classes",
                            "4", "--layout", "imagefolder", "--seed", "3"], check=True,
                           stdout=subprocess.DEVNULL)
        files = listing(os.path.join(root, a.ds))
        recipes = [r for r in RECIPES if not a.only or r[0] in a.only.split(",")]
        report(a, files, recipes, recipe_rates(a, root, files, recipes))
        if a.only and "mix" not in a.only.split(","):
            return
        rs, rt, chain, n = bench_mix(a, root, files)
        s, t = statistics.median(rs), statistics.median(rt)
        per = [x / y for x, y in zip(rs, rt)]
        print(f"mix: {chain}\n  stoker {s:.0f} img/s, torchvision+timm Mixup {t:.0f} img/s, "
              f"ratio of medians {s / t:.2f}x, per-round ratios "
              f"{' '.join(f'{v:.2f}' for v in per)} (median {statistics.median(per):.2f}x); "
              f"{a.rounds} alternating rounds, {n} images in batches of {a.batch}, one thread")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
