#!/usr/bin/python3
"""test_aug_parity.py - stoker's augmentation against torchvision.

1. Resize(256)+CenterCrop(224)+Normalize on generated JPEGs (baseline,
   progressive, grayscale): the mean absolute difference from torchvision
   (PIL backend) per pixel, on the 0..1 scale, must stay below 2/255, for
   the whole set and for each image.
2. RandomResizedCrop's crop boxes: the distributions of area fraction,
   log aspect ratio and position (and the fallback rate) match
   torchvision's get_params (two-sample Kolmogorov-Smirnov at alpha 1e-3).

usage: test_aug_parity.py AUG_PROBE STOKER_DATASET. Exit 77 (skip) without
torch/torchvision/numpy.
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from PIL import Image
    from torchvision import transforms as T
except ImportError as e:  # the Debian packages are not installed
    print(f"skip: {e}")
    sys.exit(77)

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def ks(a, b):
    a, b = np.sort(a), np.sort(b)
    allv = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, allv, side="right") / len(a)
    cdf_b = np.searchsorted(b, allv, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def parity_eval(probe, gen, tmp):
    subprocess.run([gen, "gen", "--out", os.path.join(tmp, "d"), "--count", "48",
                    "--classes", "3", "--layout", "imagefolder", "--seed", "11"],
                   check=True, stdout=subprocess.DEVNULL)
    root = os.path.join(tmp, "d")
    folder = os.path.join(root, "imagefolder")
    files = []
    for c in sorted(e.name for e in os.scandir(folder) if e.is_dir()):
        files += [os.path.join(folder, c, f)
                  for f in sorted(os.listdir(os.path.join(folder, c)))]
    out = os.path.join(tmp, "eval.bin")
    subprocess.run([probe, "eval", root, "imagefolder", out], check=True)
    raw = open(out, "rb").read()
    rec = 8 + 3 * 224 * 224 * 4
    assert len(raw) == rec * len(files), (len(raw), len(files))
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    std = torch.tensor(STD).view(3, 1, 1)
    worst, total = 0.0, 0.0
    for k in range(len(files)):
        idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
        ours = torch.from_numpy(np.frombuffer(raw, np.float32, 3 * 224 * 224,
                                              k * rec + 8).copy()).view(3, 224, 224)
        with Image.open(files[idx]) as im:
            ref = tf(im.convert("RGB"))
        mad = float(((ours - ref).abs() * std).mean())  # on the 0..1 scale
        worst = max(worst, mad)
        total += mad
    mean = total / len(files)
    print(f"eval parity: {len(files)} images, MAD mean {mean * 255:.3f}/255, "
          f"worst image {worst * 255:.3f}/255 (limit 2/255)")
    return mean < 2 / 255 and worst < 2 / 255


def parity_boxes(probe):
    ok = True
    n = 20000
    for (W, H) in [(500, 375), (300, 1000), (1200, 200)]:
        res = subprocess.run([probe, "boxes", str(W), str(H), str(n), "7"],
                             check=True, capture_output=True, text=True)
        ours = np.array([[int(v) for v in ln.split()] for ln in res.stdout.split("\n") if ln])
        torch.manual_seed(0)
        img = torch.empty(3, H, W)
        ref = np.array([T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3])
                        for _ in range(n)])
        ref = ref[:, [1, 0, 3, 2]]  # (i, j, h, w) -> (x, y, w, h)
        crit = 1.95 * np.sqrt(2.0 / n)  # KS critical value, alpha = 0.001
        stats = {}
        for name, f in [("area", lambda b: b[:, 2] * b[:, 3] / (W * H)),
                        ("log_ratio", lambda b: np.log(b[:, 2] / b[:, 3])),
                        ("x", lambda b: b[:, 0] / W), ("y", lambda b: b[:, 1] / H)]:
            stats[name] = ks(f(ours), f(ref))
        full = lambda b: float(np.mean((b[:, 2] == W) | (b[:, 3] == H)))
        fo, fr = full(ours), full(ref)
        good = all(v < crit for v in stats.values()) and abs(fo - fr) < 0.02
        print(f"boxes {W}x{H}: KS " + ", ".join(f"{k} {v:.4f}" for k, v in stats.items())
              + f" (critical {crit:.4f}); full-side rate {fo:.3f} vs {fr:.3f}"
              + ("" if good else "  MISMATCH"))
        ok = ok and good
    return ok


def main():
    probe, gen = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-parity-")
    try:
        ok = parity_eval(probe, gen, tmp)
        ok = parity_boxes(probe) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
