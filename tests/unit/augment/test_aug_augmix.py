#!/usr/bin/python3
"""test_aug_augmix.py - aug_mix against torchvision 0.14's AugMix.

torchvision's AugMix turns a PIL image into a uint8 tensor and runs the
tensor kernels (bilinear by default), so that is what aug_mix matches.

1. Each operation of AugMix's space (`aug_probe tensor_op`) against
   torchvision's `_apply_op` on the uint8 tensor (BILINEAR, fill None),
   every bin of its 10 and both signs, on 48x40 crops of the generated
   set and on a 400x400 resize (contrast's grayscale sum past 2^24): the
   maximum difference and the share of values that differ, per op: exact
   (contrast within one level, 1% of values: torch rounds its float32
   mean's partial sums in its own order past 2^24).
2. The policy: `aug_probe augmix` replays each sample's draws (the Beta and
   Dirichlet weights, each chain's depth, ops, bins and signs); the same
   values are handed to torchvision's own AugMix.forward (its
   `_sample_dirichlet` and torch.randint pinned to them) on the PIL image,
   and its output must equal the chain's bytes (limit one level on 1% of
   values, for contrast's mean on large images; exact on these).
3. The draws themselves against torchvision's: the Beta weight, the
   Dirichlet weights (Kolmogorov-Smirnov against torch._sample_dirichlet),
   the depth and op frequencies.

usage: test_aug_augmix.py AUG_PROBE STOKER_DATASET. Exit 77 (skip) without
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
    from test_aug_parity import ks, listing
except ImportError as e:  # the Debian packages are not installed
    print(f"skip: {e}")
    sys.exit(77)

# STK__PA_* numbers, as aug_probe prints them
PA = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
      "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
      "AutoContrast", "Equalize", "Invert"]
# (limit on the largest difference, limit on the share of differing values)
# exact, but contrast: torch's float32 mean past 2^24 (sum of the grayscale
# values) is rounded in its own summation order, stoker's sum is exact
LIMITS = {name: (0, 0.0) for name in PA}
LIMITS["Contrast"] = (1, 0.01)


def probe_out(probe, *args):
    return subprocess.run([probe, *args], check=True, capture_output=True,
                          text=True).stdout


def tv_op(t, name, m):
    return AA._apply_op(t, name, float(m), interpolation=InterpolationMode.BILINEAR,
                        fill=None)


def parity_tensor_ops(probe, imgs, tmp, tag):
    """imgs: list of HxWx3 uint8 arrays of one size."""
    h, w = imgs[0].shape[:2]
    src = os.path.join(tmp, "ops_in.bin")
    dst = os.path.join(tmp, "ops_out.bin")
    with open(src, "wb") as f:
        for im in imgs:
            f.write(im.tobytes())
    space = AA.AugMix()._augmentation_space(10, (h, w))
    ok = True
    for name, (mags, signed) in space.items():
        worst, differ, total = 0, 0, 0
        cases = [float(v) for v in mags] if mags.ndim > 0 else [0.0]
        if signed:
            cases += [-v for v in cases if v != 0]
        for m in cases:
            subprocess.run([probe, "tensor_op", str(PA.index(name)), repr(m), str(w), str(h),
                            src, dst], check=True)
            raw = np.fromfile(dst, np.uint8).reshape(len(imgs), h, w, 3)
            for k, im in enumerate(imgs):
                ref = tv_op(torch.from_numpy(im).permute(2, 0, 1).contiguous(), name, m)
                d = np.abs(raw[k].astype(np.int32) -
                           ref.permute(1, 2, 0).numpy().astype(np.int32))
                worst = max(worst, int(d.max()))
                differ += int((d != 0).sum())
                total += d.size
        lim, share_lim = LIMITS[name]
        share = differ / total
        good = worst <= lim and share <= share_lim
        print(f"tensor op {name} on {tag}: {len(cases)} magnitudes x {len(imgs)} images, "
              f"max diff {worst} (limit {lim}), values differing {share:.6f} "
              f"(limit {share_lim})" + ("" if good else "  MISMATCH"))
        ok = ok and good
    return ok


def parse_draws(line):
    parts = line.split("/")
    m = [float(v) for v in parts[0].split()]
    d = [float(v) for v in parts[1].split()]
    chains = [[tuple(float(x) if i == 3 else int(x) for i, x in enumerate(g.split()))
               for g in c.split(",")] for c in parts[2:]]
    return m, d, chains


class Pinned:
    """torch.randint and AugMix._sample_dirichlet answering from a queue."""

    def __init__(self):
        self.ints, self.dirichlet, self.real = [], [], torch.randint

    def randint(self, *args, **kwargs):
        return torch.tensor([self.ints.pop(0)])

    def sample_dirichlet(self, params):
        return torch.tensor([self.dirichlet.pop(0)], dtype=torch.float32)


def parity_policy(probe, root, files, tmp, op, severity, width, depth, alpha, all_ops):
    n = len(files)
    draws = probe_out(probe, "augmix", op, "40", "48", str(n), "42").split("\n")
    aug = AA.AugMix(severity, width, depth, alpha, all_ops)
    names = list(aug._augmentation_space(10, (48, 40)).keys())
    pin = Pinned()
    aug._sample_dirichlet = pin.sample_dirichlet
    out = os.path.join(tmp, "chain.bin")
    hw = probe_out(probe, "chain", root, "imagefolder", f"center_crop(48, 40) | {op}", out)
    h, w = (int(v) for v in hw.split())
    raw = open(out, "rb").read()
    rec = 8 + h * w * 3
    worst, differ, total, used, ok = 0, 0, 0, set(), True
    for k in range(len(raw) // rec):
        idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
        ours = np.frombuffer(raw, np.uint8, h * w * 3, k * rec + 8).reshape(h, w, 3)
        m, d, chains = parse_draws(draws[idx])
        pin.dirichlet = [m, d]
        pin.ints = []
        for c in chains:
            if depth <= 0:
                pin.ints.append(len(c))
            for pa, b, neg, mag in c:
                name = PA[pa]
                used.add(name)
                pin.ints.append(names.index(name))
                mags, signed = aug._augmentation_space(10, (48, 40))[name]
                if mags.ndim > 0:
                    pin.ints.append(b)
                    ref_m = float(mags[b].item())
                    if abs(mag - ref_m) > abs(ref_m) * 2.0 ** -23:
                        print(f"  {op}: {name} bin {b}: magnitude {mag!r}, "
                              f"torchvision's {ref_m!r}")
                        ok = False
                if signed:
                    pin.ints.append(neg)
        with Image.open(files[idx]) as im:
            img = TF.center_crop(im.convert("RGB"), [48, 40])
        torch.randint = pin.randint
        try:
            ref = np.asarray(aug(img))
        finally:
            torch.randint = pin.real
        if pin.ints or pin.dirichlet:
            print(f"  {op}: sample {idx}: draws left over {pin.ints} {pin.dirichlet}")
            ok = False
        dd = np.abs(ours.astype(np.int32) - ref.astype(np.int32))
        worst = max(worst, int(dd.max()))
        differ += int((dd != 0).sum())
        total += dd.size
    want = len(names)
    share = differ / max(total, 1)
    good = ok and worst <= 1 and share <= 0.01 and len(used) == want
    print(f"policy {op}: {total // (h * w * 3)} images, max diff {worst} (limit 1), values "
          f"differing {share:.6f} (limit 0.01); ops drawn {len(used)} of {want}"
          + ("" if good else "  MISMATCH"))
    return good


def parity_draws(probe):
    n = 4000
    lines = probe_out(probe, "augmix", "aug_mix(severity=3, width=3, alpha=0.7)", "40",
                      "48", str(n), "7").split("\n")[:n]
    rows = [parse_draws(ln) for ln in lines]
    m1 = np.array([r[0][1] for r in rows])
    d0 = np.array([r[1][0] for r in rows])
    depths = np.array([len(c) for r in rows for c in r[2]])
    ops = np.array([g[0] for r in rows for c in r[2] for g in c])
    torch.manual_seed(0)
    ref_m = torch._sample_dirichlet(torch.tensor([0.7, 0.7]).expand(n, -1))[:, 1].numpy()
    ref_d = torch._sample_dirichlet(torch.tensor([0.7] * 3).expand(n, -1))[:, 0].numpy()
    crit = 1.95 * np.sqrt(2.0 / n)  # alpha = 0.001
    k_m, k_d = ks(m1, ref_m), ks(d0, ref_d)
    dep = np.bincount(depths, minlength=4)[1:] / len(depths)
    opf = np.bincount(ops, minlength=len(PA)) / len(ops)
    opf = opf[opf > 0]
    good = (k_m < crit and k_d < crit and np.all(np.abs(dep - 1 / 3) < 0.02)
            and len(opf) == 13 and np.all(np.abs(opf - 1 / 13) < 0.01))
    print(f"draws: KS Beta {k_m:.4f}, Dirichlet {k_d:.4f} (critical {crit:.4f}); depths "
          f"{np.round(dep, 3).tolist()}; op frequencies {opf.min():.4f}..{opf.max():.4f}"
          + ("" if good else "  MISMATCH"))
    return good


def main():
    probe, gen = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-augmix-")
    try:
        subprocess.run([gen, "gen", "--out", os.path.join(tmp, "d"), "--count", "48",
                        "--classes", "3", "--layout", "imagefolder", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        root = os.path.join(tmp, "d")
        files = listing(os.path.join(root, "imagefolder"))
        crops, big = [], []
        for f in files[:8]:
            with Image.open(f) as im:
                rgb = im.convert("RGB")
                crops.append(np.array(TF.center_crop(rgb, [48, 40])))
                if not big:
                    big.append(np.array(TF.resize(rgb, [400, 400])))
        ok = parity_tensor_ops(probe, crops, tmp, "48x40")
        ok = parity_tensor_ops(probe, big, tmp, "400x400") and ok
        ok = parity_policy(probe, root, files, tmp, "aug_mix", 3, 3, -1, 1.0, True) and ok
        ok = parity_policy(probe, root, files, tmp,
                           "aug_mix(severity=10, width=4, depth=2, alpha=0.5)", 10, 4, 2,
                           0.5, True) and ok
        ok = parity_policy(probe, root, files, tmp, "aug_mix(all_ops=0)", 3, 3, -1, 1.0,
                           False) and ok
        ok = parity_draws(probe) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
