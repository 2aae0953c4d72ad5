"""test_imagefolder.py - ImageFolder as torchvision has it, against
torchvision.datasets.ImageFolder and PIL on a generated nested folder:

  - Loader.classes / class_to_idx equal ImageFolder's (class folders sorted
    by bytes, an upper-case name first), job["num_classes"] is their count;
  - the samples are the same files in the same order (labels equal
    ImageFolder's targets), found recursively (sub-folders, a folder
    named "sub x" that sorts before "sub/deeper"), .jpg/.jpeg/.png in any
    case; a .txt, a .bmp, a symbolic link and a file outside any class
    folder are skipped;
  - every PNG kind (8/16-bit gray, gray+alpha, RGB, RGBA; palette with
    tRNS at 8 and 4 bits; 1- and 2-bit gray; interlaced) decodes to
    exactly the bytes of PIL's Image.open(p).convert("RGB") (pipeline
    decode | center_crop of the whole image, uint8);
  - a corrupt PNG (bad IDAT checksum) and a truncated one are bad samples:
    replaced by decodable ones, never a crash;
  - num_classes set to another count is refused with a message naming both;
  - against real daemons: the classes reach a client that cannot see the
    data (Join), the worker logs the skipped files at start and
    `stoker status --json` reports their count and names.
Exit 77 without torch/torchvision, or under sanitizers."""
import io
import json
import warnings
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, require, spawn, wait_log, wait_port  # noqa: E402


def log_line(path, text, proc, timeout):
    """The first line of the log at path holding text (bounded wait), or ''."""
    if not wait_log(path, text, proc, timeout=timeout):
        return ""
    with open(path, errors="replace") as f:
        return next((ln.strip() for ln in f if text in ln), "")

COORD, WORKER, CLI = require(torch=True, bins=("STOKER_COORDINATOR_BIN", "STOKER_WORKER_BIN",
                                               "STOKER_CLI_BIN"))
try:
    import numpy as np
    from PIL import Image
    from torchvision.datasets import ImageFolder
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)
import stoker  # noqa: E402

warnings.filterwarnings("ignore", "Palette images with Transparency")
W, H = 24, 20  # every image: the chain's center_crop(H, W) keeps all of it


# ---- a small PNG writer: every color type, bit depth and interlacing ----
def _chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))


def _pack(rows, depth):
    out = b""
    for r in rows:
        if depth == 16:
            b = b"".join(struct.pack(">H", v) for v in r)
        elif depth == 8:
            b = bytes(r)
        else:
            per, b = 8 // depth, bytearray()
            for i in range(0, len(r), per):
                x = 0
                for k in range(per):
                    x = (x << depth) | (r[i + k] if i + k < len(r) else 0)
                b.append(x)
            b = bytes(b)
        out += b"\x00" + b
    return out


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def png_bytes(color, depth, pix, plte=None, trns=None, interlace=False):
    """pix[y][x]: a tuple of samples for the color type."""
    def row(y, xs):
        return [v for x in xs for v in pix[y][x]]
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            xs, ys = list(range(x0, W, dx)), list(range(y0, H, dy))
            if xs and ys:
                raw += _pack([row(y, xs) for y in ys], depth)
    else:
        raw = _pack([row(y, range(W)) for y in range(H)], depth)
    d = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, depth, color, 0,
                                                            0, int(interlace)))
    if plte:
        d += _chunk(b"PLTE", bytes(v for c in plte for v in c))
    if trns is not None:
        d += _chunk(b"tRNS", trns)
    return d + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def samples(n, top, seed):
    """A deterministic pattern of n-sample pixels below top."""
    return [[tuple((x * 37 + y * 91 + c * 53 + seed * 11 + (x * y * 7)) % top for c in range(n))
             for x in range(W)] for y in range(H)]


def png_variants():
    pal = [((i * 40) % 256, (i * 90 + 7) % 256, (255 - i * 13) % 256) for i in range(16)]
    big = [((i * 7) % 256, (i * 13) % 256, (i * 29) % 256) for i in range(256)]
    g16 = samples(1, 65536, 1)
    for y in range(H):  # values below 256 too: PIL clips 16-bit gray at 255
        g16[y][0] = (y * 13,)
    return {
        "gray8.png": png_bytes(0, 8, samples(1, 256, 2)),
        "gray16.png": png_bytes(0, 16, g16),
        "gray16_trns.png": png_bytes(0, 16, g16, trns=b"\x00\x0d"),
        "gray1.png": png_bytes(0, 1, samples(1, 2, 3)),
        "gray2.png": png_bytes(0, 2, samples(1, 4, 4)),
        "gray4_i.png": png_bytes(0, 4, samples(1, 16, 5), interlace=True),
        "ga8.png": png_bytes(4, 8, samples(2, 256, 6)),
        "ga16.png": png_bytes(4, 16, samples(2, 65536, 7)),
        "rgb8.png": png_bytes(2, 8, samples(3, 256, 8)),
        "rgb8_trns.png": png_bytes(2, 8, samples(3, 256, 9), trns=b"\x00\x01\x00\x02\x00\x03"),
        "rgb16.png": png_bytes(2, 16, samples(3, 65536, 10)),
        "rgba8.png": png_bytes(6, 8, samples(4, 256, 11)),
        "rgba16.png": png_bytes(6, 16, samples(4, 65536, 12)),
        "pal8_trns.png": png_bytes(3, 8, samples(1, 256, 13), plte=big,
                                   trns=bytes(range(0, 256, 2))),
        "pal4_trns.png": png_bytes(3, 4, samples(1, 16, 14), plte=pal, trns=b"\x00\x40\x80"),
        "rgb8_i.png": png_bytes(2, 8, samples(3, 256, 15), interlace=True),
        "rgba16_i.png": png_bytes(6, 16, samples(4, 65536, 16), interlace=True),
        "pal8_i.png": png_bytes(3, 8, samples(1, 256, 17), plte=big, trns=b"\x00",
                                interlace=True),
    }


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def jpeg(seed):
    a = np.array(samples(3, 256, seed), dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(a, "RGB").save(b, "JPEG", quality=90)
    return b.getvalue()


def make_dataset(d, corrupt):
    """Four classes, nested; PNG variants in 'dog'; skipped files around."""
    for name, data in png_variants().items():
        write(os.path.join(d, "dog", name), data)
    write(os.path.join(d, "Zebra", "z1.JPG"), jpeg(1))
    write(os.path.join(d, "Zebra", "z0.jpeg"), jpeg(2))
    write(os.path.join(d, "cat", "sub", "deeper", "c2.jpg"), jpeg(3))
    write(os.path.join(d, "cat", "sub x", "c1.jpg"), jpeg(4))
    write(os.path.join(d, "cat", "sub", "c3.PNG"), png_bytes(2, 8, samples(3, 256, 20)))
    write(os.path.join(d, "cat", "c0.jpg"), jpeg(5))
    write(os.path.join(d, "bird", "b0.jpg"), jpeg(6))
    # skipped: not an image, an image stoker does not decode, a link, a
    # file outside any class folder
    write(os.path.join(d, "cat", "notes.txt"), b"not an image\n")
    write(os.path.join(d, "bird", "b1.bmp"), b"BM" + b"\0" * 64)
    os.symlink("b0.jpg", os.path.join(d, "bird", "link.jpg"))
    write(os.path.join(d, "README"), b"top-level file\n")
    if corrupt:
        good = png_bytes(2, 8, samples(3, 256, 21))
        i = good.index(b"IDAT")
        bad = bytearray(good)
        bad[i + 6] ^= 0x55  # inside the compressed data: the CRC no longer fits
        write(os.path.join(d, "bird", "bad_crc.png"), bytes(bad))
        write(os.path.join(d, "bird", "cut.png"), good[:len(good) // 2])


JOB = ("source = imagefolder\ndataset = %s\npipeline = decode | center_crop(%d, %d) | "
       "to(uint8, nhwc)\nbatch_size = 1\nworld_size = 1\nepochs = 1\nseed = 3\n")


def pil_rgb(path):
    return np.array(Image.open(path).convert("RGB"))


def epoch(L):
    """{sample index: (image HxWx3 array, label)} of one epoch."""
    got = {}
    for images, labels, b in L:
        got[int(b.index[0])] = (images[0].numpy().copy(), int(labels[0]))
    return got


def local_checks(root):
    ds = os.path.join(root, "ds")
    tv = ImageFolder(ds)
    L = stoker.Loader(job=JOB % ("ds", H, W), data_root=root, rank=0, world_size=1,
                      with_meta=True)
    check(L.classes == tv.classes, "classes %s == torchvision's %s" % (L.classes, tv.classes))
    check(L.class_to_idx == tv.class_to_idx, "class_to_idx == torchvision's")
    check(L.job["num_classes"] == len(tv.classes),
          "job num_classes %s == %d" % (L.job["num_classes"], len(tv.classes)))
    got = epoch(L)
    # torchvision takes .bmp (stoker skips it) and follows the link
    want = [(p, t) for p, t in tv.samples if not p.endswith((".bmp", "link.jpg"))]
    check(len(got) == len(want), "%d samples, torchvision's decodable: %d" %
          (len(got), len(want)))
    for i, (p, t) in enumerate(want):
        if i not in got:
            check(False, "sample %d (%s) missing" % (i, p))
            continue
        img, label = got[i]
        check(label == t, "sample %d %s: label %d == %d" % (i, os.path.relpath(p, ds), label,
                                                            t))
        ref = pil_rgb(p)
        if p.lower().endswith(".png"):  # exact; JPEG decoders may differ by a level
            check(img.shape == ref.shape and np.array_equal(img, ref),
                  "%s decodes as PIL's convert('RGB') (max diff %s)" %
                  (os.path.relpath(p, ds),
                   int(np.abs(img.astype(int) - ref).max()) if img.shape == ref.shape
                   else img.shape))
        else:
            check(int(np.abs(img.astype(int) - ref).max()) <= 2, "%s close to PIL" % p)
    L.close()
    # num_classes set to another count: refused, naming both counts
    try:
        stoker.Loader(job=JOB % ("ds", H, W) + "num_classes = 3\n", data_root=root, rank=0,
                      world_size=1).steps_per_epoch  # opens the client
        check(False, "num_classes = 3 with 4 class folders is refused")
    except stoker.StokerError as e:
        check("num_classes = 3" in str(e) and "4 class folders" in str(e),
              "the refusal names both counts: %s" % e)
    # the right count is accepted
    L = stoker.Loader(job=JOB % ("ds", H, W) + "num_classes = 4\n", data_root=root, rank=0,
                      world_size=1)
    check(L.job["num_classes"] == 4, "num_classes = 4 accepted")
    L.close()
    # corrupt PNGs are bad samples: replaced by decodable ones
    dsb = os.path.join(root, "dsbad")
    make_dataset(dsb, corrupt=True)
    tvb = ImageFolder(dsb)
    L = stoker.Loader(job=JOB % ("dsbad", H, W), data_root=root, rank=0, world_size=1,
                      with_meta=True)
    got = epoch(L)
    wantb = [p for p, _ in tvb.samples if not p.endswith((".bmp", "link.jpg"))]
    check(len(got) == len(wantb), "bad-sample dataset: %d samples" % len(got))
    refs = [pil_rgb(p) for p in wantb if "bad_crc" not in p and "cut.png" not in p]
    for i, p in enumerate(wantb):
        if "bad_crc" in p or "cut.png" in p:
            img = got[i][0]
            check(any(np.array_equal(img, r) for r in refs if r.shape == img.shape) or
                  any(int(np.abs(img.astype(int) - r).max()) <= 2 for r in refs),
                  "%s replaced by a decodable sample" % os.path.basename(p))
    s = L.stats()
    L.close()
    print("local: %d samples, classes %s, bad-sample dataset stats %s" %
          (len(got), tv.classes, {k: s[k] for k in s if "subst" in k or "bad" in k}),
          flush=True)


def daemon_checks(root, tmp):
    tv = ImageFolder(os.path.join(root, "ds"))
    log = open(os.path.join(tmp, "daemons.log"), "w")
    wlog = os.path.join(tmp, "worker.log")
    try:
        pf = os.path.join(tmp, "coord.port")
        job = os.path.join(tmp, "job.conf")
        with open(job, "w") as f:
            f.write(JOB % ("ds", H, W))
        c = spawn([COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--job", job,
                   "--idle-timeout-s", "60"], log)
        cport = wait_port(pf, c)
        coord = "127.0.0.1:%d" % cport
        wpf = os.path.join(tmp, "w.port")
        w = spawn([WORKER, "--coordinator", coord, "--listen", "127.0.0.1:0", "--port-file",
                   wpf, "--threads", "1", "--data-root", root], open(wlog, "w"))
        wait_port(wpf, w)
        L = stoker.Loader(coord, rank=0, world_size=1, with_meta=True, join_timeout_ms=15000)
        check(L.classes == tv.classes, "over Join: classes %s" % L.classes)
        check(L.class_to_idx == tv.class_to_idx, "over Join: class_to_idx")
        check(L.job["num_classes"] == len(tv.classes), "over Join: num_classes %s" %
              L.job["num_classes"])
        line = log_line(wlog, "files skipped", w, 10)
        check(line and "4 files skipped" in line and "cat/notes.txt" in line and
              "bird/link.jpg" in line, "the worker logs the skipped files: %s" % line)
        sk, out = {}, ""
        for _ in range(100):  # the report rides on the worker's heartbeats
            rc = subprocess.run([CLI, "status", "--coordinator", coord, "--json"],
                                capture_output=True, text=True, timeout=20)
            out = rc.stdout
            try:
                ws = [x for x in json.loads(out)["workers"] if x.get("files_skipped")]
            except (ValueError, KeyError):
                ws = []
            if ws:
                sk = ws[0]
                break
            time.sleep(0.1)
        try:
            json.loads(out)
            check(sk.get("files_skipped") == 4 and
                  any(s.startswith("bird/b1.bmp: ") for s in sk.get("skipped_files", [])) and
                  any(s.startswith("README: ") for s in sk.get("skipped_files", [])),
                  "stoker status --json reports the skipped files: %s" % sk)
        except (ValueError, KeyError) as e:
            check(False, "stoker status --json: %s %r" % (e, out[:300]))
        rc = subprocess.run([CLI, "status", "--coordinator", coord], capture_output=True,
                            text=True, timeout=20)
        check("skipped files" in rc.stdout and "cat/notes.txt" in rc.stdout,
              "stoker status names the skipped files")
        got = epoch(L)
        check(len(got) == len(tv.samples) - 2, "over Join: %d samples" % len(got))
        L.close()
    finally:
        reap()
        log.close()
    # a worker given a job with another class count cannot serve it: says why
    try:
        with open(job, "w") as f:
            f.write(JOB % ("ds", H, W) + "num_classes = 7\n")
        c = spawn([COORD, "--listen", "127.0.0.1:0", "--port-file", pf + "2", "--job", job,
                   "--idle-timeout-s", "30"], open(os.path.join(tmp, "c2.log"), "w"))
        cport = wait_port(pf + "2", c)
        wlog2 = os.path.join(tmp, "worker2.log")
        w = spawn([WORKER, "--coordinator", "127.0.0.1:%d" % cport, "--listen",
                   "127.0.0.1:0", "--threads", "1", "--data-root", root], open(wlog2, "w"))
        line = log_line(wlog2, "num_classes = 7", w, 20)
        check(line and "4 class folders" in line, "the worker refuses num_classes = 7: %s" %
              line)
    finally:
        reap()


def main():
    tmp = tempfile.mkdtemp(prefix="stoker-imagefolder-")
    try:
        root = os.path.join(tmp, "data")
        make_dataset(os.path.join(root, "ds"), corrupt=False)
        local_checks(root)
        daemon_checks(root, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if fails:
        print("%d check(s) failed" % len(fails))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
