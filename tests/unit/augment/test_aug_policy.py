#!/usr/bin/python3
"""test_aug_policy.py - the augmentation policy ops against torchvision 0.14.

1. Every sub-op of the policies (shear_x ... invert) with its magnitude
   and p pinned, after center_crop(48) (square) or center_crop(48, 40),
   against torchvision's autoaugment `_apply_op` on the same PIL image
   (NEAREST, fill 0): exact, all of them.
2. rand_augment and trivial_augment_wide: `aug_probe policy` replays each
   sample's draws (op, magnitude bin, sign) from the sample's generator;
   the bins' magnitudes must be torchvision's own (within one float32 ulp:
   torch's linspace rounds by its vector width), and torchvision's
   `_apply_op` with those choices must give the chain's bytes exactly.

usage: test_aug_policy.py AUG_PROBE STOKER_DATASET. Exit 77 (skip) without
torch/torchvision/numpy.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import autoaugment as AA
    from torchvision.transforms import functional as TF
    from test_aug_parity import listing
except ImportError as e:  # the Debian packages are not installed
    print(f"skip: {e}")
    sys.exit(77)

SPACE = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
         "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
         "AutoContrast", "Equalize"]


def apply(im, name, m):
    return AA._apply_op(im, name, float(m), interpolation=InterpolationMode.NEAREST,
                        fill=None)


# (chain op, torchvision _apply_op name, its magnitude); magnitudes exact in
# float32, as the chain keeps them
SUB_OPS = [
    ("shear_x(0.25)", "ShearX", 0.25),
    ("shear_x(-0.75)", "ShearX", -0.75),
    ("shear_y(0.3125)", "ShearY", 0.3125),
    ("shear_y(-0.125)", "ShearY", -0.125),
    ("translate_x(7)", "TranslateX", 7),
    ("translate_x(-13.5)", "TranslateX", -13.5),
    ("translate_y(5)", "TranslateY", 5),
    ("translate_y(-30)", "TranslateY", -30),
    ("rotate_by(17.5)", "Rotate", 17.5),
    ("rotate_by(-121)", "Rotate", -121),
    ("rotate_by(90)", "Rotate", 90),
    ("rotate_by(-180)", "Rotate", -180),
    ("brightness(1.375)", "Brightness", 0.375),
    ("brightness(0.25)", "Brightness", -0.75),
    ("color(1.75)", "Color", 0.75),
    ("color(0.5)", "Color", -0.5),
    ("contrast(1.625)", "Contrast", 0.625),
    ("contrast(0.125)", "Contrast", -0.875),
    ("sharpness(1.875)", "Sharpness", 0.875),
    ("sharpness(0.0625)", "Sharpness", -0.9375),
    ("posterize(3)", "Posterize", 3),
    ("posterize(0)", "Posterize", 0),
    ("solarize(128)", "Solarize", 128),
    ("solarize(246.5)", "Solarize", 246.5),
    ("autocontrast", "AutoContrast", 0),
    ("equalize", "Equalize", 0),
    ("invert", "Invert", 0),
    ("invert(0)", "Identity", 0),
    ("identity", "Identity", 0),
]


def run_chain(probe, root, chain, tmp):
    out = os.path.join(tmp, "chain.bin")
    res = subprocess.run([probe, "chain", root, "imagefolder", chain, out], check=True,
                         capture_output=True, text=True)
    h, w = (int(v) for v in res.stdout.split())
    raw = open(out, "rb").read()
    rec = 8 + h * w * 3
    for k in range(len(raw) // rec):
        idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
        yield idx, np.frombuffer(raw, np.uint8, h * w * 3, k * rec + 8).reshape(h, w, 3)


def compare(name, pairs):
    worst, n, total = 0, 0, 0.0
    for ours, ref in pairs:
        if ref.shape != ours.shape:
            print(f"  {name}: shape {ours.shape} vs torchvision {ref.shape}  MISMATCH")
            return False
        d = np.abs(ours.astype(np.int32) - ref.astype(np.int32))
        worst = max(worst, int(d.max()))
        total += float(d.mean())
        n += 1
    print(f"{name}: {n} images, max diff {worst} (limit 0), mean {total / max(n, 1):.4f}"
          + ("" if worst == 0 else "  MISMATCH"))
    return worst == 0


def parity_sub_ops(probe, root, files, tmp):
    ok = True
    base = {}
    for crop in ["48", "48, 40"]:
        size = (48, 48) if crop == "48" else (48, 40)
        for chain, name, m in SUB_OPS:
            def pairs():
                for idx, ours in run_chain(probe, root, f"center_crop({crop}) | {chain}", tmp):
                    key = (idx, size)
                    if key not in base:
                        with Image.open(files[idx]) as im:
                            base[key] = TF.center_crop(im.convert("RGB"), list(size))
                    if name == "Invert":
                        ref = TF.invert(base[key])
                    else:
                        ref = apply(base[key], name, m)
                    yield ours, np.asarray(ref.convert("RGB"))
            ok = compare(f"op {chain} on {size[0]}x{size[1]}", pairs()) and ok
    return ok


def parity_policy(probe, root, files, tmp, op, wide):
    n = len(files)
    res = subprocess.run([probe, "policy", op, "40", "48", str(n), "42"], check=True,
                         capture_output=True, text=True)
    draws = res.stdout.split("\n")
    bins = 31
    if wide:
        meta = AA.TrivialAugmentWide(bins)._augmentation_space(bins)
    else:
        meta = AA.RandAugment(2, 9, bins)._augmentation_space(bins, (48, 40))
    ok, used = True, set()

    def pairs():
        nonlocal ok
        for idx, ours in run_chain(probe, root, f"center_crop(48, 40) | {op}", tmp):
            with Image.open(files[idx]) as im:
                img = TF.center_crop(im.convert("RGB"), [48, 40])
            for g in draws[idx].split(";"):
                pa, b, neg, m = g.split()
                name = SPACE[int(pa)]
                used.add(name)
                mags, signed = meta[name]
                ref_m = float(mags[int(b)].item()) if mags.ndim > 0 else 0.0
                m = float(m)
                if abs(m - ref_m) > abs(ref_m) * 2.0 ** -23:
                    print(f"  {op}: {name} bin {b}: magnitude {m!r}, torchvision's {ref_m!r}")
                    ok = False
                if int(neg):
                    m = -m
                img = apply(img, name, m)
            yield ours, np.asarray(img)
    good = compare(f"policy {op}", pairs())
    print(f"  sub-ops drawn: {len(used)} of {len(SPACE)}")
    return good and ok and len(used) == len(SPACE)


def main():
    probe, gen = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-policy-")
    try:
        subprocess.run([gen, "gen", "--out", os.path.join(tmp, "d"), "--count", "64",
                        "--classes", "3", "--layout", "imagefolder", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        root = os.path.join(tmp, "d")
        files = listing(os.path.join(root, "imagefolder"))
        ok = parity_sub_ops(probe, root, files, tmp)
        ok = parity_policy(probe, root, files, tmp, "rand_augment(2, 9)", False) and ok
        ok = parity_policy(probe, root, files, tmp, "rand_augment(3, 30)", False) and ok
        ok = parity_policy(probe, root, files, tmp, "trivial_augment_wide", True) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
