#!/usr/bin/python3
"""test_aug_policy.py - the augmentation policy ops against torchvision 0.14.

1. Every sub-op of the policies (shear_x ... invert) with its magnitude
   and p pinned, after center_crop(48) (square) or center_crop(48, 40),
   against torchvision's autoaugment `_apply_op` on the same PIL image
   (NEAREST, fill 0): exact, all of them; shears and a rotation of images
   32760 pixels long (PIL's floating-point affine path) likewise.
2. rand_augment and trivial_augment_wide: `aug_probe policy` replays each
   sample's draws (op, magnitude bin, sign) from the sample's generator;
   the bins' magnitudes must be torchvision's own (within one float32 ulp:
   torch's linspace rounds by its vector width), and torchvision's
   `_apply_op` with those choices must give the chain's bytes exactly;
   auto_augment likewise, its three policy tables (`aug_probe aa_table`)
   equal to torchvision's.
3. random_erasing: its rectangles (`aug_probe erasing`) against
   RandomErasing.get_params (Kolmogorov-Smirnov on area, log aspect ratio
   and position, and the rate of erased samples); then, with each sample's
   rectangle pinned, the chain's normalized float32 tensor against
   torchvision's Normalize + F.erase: the erased values exact (value=0.5),
   or standard normal (value=random), the rest as Normalize makes it.

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
    from torchvision import transforms as T
    from test_aug_parity import MEAN, STD, ks, listing
except ImportError as e:  # the Debian packages are not installed
    print(f"skip: {e}")
    sys.exit(77)

SPACE = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
         "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
         "AutoContrast", "Equalize", "Invert"]


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


def parity_wide(probe, tmp):
    """PIL's floating-point affine path: images 32760 pixels long, whose
    sheared or rotated corners map past 32768 (the 16.16 path's range)."""
    root = os.path.join(tmp, "wide")
    os.makedirs(os.path.join(root, "imagefolder", "c0"))
    rng = np.random.default_rng(0)
    for name, shape in [("a.png", (24, 32760, 3)), ("b.png", (32760, 22, 3))]:
        Image.fromarray(rng.integers(0, 256, shape).astype(np.uint8)).save(
            os.path.join(root, "imagefolder", "c0", name))
    files = listing(os.path.join(root, "imagefolder"))
    ok = True
    for chain, name, m in [("shear_x(0.99)", "ShearX", np.float32(0.99)),
                           ("shear_y(-0.99)", "ShearY", np.float32(-0.99)),
                           ("rotate_by(1)", "Rotate", 1.0)]:
        def pairs():
            for idx, ours in run_chain(probe, root, f"{chain} | center_crop(22, 20)", tmp):
                with Image.open(files[idx]) as im:
                    ref = TF.center_crop(apply(im.convert("RGB"), name, float(m)), [22, 20])
                yield ours, np.asarray(ref)
        ok = compare(f"op {chain} on 32760-pixel sides", pairs()) and ok
    return ok


def parity_aa_table(probe):
    ok = True
    for pol in AA.AutoAugmentPolicy:
        res = subprocess.run([probe, "aa_table", pol.value], check=True,
                             capture_output=True, text=True)
        ours = [ln.split() for ln in res.stdout.split("\n") if ln]
        ref = AA.AutoAugment(pol)._get_policies(pol)
        same = len(ours) == len(ref) and all(
            SPACE[int(o[3 * i])] == r[i][0]
            and np.float32(o[3 * i + 1]) == np.float32(r[i][1])
            and int(o[3 * i + 2]) == (-1 if r[i][2] is None else r[i][2])
            for o, r in zip(ours, ref) for i in range(2))
        print(f"auto_augment({pol.value}) policy table: {len(ours)} rows"
              + (", torchvision's" if same else "  MISMATCH"))
        ok = ok and same
    return ok


def parity_policy(probe, root, files, tmp, op, wide, space=len(SPACE) - 1):
    n = len(files)
    res = subprocess.run([probe, "policy", op, "40", "48", str(n), "42"], check=True,
                         capture_output=True, text=True)
    draws = res.stdout.split("\n")
    bins = 31
    if op.startswith("auto_augment"):
        bins = 10
        meta = AA.AutoAugment()._augmentation_space(bins, (48, 40))
    elif wide:
        meta = AA.TrivialAugmentWide(bins)._augmentation_space(bins)
    else:
        meta = AA.RandAugment(2, 9, bins)._augmentation_space(bins, (48, 40))
    ok, used = True, set()

    def pairs():
        nonlocal ok
        for idx, ours in run_chain(probe, root, f"center_crop(48, 40) | {op}", tmp):
            with Image.open(files[idx]) as im:
                img = TF.center_crop(im.convert("RGB"), [48, 40])
            for g in filter(None, draws[idx].split(";")):
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
    print(f"  sub-ops drawn: {len(used)} (want {space})")
    return good and ok and len(used) >= space


def parity_erasing_boxes(probe):
    ok = True
    n = 20000
    for (W, H, op, p, scale, ratio) in [
            (224, 224, "random_erasing(1)", 1.0, (0.02, 0.33), (0.3, 3.3)),
            (40, 48, "random_erasing(0.25, scale=0.1:0.6, ratio=0.5:4)", 0.25, (0.1, 0.6),
             (0.5, 4.0))]:
        res = subprocess.run([probe, "erasing", op, str(W), str(H), str(n), "9"], check=True,
                             capture_output=True, text=True)
        lines = [ln for ln in res.stdout.split("\n") if ln]
        ours = np.array([[int(v) for v in ln.split()] for ln in lines if ln != "-"])
        rate = len(ours) / len(lines)
        torch.manual_seed(0)
        img = torch.zeros(3, H, W)
        ref = []
        for _ in range(n):
            if torch.rand(1) < p:
                i, j, h, w, _v = T.RandomErasing.get_params(img, scale, ratio, [0.0])
                if (h, w) != (H, W):  # erased: (x, y, w, h)
                    ref.append((j, i, w, h))
        ref = np.array(ref)
        ref_rate = len(ref) / n
        crit = 1.95 * np.sqrt(1.0 / len(ours) + 1.0 / len(ref))  # alpha = 0.001
        stats = {}
        for name, f in [("area", lambda b: b[:, 2] * b[:, 3] / (W * H)),
                        ("log_ratio", lambda b: np.log(b[:, 3] / b[:, 2])),
                        ("x", lambda b: b[:, 0] / W), ("y", lambda b: b[:, 1] / H)]:
            stats[name] = ks(f(ours), f(ref))
        good = all(v < crit for v in stats.values()) and abs(rate - ref_rate) < 0.02
        print(f"erasing boxes {op} on {W}x{H}: KS " +
              ", ".join(f"{k} {v:.4f}" for k, v in stats.items()) +
              f" (critical {crit:.4f}); erased {rate:.3f} vs {ref_rate:.3f}" +
              ("" if good else "  MISMATCH"))
        ok = ok and good
    return ok


def parity_erasing(probe, root, files, tmp):
    n = len(files)
    ok = True
    for value in ["0.5", "random"]:
        op = f"random_erasing(0.7, value={value})"
        res = subprocess.run([probe, "erasing", op, "40", "48", str(n), "42"], check=True,
                             capture_output=True, text=True)
        boxes = res.stdout.split("\n")
        out = os.path.join(tmp, "chainf.bin")
        subprocess.run([probe, "chainf", root, "imagefolder",
                        f"center_crop(48, 40) | normalize(imagenet) | {op}", out],
                       check=True, capture_output=True)
        raw = open(out, "rb").read()
        rec = 8 + 3 * 48 * 40 * 4
        tf = T.Compose([T.CenterCrop((48, 40)), T.ToTensor(), T.Normalize(MEAN, STD)])
        worst_out, worst_in, erased, drawn = 0.0, 0.0, 0, []
        for k in range(len(raw) // rec):
            idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
            ours = torch.from_numpy(np.frombuffer(raw, np.float32, 3 * 48 * 40,
                                                  k * rec + 8).copy()).view(3, 48, 40)
            with Image.open(files[idx]) as im:
                ref = tf(im.convert("RGB"))
            inside = torch.zeros(3, 48, 40, dtype=torch.bool)
            if boxes[idx] != "-":
                x, y, w, h = (int(v) for v in boxes[idx].split())
                erased += 1
                inside[:, y:y + h, x:x + w] = True
                if value == "random":
                    drawn.append(ours[inside].numpy())
                else:
                    ref = TF.erase(ref, y, x, h, w, torch.tensor([float(value)]))
                    worst_in = max(worst_in, float((ours - ref)[inside].abs().max()))
            d = (ours - ref)[~inside].abs()
            worst_out = max(worst_out, float(d.max()) if d.numel() else 0.0)
        good = worst_out < 1e-5 and worst_in == 0 and erased > 0
        extra = ""
        if value == "random":
            v = np.concatenate(drawn)
            extra = f", erased values mean {v.mean():.4f} std {v.std():.4f} ({len(v)})"
            good = good and abs(v.mean()) < 0.05 and abs(v.std() - 1) < 0.05
        print(f"erasing {op} after normalize: {n} images, {erased} erased; max diff "
              f"outside {worst_out:.2e} (limit 1e-5), inside {worst_in} (limit 0){extra}"
              + ("" if good else "  MISMATCH"))
        ok = ok and good
    return ok


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
        ok = parity_wide(probe, tmp) and ok
        ok = parity_aa_table(probe) and ok
        ok = parity_policy(probe, root, files, tmp, "auto_augment", False, 6) and ok
        ok = parity_policy(probe, root, files, tmp, "auto_augment(svhn)", False, 6) and ok
        ok = parity_policy(probe, root, files, tmp, "auto_augment(cifar10)", False, 8) and ok
        ok = parity_erasing_boxes(probe) and ok
        ok = parity_erasing(probe, root, files, tmp) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
