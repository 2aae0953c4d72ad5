#!/usr/bin/python3
"""test_aug_mix.py - the batch ops (mixup, cutmix, mixup_cutmix) against a
NumPy reimplementation of timm's Mixup (timm/data/mixup.py: batch mode
(_mix_batch), pair and elem modes (_mix_pair, _mix_elem, float32
lam_batch), rand_bbox, rand_bbox_minmax, cutmix_bbox_and_lam,
mixup_target, x.flip(0) pairing; FastCollateMixup's rounding for uint8;
for bfloat16 the float32 formula on x.float() cast back with torch).

1. `aug_probe mix` builds batches of a chain with and without its batch
   op and prints each batch's draws (lam, the cutmix centre); the formula
   here, fed the unmixed batch and those draws, must give the mixed
   images and the soft targets byte for byte: float32 NCHW and NHWC,
   bfloat16, uint8, with random_erasing before the mix, an odd batch,
   p < 1 (batches left unmixed keep their images, targets smoothed
   one-hot); in pair and elem modes each row's draws replayed (`aug_probe
   mix` prints them row by row), with and without cutmix minmax, odd
   batches (pair: the middle row unmixed; elem: mixed with itself).
2. The draws (`aug_probe mixdraws`) over 20,000 batch positions: lam
   against numpy.random.beta (Kolmogorov-Smirnov below the alpha 0.001
   critical value) for alphas 0.2, 0.8, 1 and 4; the rates of mixed
   batches (p) and of cutmix (switch) within 0.02; cutmix centres uniform
   (KS against numpy.random.randint); with minmax, the cut's height
   against numpy.random.randint over timm's range (KS), its top within
   range.

usage: test_aug_mix.py AUG_PROBE STOKER_DATASET. Exit 77 (skip) without
numpy/torch.
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
    from test_aug_parity import ks
except ImportError as e:  # the Debian packages are not installed
    print(f"skip: {e}")
    sys.exit(77)

NCLASSES = 3  # the generated ImageFolder's class folders


# ---- timm's formulas (timm/data/mixup.py), in NumPy ------------------------
def rand_bbox_minmax(shape, minmax, cut_h, cut_w, yl, xl):
    """timm's rand_bbox_minmax with its four randint draws pinned (checked
    to lie in the ranges numpy would draw them from)."""
    img_h, img_w = shape[-2:]
    lo_h, hi_h = int(img_h * minmax[0]), int(img_h * minmax[1])
    lo_w, hi_w = int(img_w * minmax[0]), int(img_w * minmax[1])
    assert lo_h <= cut_h < max(hi_h, lo_h + 1), (cut_h, lo_h, hi_h)
    assert lo_w <= cut_w < max(hi_w, lo_w + 1), (cut_w, lo_w, hi_w)
    assert 0 <= yl < max(img_h - cut_h, 1) and 0 <= xl < max(img_w - cut_w, 1)
    return yl, yl + cut_h, xl, xl + cut_w


def rand_bbox(shape, lam, cy, cx):
    """timm's rand_bbox with the centre pinned (randint's draws)."""
    ratio = np.sqrt(1 - lam)
    img_h, img_w = shape[-2:]
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    yl = np.clip(cy - cut_h // 2, 0, img_h)
    yh = np.clip(cy + cut_h // 2, 0, img_h)
    xl = np.clip(cx - cut_w // 2, 0, img_w)
    xh = np.clip(cx + cut_w // 2, 0, img_w)
    return yl, yh, xl, xh


def cutmix_bbox_and_lam(shape, lam, cy, cx, minmax=None, box=None):
    if minmax is not None:  # box: the probe's y0 y1 x0 x1
        yl, yu, xl, xu = rand_bbox_minmax(shape, minmax, box[1] - box[0], box[3] - box[2],
                                          cy, cx)
    else:
        yl, yu, xl, xu = rand_bbox(shape, lam, cy, cx)
    bbox_area = (yu - yl) * (xu - xl)
    lam = 1. - bbox_area / float(shape[-2] * shape[-1])  # correct_lam=True
    return (yl, yu, xl, xu), lam


def one_hot(x, num_classes, on_value, off_value):
    y = np.full((len(x), num_classes), np.float32(off_value), dtype=np.float32)
    y[np.arange(len(x)), x] = np.float32(on_value)
    return y


def mixup_target(target, num_classes, lam, smoothing):
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value, off_value)
    y2 = one_hot(target[::-1], num_classes, on_value, off_value)
    return y1 * np.float32(lam) + y2 * np.float32(1. - lam)


def mix_batch(x, lam, use_cutmix, cy, cx, dtype, minmax=None, box=None):
    """Mixup._mix_batch on x ([B, C, H, W], the job's dtype as NumPy float32,
    uint8, or a torch bfloat16 tensor); returns (x, lam)."""
    if lam == 1.:
        return x, 1.
    if use_cutmix:
        (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(x.shape, lam, cy, cx, minmax, box)
        x = x.copy() if dtype != "bfloat16" else x.clone()
        flipped = x[::-1].copy() if dtype != "bfloat16" else x.flip(0)
        x[:, :, yl:yh, xl:xh] = flipped[:, :, yl:yh, xl:xh]
    elif dtype == "bfloat16":  # timm's float32 formula on x.float(), cast back
        xf = x.float()
        x = xf.mul(lam).add_(xf.flip(0).mul_(1. - lam)).bfloat16()
    elif dtype == "uint8":  # FastCollateMixup
        mixed = x.astype(np.float32) * np.float32(lam) + \
            x[::-1].astype(np.float32) * np.float32(1 - lam)
        np.rint(mixed, out=mixed)
        x = mixed.astype(np.uint8)
    else:
        x = x * np.float32(lam) + x[::-1] * np.float32(1. - lam)
    return x, lam


def blend_rows(xi, xj, lam, dtype):
    """timm's x[i] * lam + x_orig[j] * (1 - lam) with lam a float32 element of
    lam_batch (1 - lam a float64, multiplied in float32); FastCollateMixup's
    rint for uint8; the float32 formula cast back for bfloat16."""
    if dtype == "bfloat16":
        return (xi.float() * float(lam) + xj.float() * float(1 - lam)).bfloat16()
    m = xi.astype(np.float32) * lam + xj.astype(np.float32) * (1 - lam)
    if dtype == "uint8":
        np.rint(m, out=m)
        return m.astype(np.uint8)
    return m


def mix_rows(x, rows, mode, dtype, minmax=None):
    """Mixup._mix_elem / _mix_pair (FastCollateMixup's for uint8) on x, with
    row i's draws pinned to rows[i] (mixed, cutmix, lam, weight, cy, cx, y0,
    y1, x0, x1); returns (x, lam_batch as timm's [B] float32, odd pair batches
    with 1 for their middle row)."""
    B = len(x)
    n = B if mode == "elem" else B // 2
    lam_batch = np.array([float(r[2]) for r in rows[:n]], dtype=np.float32)
    x_orig = x.clone() if dtype == "bfloat16" else x.copy()
    x = x.clone() if dtype == "bfloat16" else x.copy()
    for i in range(n):
        j = B - i - 1
        lam = lam_batch[i]
        r = rows[i]
        if lam != 1.:
            if int(r[1]):
                (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(
                    x[i].shape, lam, int(r[4]), int(r[5]), minmax,
                    [int(v) for v in r[6:10]])
                x[i][:, yl:yh, xl:xh] = x_orig[j][:, yl:yh, xl:xh]
                if mode == "pair":
                    x[j][:, yl:yh, xl:xh] = x_orig[i][:, yl:yh, xl:xh]
                lam_batch[i] = lam
            else:
                x[i] = blend_rows(x_orig[i], x_orig[j], lam, dtype)
                if mode == "pair":
                    x[j] = blend_rows(x_orig[j], x_orig[i], lam, dtype)
    if mode == "pair":
        mid = [np.float32(1)] if B % 2 else []
        lam_batch = np.concatenate((lam_batch, mid, lam_batch[::-1])).astype(np.float32)
    return x, lam_batch


def mixup_target_rows(target, num_classes, lam, smoothing):
    """mixup_target with lam a float32 [B, 1] tensor."""
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value, off_value)
    y2 = one_hot(target[::-1], num_classes, on_value, off_value)
    lam = lam.reshape(-1, 1)
    return y1 * lam + y2 * (np.float32(1) - lam)


# ---- the probe's batches ----------------------------------------------------
ESIZE = {"float32": 4, "bfloat16": 2, "uint8": 1}


def probe_batches(probe, root, chain, dtype, layout, B, steps, out):
    res = subprocess.run([probe, "mix", root, "imagefolder", chain, dtype, layout,
                          str(NCLASSES), str(B), str(steps), out],
                         check=True, capture_output=True, text=True)
    lines = res.stdout.split("\n")
    H, W = (int(v) for v in lines[0].split())
    draws = [[r.split() for r in ln.split(";")] if ";" in ln else ln.split()
             for ln in lines[1:] if ln]
    with open(out, "rb") as f:
        data = f.read()
    n_img = B * 3 * H * W * ESIZE[dtype]
    mixes = "mixup" in chain or "cutmix" in chain
    per = n_img + 8 * B + (4 * B * NCLASSES if mixes else 0)
    if len(data) != per * steps:
        raise SystemExit(f"probe wrote {len(data)} bytes, want {per * steps}")
    batches = []
    for s in range(steps):
        d = data[s * per:(s + 1) * per]
        img = d[:n_img]
        lab = np.frombuffer(d[n_img:n_img + 8 * B], dtype=np.int64)
        tgt = (np.frombuffer(d[n_img + 8 * B:], dtype=np.float32).reshape(B, NCLASSES)
               if mixes else None)
        batches.append((img, lab, tgt))
    return H, W, draws, batches


def as_nchw(img, dtype, layout, B, H, W):
    """The image bytes as [B, C, H, W] (NumPy, or torch for bfloat16)."""
    if dtype == "bfloat16":
        t = torch.frombuffer(bytearray(img), dtype=torch.bfloat16)
    else:
        t = np.frombuffer(img, dtype=np.float32 if dtype == "float32" else np.uint8)
    if layout == "nhwc":
        t = t.reshape(B, H, W, 3)
        return t.permute(0, 3, 1, 2) if dtype == "bfloat16" else t.transpose(0, 3, 1, 2)
    return t.reshape(B, 3, H, W)


def same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                          np.ascontiguousarray(b).view(np.uint8))


CASES = [
    # (batch op, per-sample chain, dtype, layout, B)
    ("mixup(0.8)", "random_resized_crop(32) | hflip(0.5) | normalize(imagenet)",
     "float32", "nchw", 8),
    ("cutmix(1)", "random_resized_crop(32, 24) | hflip(0.5) | normalize(imagenet)",
     "float32", "nchw", 8),
    ("mixup_cutmix(mixup=0.8, cutmix=1, switch=0.5, smoothing=0.1)",
     "random_resized_crop(28) | hflip(0.5) | rand_augment(2, 9) | normalize(imagenet) | "
     "random_erasing(0.25)", "float32", "nhwc", 6),
    ("mixup_cutmix(0.2, 1, p=0.6, smoothing=0.05)",
     "random_resized_crop(20, 28) | normalize(imagenet)", "float32", "nchw", 5),
    ("mixup(1, smoothing=0)", "random_resized_crop(24) | normalize(imagenet)",
     "bfloat16", "nchw", 4),
    ("cutmix(0.5)", "random_resized_crop(24) | normalize(imagenet)", "bfloat16", "nhwc", 4),
    ("mixup(0.4)", "random_resized_crop(24) | hflip(0.5)", "uint8", "nhwc", 6),
    ("mixup_cutmix(1, 1)", "random_resized_crop(24) | hflip(0.5)", "uint8", "nchw", 7),
    ("cutmix(1, minmax=0.3:0.7)", "random_resized_crop(24, 20) | normalize(imagenet)",
     "float32", "nchw", 6),
    ("mixup_cutmix(0.8, 1, minmax=0.2:0.8, mode=batch)",
     "random_resized_crop(20) | hflip(0.5)", "uint8", "nhwc", 4),
    # pair and elem modes
    ("mixup(0.8, mode=elem)", "random_resized_crop(32) | hflip(0.5) | normalize(imagenet)",
     "float32", "nchw", 8),
    ("cutmix(1, mode=pair)", "random_resized_crop(28, 24) | normalize(imagenet)",
     "float32", "nhwc", 6),
    ("mixup_cutmix(0.8, 1, p=0.8, mode=elem, minmax=0.2:0.8)",
     "random_resized_crop(24) | normalize(imagenet) | random_erasing(0.25)",
     "float32", "nchw", 7),
    ("mixup_cutmix(1, 1, mode=pair, minmax=0.25:0.75)", "random_resized_crop(24) | hflip(0.5)",
     "uint8", "nhwc", 6),
    ("mixup_cutmix(0.4, 1, smoothing=0, mode=elem)", "random_resized_crop(24) | hflip(0.5)",
     "uint8", "nchw", 5),
    ("cutmix(0.5, mode=elem)", "random_resized_crop(24) | normalize(imagenet)", "bfloat16",
     "nchw", 5),
    ("mixup(0.4, mode=pair)", "random_resized_crop(24) | normalize(imagenet)", "bfloat16",
     "nhwc", 5),
]


def op_minmax(op):
    """The minmax the op text holds, as the decimals written (timm's floats)."""
    if "minmax=" not in op:
        return None
    a, b = op.split("minmax=")[1].split(")")[0].split(",")[0].split(":")
    return float(a), float(b)


def parity_batches(probe, root, tmp):
    ok = True
    for op, chain, dtype, layout, B in CASES:
        steps = 8
        H, W, draws, mixed = probe_batches(probe, root, chain + " | " + op, dtype, layout, B,
                                           steps, os.path.join(tmp, "mixed"))
        _, _, _, plain = probe_batches(probe, root, chain, dtype, layout, B, steps,
                                       os.path.join(tmp, "plain"))
        # the op's numbers as the chain keeps them (float32), as Python floats
        ws = subprocess.run([probe, "mixdraws", op, "4", "4", "0", "0"], check=True,
                            capture_output=True, text=True)  # parses op
        smoothing = float(np.float32(
            float(op.split("smoothing=")[1].split(",")[0].rstrip(")")) if "smoothing=" in op
            else 0.1))
        bad = []
        nmixed = ncut = 0
        mode = "elem" if "mode=elem" in op else "pair" if "mode=pair" in op else "batch"
        minmax = op_minmax(op)
        for s in range(steps):
            img_m, lab_m, tgt_m = mixed[s]
            img_p, lab_p, _ = plain[s]
            if mode != "batch":
                rows = draws[s]
                x = as_nchw(img_p, dtype, layout, B, H, W)
                ref, lam_b = mix_rows(x, rows, mode, dtype, minmax)
                got = as_nchw(img_m, dtype, layout, B, H, W)
                tgt_ref = mixup_target_rows(lab_p, NCLASSES, lam_b, smoothing)
                nmixed += sum(int(r[0]) for r in rows)
                ncut += sum(int(r[1]) for r in rows)
                if not np.array_equal(lab_m, lab_p):
                    bad.append(f"step {s}: labels differ")
                if not same(got, ref):
                    bad.append(f"step {s}: images differ")
                if not same(tgt_m, tgt_ref):
                    bad.append(f"step {s}: targets differ (max "
                               f"{np.abs(tgt_m - tgt_ref).max():.3g})")
                if any(np.float32(float(r[3])) != lam_b[i] for i, r in enumerate(rows)):
                    bad.append(f"step {s}: row weights differ from timm's lam_batch")
                continue
            is_mixed, use_cutmix = int(draws[s][0]), int(draws[s][1])
            lam, cy, cx = float(draws[s][2]), int(draws[s][4]), int(draws[s][5])
            nmixed += is_mixed
            ncut += use_cutmix
            x = as_nchw(img_p, dtype, layout, B, H, W)
            ref, lam_t = mix_batch(x, lam, use_cutmix, cy, cx, dtype, minmax,
                                   [int(v) for v in draws[s][6:10]])
            got = as_nchw(img_m, dtype, layout, B, H, W)
            tgt_ref = mixup_target(lab_p, NCLASSES, lam_t, smoothing)
            if not np.array_equal(lab_m, lab_p):
                bad.append(f"step {s}: labels differ")
            if not same(got, ref):
                d = (got.float() - ref.float()).abs().max().item() if dtype == "bfloat16" \
                    else np.abs(got.astype(np.float64) - ref.astype(np.float64)).max()
                bad.append(f"step {s}: images differ (max {d})")
            if not same(tgt_m, tgt_ref):
                bad.append(f"step {s}: targets differ (max "
                           f"{np.abs(tgt_m - tgt_ref).max():.3g})")
            if float(draws[s][3]) != lam_t:
                bad.append(f"step {s}: weight {draws[s][3]} != timm's lam {lam_t!r}")
        unit = "batches" if mode == "batch" else f"batches of rows ({mode})"
        print(f"{op} after {chain.split(' | ')[-1]}, {dtype} {layout}, B={B}: "
              f"{steps} {unit} ({nmixed} mixed, {ncut} cutmix) " +
              ("exact" if not bad else "MISMATCH: " + "; ".join(bad[:4])))
        ok = ok and not bad and ws.returncode == 0
    return ok


def parity_draws(probe):
    ok = True
    n = 20000
    rng = np.random.default_rng(7)
    for op, alpha, p, switch in [("mixup(0.2)", 0.2, 1, 0), ("mixup(0.8, p=0.7)", 0.8, .7, 0),
                                 ("cutmix(1)", 1.0, 1, 1), ("mixup(4)", 4.0, 1, 0),
                                 ("mixup_cutmix(0.8, 0.8, switch=0.3)", 0.8, 1, 0.3)]:
        res = subprocess.run([probe, "mixdraws", op, "224", "160", str(n), "3"],
                             check=True, capture_output=True, text=True)
        d = np.array([[float(v) for v in ln.split()] for ln in res.stdout.split("\n") if ln])
        drawn = d[:, 2] != 1  # timm's lam stays 1 when the batch is not mixed
        lam = d[drawn, 2]
        ref = rng.beta(alpha, alpha, size=len(lam))
        k = ks(lam, ref)
        c2 = 1.95 * np.sqrt(2.0 / len(lam))  # alpha = 0.001
        rate, cut = drawn.mean(), d[drawn, 1].mean()
        good = k < c2 and abs(rate - p) < 0.02 and abs(cut - switch) < 0.02
        msg = f"{op}: lam KS {k:.4f} (critical {c2:.4f}), mixed {rate:.3f} (p {p}), " \
              f"cutmix {cut:.3f} (switch {switch})"
        if switch:
            cy, cx = d[d[:, 1] == 1, 4], d[d[:, 1] == 1, 5]
            kc = max(ks(cy, rng.integers(0, 224, len(cy))), ks(cx, rng.integers(0, 160, len(cx))))
            cc = 1.95 * np.sqrt(2.0 / len(cy))
            good = good and kc < cc
            msg += f", centres KS {kc:.4f} (critical {cc:.4f})"
        print(msg + ("" if good else "  MISMATCH"))
        ok = ok and good
    return ok


def parity_minmax_draws(probe):
    n = 20000
    rng = np.random.default_rng(9)
    res = subprocess.run([probe, "mixdraws", "cutmix(1, minmax=0.2:0.8)", "224", "160",
                          str(n), "5"], check=True, capture_output=True, text=True)
    d = np.array([[int(float(v)) for v in ln.split()] for ln in res.stdout.split("\n") if ln])
    d = d[d[:, 1] == 1]
    cut_h, cut_w = d[:, 7] - d[:, 6], d[:, 9] - d[:, 8]
    lo_h, hi_h, lo_w, hi_w = int(224 * 0.2), int(224 * 0.8), int(160 * 0.2), int(160 * 0.8)
    in_range = (cut_h.min() >= lo_h and cut_h.max() < hi_h and cut_w.min() >= lo_w and
                cut_w.max() < hi_w and np.all(d[:, 4] < 224 - cut_h) and
                np.all(d[:, 5] < 160 - cut_w))
    k = max(ks(cut_h, rng.integers(lo_h, hi_h, len(cut_h))),
            ks(cut_w, rng.integers(lo_w, hi_w, len(cut_w))))
    c2 = 1.95 * np.sqrt(2.0 / len(cut_h))
    good = in_range and k < c2
    print(f"cutmix(1, minmax=0.2:0.8) boxes: {len(cut_h)}, sides within timm's ranges "
          f"{'yes' if in_range else 'NO'}, KS {k:.4f} (critical {c2:.4f})"
          + ("" if good else "  MISMATCH"))
    return good


def main():
    probe, gen = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-mix-")
    try:
        subprocess.run([gen, "gen", "--out", os.path.join(tmp, "d"), "--count", "64",
                        "--classes", str(NCLASSES), "--layout", "imagefolder", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        root = os.path.join(tmp, "d")
        ok = parity_batches(probe, root, tmp)
        ok = parity_draws(probe) and ok
        ok = parity_minmax_draws(probe) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
