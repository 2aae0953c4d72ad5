#!/usr/bin/python3
"""recipe_chain_bench.py - images per second of an op chain against
torchvision's same recipe on the same files, one thread each, alternating
rounds, medians.

stoker builds each sample through `aug_probe chainf` (a builder with
batch size 1, float32 NCHW, output to /dev/null: the process start and the
dataset open are timed too, amortized over the round); torchvision runs the
Compose on PIL images in this process (torch.set_num_threads(1)).

usage: recipe_chain_bench.py AUG_PROBE STOKER_DATASET [--count N] [--rounds R]
Default: the timm-style recipe
  random_resized_crop(224) | hflip(0.5) | rand_augment(2, 9) |
  normalize(imagenet) | random_erasing(0.25)
and, as a reference in the same rounds, the chain without its two
policies (random_resized_crop | hflip | normalize).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

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
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("gen")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-recipe-")
    try:
        subprocess.run([a.gen, "gen", "--out", os.path.join(tmp, "d"), "--count",
                        str(a.count), "--classes", "4", "--layout", "imagefolder",
                        "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        root = os.path.join(tmp, "d")
        files = listing(os.path.join(root, "imagefolder"))
        rates = {(n, w): [] for n, _, _ in RECIPES for w in ("stoker", "torchvision")}
        for r in range(a.rounds):
            for name, chain, tf in RECIPES:
                t0 = time.perf_counter()
                subprocess.run([a.probe, "chainf", root, "imagefolder", chain, "/dev/null"],
                               check=True, stdout=subprocess.DEVNULL)
                rates[(name, "stoker")].append(len(files) / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                for f in files:
                    with Image.open(f) as im:
                        tf(im.convert("RGB"))
                rates[(name, "torchvision")].append(len(files) / (time.perf_counter() - t0))
        for name, chain, _ in RECIPES:
            s = statistics.median(rates[(name, "stoker")])
            t = statistics.median(rates[(name, "torchvision")])
            print(f"{name}: {chain}\n  stoker {s:.0f} img/s, torchvision {t:.0f} img/s, "
                  f"ratio {s / t:.2f}x (medians of {a.rounds} alternating rounds, "
                  f"{len(files)} images, one thread)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
