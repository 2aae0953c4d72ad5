#!/usr/bin/python3
"""test_aug_parity.py - stoker's augmentation against torchvision.

1. Resize(256)+CenterCrop(224)+Normalize on generated JPEGs (baseline,
   progressive, grayscale; none large enough for a DCT-scaled decode):
   every value's 8-bit level equals torchvision's (PIL backend): the
   decode matches PIL's and the resampler is Pillow's fixed-point
   arithmetic.
2. RandomResizedCrop's crop boxes: the distributions of area fraction,
   log aspect ratio and position (and the fallback rate) match
   torchvision's get_params (two-sample Kolmogorov-Smirnov at alpha 1e-3).
3. Every op of an op chain (pipeline = decode | ...) with its random
   parameters pinned (p = 1, a range a:a) against torchvision's transform
   on the same PIL image: center_crop(48) first (decoded as PIL decodes,
   so both sides start from the same pixels), then the op. Exact for the
   flips, rotations, grayscale, crops with padding, pad (every mode),
   ColorJitter's four
   adjustments (PIL's own integer and float recipes) and resize (down, up,
   both: Pillow's fixed-point resampling); within 1 level for
   gaussian_blur (torch sums a 2-D kernel in another order).
4. Awkward sizes: 18 JPEGs of 1/f noise (a photo's spectrum) at sides
   that DCT scaling does not divide (odd, prime, not multiples of 8 or
   16; portrait and landscape; 1,000-3,001 px; 4:2:0 and 4:4:4):
   `resize(256) | center_crop(224)` and the named eval pipeline within
   the documented tolerance of torchvision's PIL path (mean <= 0.17/255,
   max <= 2/255; they are exact), and train's random_resized_crop (the
   fast decode) over the whole image against PIL's resize of the same
   box: no geometry error (mean |difference| <= 3 levels, where a
   sub-pixel shift of the box gave 4.6-8) and no colour bias (each
   channel's mean difference within 0.3 levels on every image, 0.1 over
   the corpus).

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
    from torchvision.transforms import functional as TF
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


def listing(folder):
    """The ImageFolder's files in stoker's (and torchvision's) sample order."""
    files = []
    for c in sorted(e.name for e in os.scandir(folder) if e.is_dir()):
        files += [os.path.join(folder, c, f)
                  for f in sorted(os.listdir(os.path.join(folder, c)))]
    return files


def parity_eval(probe, gen, tmp):
    subprocess.run([gen, "gen", "--out", os.path.join(tmp, "d"), "--count", "48",
                    "--classes", "3", "--layout", "imagefolder", "--seed", "11"],
                   check=True, stdout=subprocess.DEVNULL)
    root = os.path.join(tmp, "d")
    files = listing(os.path.join(root, "imagefolder"))
    out = os.path.join(tmp, "eval.bin")
    subprocess.run([probe, "eval", root, "imagefolder", out], check=True)
    raw = open(out, "rb").read()
    rec = 8 + 3 * 224 * 224 * 4
    assert len(raw) == rec * len(files), (len(raw), len(files))
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    std = torch.tensor(STD).view(3, 1, 1)
    mean_t = torch.tensor(MEAN).view(3, 1, 1)
    worst, total, off = 0.0, 0.0, 0
    for k in range(len(files)):
        idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
        ours = torch.from_numpy(np.frombuffer(raw, np.float32, 3 * 224 * 224,
                                              k * rec + 8).copy()).view(3, 224, 224)
        with Image.open(files[idx]) as im:
            ref = tf(im.convert("RGB"))
        mad = float(((ours - ref).abs() * std).mean())  # on the 0..1 scale
        worst = max(worst, mad)
        total += mad
        # the 8-bit levels both normalized from
        lv = lambda t: torch.round((t * std + mean_t) * 255).to(torch.int32)
        off += int((lv(ours) != lv(ref)).sum())
    mean = total / len(files)
    print(f"eval parity: {len(files)} images, {off} of {len(files) * 3 * 224 * 224} "
          f"levels differ (limit 0), MAD mean {mean * 255:.3f}/255, "
          f"worst image {worst * 255:.3f}/255")
    return off == 0


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


OPS = [
    # (chain after center_crop(48), torchvision transform of the 48x48 crop, max diff)
    ("hflip(1)", T.RandomHorizontalFlip(1.0), 0),
    ("vflip(1)", T.RandomVerticalFlip(1.0), 0),
    ("rotate(90)", lambda im: TF.rotate(im, 90, expand=True), 0),
    ("rotate(180)", lambda im: TF.rotate(im, 180), 0),
    ("rotate(270)", lambda im: TF.rotate(im, 270, expand=True), 0),
    ("grayscale(1)", T.Grayscale(3), 0),
    ("color_jitter(brightness=1.3:1.3)", lambda im: TF.adjust_brightness(im, 1.3), 0),
    ("color_jitter(brightness=0.6:0.6)", lambda im: TF.adjust_brightness(im, 0.6), 0),
    ("color_jitter(contrast=1.4:1.4)", lambda im: TF.adjust_contrast(im, 1.4), 0),
    ("color_jitter(contrast=0.5:0.5)", lambda im: TF.adjust_contrast(im, 0.5), 0),
    ("color_jitter(saturation=1.6:1.6)", lambda im: TF.adjust_saturation(im, 1.6), 0),
    ("color_jitter(saturation=0.3:0.3)", lambda im: TF.adjust_saturation(im, 0.3), 0),
    ("color_jitter(hue=0.1:0.1)", lambda im: TF.adjust_hue(im, 0.1), 0),
    ("color_jitter(hue=-0.25:-0.25)", lambda im: TF.adjust_hue(im, -0.25), 0),
    ("center_crop(60, 52)", T.CenterCrop((60, 52)), 0),
    ("random_crop(52, padding=2)", T.RandomCrop(52, padding=2), 0),
    ("center_crop(40) | resize(32)", T.Compose([T.CenterCrop(40), T.Resize(32)]), 0),
    ("resize(30, 20)", T.Resize((30, 20)), 0),
    ("resize(70)", T.Resize(70), 0),
    ("resize(61, 29)", T.Resize((61, 29)), 0),
    # far down, still decoded at full size (a resize to under half the
    # source decodes with DCT scaling, which PIL does not do)
    ("resize(25, 13)", T.Resize((25, 13)), 0),
    ("center_crop(40) | resize(17, 33) | center_crop(12, 20)",
     T.Compose([T.CenterCrop(40), T.Resize((17, 33)), T.CenterCrop((12, 20))]), 0),
    ("gaussian_blur(5, sigma=1.5)", T.GaussianBlur(5, (1.5, 1.5)), 1),
    ("gaussian_blur(3, 7, sigma=0.8)", T.GaussianBlur((7, 3), (0.8, 0.8)), 1),
    ("pad(3, 1, 2, 5, fill=7)", T.Pad((3, 1, 2, 5), fill=7), 0),
    ("pad(4, mode=edge)", T.Pad(4, padding_mode="edge"), 0),
    ("pad(2, 60, mode=reflect)", T.Pad((2, 60), padding_mode="reflect"), 0),
    ("pad(60, 2, mode=symmetric)", T.Pad((60, 2), padding_mode="symmetric"), 0),
]


def parity_ops(probe, tmp):
    root = os.path.join(tmp, "d")
    files = listing(os.path.join(root, "imagefolder"))
    base = {}
    ok = True
    for chain, tv, tol in OPS:
        out = os.path.join(tmp, "chain.bin")
        res = subprocess.run([probe, "chain", root, "imagefolder", f"center_crop(48) | {chain}",
                              out], check=True, capture_output=True, text=True)
        h, w = (int(v) for v in res.stdout.split())
        raw = open(out, "rb").read()
        rec = 8 + h * w * 3
        worst, total, over = 0, 0.0, 0
        for k in range(len(files)):
            idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
            ours = np.frombuffer(raw, np.uint8, h * w * 3, k * rec + 8).reshape(h, w, 3)
            if idx not in base:
                with Image.open(files[idx]) as im:
                    base[idx] = T.CenterCrop(48)(im.convert("RGB"))
            ref = np.asarray(tv(base[idx].copy()).convert("RGB"))
            if ref.shape != ours.shape:
                print(f"  {chain}: shape {ours.shape} vs torchvision {ref.shape}")
                ok = False
                break
            d = np.abs(ours.astype(np.int32) - ref.astype(np.int32))
            worst = max(worst, int(d.max()))
            total += float(d.mean())
            over += int((d > tol).sum())
        good = worst <= tol
        print(f"op {chain}: {len(files)} images, max diff {worst} (limit {tol}), "
              f"mean {total / len(files):.4f}" + ("" if good else f"  MISMATCH ({over} values)"))
        ok = ok and good
    return ok


AWKWARD = [(1101, 1400), (1000, 1333), (1500, 2000), (1499, 1100), (1333, 1001),
           (2003, 1499), (997, 1009), (1019, 3001), (3001, 2003)]


def pink_noise(h, w, rng):
    """An RGB image whose spectrum falls as 1/f, as photos' do."""
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1
    chans = []
    for _ in range(3):
        spec = (rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape)) / f
        spec[0, 0] = 0
        im = np.fft.irfft2(spec, s=(h, w))
        chans.append(128 + 45 * (im - im.mean()) / im.std())
    return np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8)


def parity_sizes(probe, tmp):
    root = os.path.join(tmp, "awk")
    d = os.path.join(root, "imagefolder", "a")
    os.makedirs(d)
    rng = np.random.default_rng(5)
    for k, (w, h) in enumerate(AWKWARD):
        a = pink_noise(h, w, rng)
        for ss in (0, 2):  # 4:4:4, 4:2:0
            Image.fromarray(a).save(os.path.join(d, f"{k:02d}_{w}x{h}_{ss}.jpg"),
                                    quality=90, subsampling=ss)
    files = sorted(os.listdir(d))
    ok = True
    # eval: the chain (uint8) and the named pipeline (normalized floats)
    out = os.path.join(tmp, "awk.bin")
    r = subprocess.run([probe, "chain", root, "imagefolder",
                        "decode | resize(256) | center_crop(224)", out],
                       check=True, capture_output=True, text=True)
    assert r.stdout.split() == ["224", "224"], r.stdout
    raw = open(out, "rb").read()
    rec = 8 + 224 * 224 * 3
    tf = T.Compose([T.Resize(256), T.CenterCrop(224)])
    worst, total = 0, 0.0
    for k in range(len(files)):
        idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
        ours = np.frombuffer(raw, np.uint8, 224 * 224 * 3, k * rec + 8).astype(int)
        with Image.open(os.path.join(d, files[idx])) as im:
            ref = np.asarray(tf(im.convert("RGB"))).reshape(-1).astype(int)
        diff = np.abs(ours - ref)
        if diff.max() > 2:
            print(f"  {files[idx]}: max {diff.max()}, mean {diff.mean():.3f}")
        worst, total = max(worst, int(diff.max())), total + float(diff.mean())
    good = worst <= 2 and total / len(files) <= 0.17
    print(f"awkward sizes, resize(256) | center_crop(224): {len(files)} images, max "
          f"{worst}/255 (limit 2), mean {total / len(files):.3f}/255 (limit 0.17)"
          + ("" if good else "  MISMATCH"))
    ok = ok and good
    subprocess.run([probe, "eval", root, "imagefolder", out], check=True)
    raw = open(out, "rb").read()
    rec = 8 + 3 * 224 * 224 * 4
    std = torch.tensor(STD).view(3, 1, 1)
    mean_t = torch.tensor(MEAN).view(3, 1, 1)
    worst, total = 0, 0.0
    for k in range(len(files)):
        idx = int(np.frombuffer(raw, np.int64, 1, k * rec)[0])
        ours = torch.from_numpy(np.frombuffer(raw, np.float32, 3 * 224 * 224,
                                              k * rec + 8).copy()).view(3, 224, 224)
        with Image.open(os.path.join(d, files[idx])) as im:
            ref = TF.pil_to_tensor(tf(im.convert("RGB"))).to(torch.int32)
        lv = torch.round((ours * std + mean_t) * 255).to(torch.int32)
        diff = (lv - ref).abs()
        worst, total = max(worst, int(diff.max())), total + float(diff.float().mean())
    good = worst <= 2 and total / len(files) <= 0.17
    print(f"awkward sizes, pipeline = eval: {len(files)} images, max {worst}/255 "
          f"(limit 2), mean {total / len(files):.3f}/255 (limit 0.17)"
          + ("" if good else "  MISMATCH"))
    ok = ok and good
    # train: random_resized_crop pinned to the whole image (scale 1, the
    # image's own ratio), so both sides resize the same box
    worst_mean, bias_sum, bias_worst = 0.0, np.zeros(3), 0.0
    for f in files:
        one = os.path.join(tmp, "awk1")
        shutil.rmtree(one, ignore_errors=True)
        os.makedirs(os.path.join(one, "imagefolder", "a"))
        shutil.copy(os.path.join(d, f), os.path.join(one, "imagefolder", "a", "x.jpg"))
        with Image.open(os.path.join(d, f)) as im:
            W, H = im.size
            ref = np.asarray(im.convert("RGB").resize((224, 224), Image.BILINEAR))
        ratio = "%.6g" % (W / H)
        subprocess.run([probe, "chain", one, "imagefolder",
                        f"decode | random_resized_crop(224, scale=1:1, ratio={ratio}:{ratio})",
                        out], check=True, capture_output=True)
        ours = np.frombuffer(open(out, "rb").read(), np.uint8, 224 * 224 * 3, 8)
        dd = ours.reshape(-1, 3).astype(int) - ref.reshape(-1, 3).astype(int)
        m, bias = float(np.abs(dd).mean()), dd.mean(0)
        worst_mean = max(worst_mean, m)
        bias_sum += bias
        bias_worst = max(bias_worst, float(np.abs(bias).max()))
        if m > 3 or np.abs(bias).max() > 0.3:
            print(f"  {f}: mean |difference| {m:.3f}, bias " +
                  " ".join(f"{b:+.3f}" for b in bias))
    corpus = bias_sum / len(files)
    good = worst_mean <= 3 and bias_worst <= 0.3 and float(np.abs(corpus).max()) <= 0.1
    print(f"awkward sizes, train random_resized_crop (fast decode): worst mean "
          f"|difference| {worst_mean:.3f} levels (limit 3), worst image bias "
          f"{bias_worst:.3f} (limit 0.3), corpus bias R/G/B "
          + " ".join(f"{b:+.3f}" for b in corpus) + " (limit 0.1)"
          + ("" if good else "  MISMATCH"))
    return ok and good


def main():
    probe, gen = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-parity-")
    try:
        ok = parity_eval(probe, gen, tmp)
        ok = parity_boxes(probe) and ok
        ok = parity_ops(probe, tmp) and ok
        ok = parity_sizes(probe, tmp) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
