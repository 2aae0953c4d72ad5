"""test_eval_exact.py - exact evaluation of a validation ImageFolder: 23
images in 3 classes (not a multiple of W*B = 2*4), a job with
shuffle = false and drop_last = false:

  - in-process (Loader(job=...), ranks 0 and 1 of 2): rank r's step s
    holds samples (s*W + r)*B .. +B in index order, every epoch the same,
    with the labels of torchvision's ImageFolder order; the last step's
    padding rows (mask 0) are
      last_batch="trim": left out (a shorter last batch),
      last_batch="mark": kept with label -1,
      last_batch="pad" (the default): kept with their real labels, said
        once on stderr;
    and the key shows in the job as shuffle False;
  - against real daemons: examples/eval_folder.py run as 2 processes
    (ranks 0 and 1 of one coordinator and worker): the union of the
    sample indices they saw is every sample exactly once.
Exit 77 without torch or the binaries, or under sanitizers.
"""
import contextlib
import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, require, spawn, wait_exit, wait_port  # noqa: E402

COORD, WORKER = require(torch=True, bins=("STOKER_COORDINATOR_BIN", "STOKER_WORKER_BIN"))
import stoker  # noqa: E402

CLASSES = {"ant": 9, "bee": 8, "cat": 6}  # 23 samples
N, W, B = 23, 2, 4
JOB = ("source = imagefolder\ndataset = val\npipeline = decode | center_crop(8, 8) | "
       "to(uint8, nchw)\nbatch_size = %d\nworld_size = %d\nepochs = 2\nseed = 7\n"
       "shuffle = false\ndrop_last = false\n" % (B, W))


def png(seed):
    """A 12x10 RGB PNG whose pixels depend on seed."""
    w, h = 12, 10
    raw = b"".join(b"\x00" + bytes((x * 7 + y * 13 + seed * 29 + c * 50) % 256
                                   for x in range(w) for c in range(3)) for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def make_folder(root):
    """root/val/<class>/NNN.png; the label of each sample index, in
    ImageFolder's order (classes sorted, files sorted)."""
    labels = []
    for label, cls in enumerate(sorted(CLASSES)):
        d = os.path.join(root, "val", cls)
        os.makedirs(d)
        for i in range(CLASSES[cls]):
            with open(os.path.join(d, "%03d.png" % i), "wb") as f:
                f.write(png(len(labels)))
            labels.append(label)
    return labels


def rank_steps(mode, root, rank):
    """[(epoch, step, index list, label list, mask list, image rows)] of a rank."""
    L = stoker.Loader(job=JOB, data_root=root, rank=rank, world_size=W, with_meta=True,
                      last_batch=mode)
    out = []
    for epoch in range(L.epochs):
        for images, labels, b in L:
            out.append((b.epoch, b.step, b.index.tolist(), labels.tolist(), b.mask.tolist(),
                        int(images.shape[0])))
    check(L.job["shuffle"] is False and L.job["drop_last"] is False,
          "the job says shuffle False, drop_last False: %s %s" % (L.job.get("shuffle"),
                                                                  L.job.get("drop_last")))
    L.close()
    return out


def local_checks(root, truth):
    steps = -(-N // (W * B))  # 3
    for mode in ("trim", "mark", "pad"):
        seen = []
        for r in range(W):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                got = rank_steps(mode, root, r)
            said = "padding rows (drop_last = false)" in err.getvalue()
            padded = any(0 in g[4] for g in got)
            check(padded == (r == 1), "rank %d has padding rows: %s" % (r, padded))
            check(said == (padded and mode == "pad"), "%s rank %d: the padding is said on "
                  "stderr only by last_batch='pad': %r" % (mode, r, err.getvalue()[-300:]))
            check(len(got) == 2 * steps, "%s rank %d: %d steps over 2 epochs (%d)"
                  % (mode, r, 2 * steps, len(got)))
            for e, s, idx, lab, mask, rows in got:
                pos = [(s * W + r) * B + j for j in range(B)]
                check(idx == [p % N for p in pos], "%s rank %d epoch %d step %d: samples in "
                      "index order %s" % (mode, r, e, s, idx))
                check(mask == [int(p < N) for p in pos], "%s: mask %s" % (mode, mask))
                real = sum(mask)
                want = [truth[i] for i in idx[:real]]
                if mode == "trim":
                    check(rows == real and lab == want, "trim: %d real rows, labels %s (%s)"
                          % (real, lab, want))
                elif mode == "mark":
                    check(rows == B and lab == want + [-1] * (B - real),
                          "mark: padding labelled -1: %s" % lab)
                else:
                    check(rows == B and lab == [truth[i] for i in idx],
                          "pad: every row with its real label: %s" % lab)
                if e == 0:
                    seen += idx[:real]
        check(sorted(seen) == list(range(N)), "%s: the real rows of both ranks are every "
              "sample exactly once: %s" % (mode, sorted(seen)))


def daemon_checks(tmp, root):
    log = os.path.join(tmp, "daemons.log")
    with open(os.path.join(tmp, "job.conf"), "w") as f:
        f.write(JOB.replace("epochs = 2", "epochs = 1"))
    pf = os.path.join(tmp, "coord.port")
    c = spawn([COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--job",
               os.path.join(tmp, "job.conf"), "--idle-timeout-s", "120"], log)
    target = "127.0.0.1:%d" % wait_port(pf, c)
    wpf = os.path.join(tmp, "w.port")
    w = spawn([WORKER, "--coordinator", target, "--listen", "127.0.0.1:0", "--port-file", wpf,
               "--threads", "1", "--data-root", root], os.path.join(tmp, "worker.log"))
    wait_port(wpf, w)
    example = os.path.join(os.environ.get("STOKER_EXAMPLES", ""), "eval_folder.py")
    ranks = []
    for r in range(W):
        out = os.path.join(tmp, "rank%d.out" % r)
        ranks.append(spawn([sys.executable, example, "--coordinator", target, "--rank",
                            str(r), "--world-size", str(W), "--indices-out",
                            os.path.join(tmp, "rank%d.idx" % r)], out))
    seen = []
    for r, p in enumerate(ranks):
        code = wait_exit(p, 120)
        with open(os.path.join(tmp, "rank%d.out" % r), errors="replace") as f:
            text = f.read()
        check(code == 0, "eval_folder.py rank %d exits 0 (%s): %s" % (r, code, text[-800:]))
        idx_path = os.path.join(tmp, "rank%d.idx" % r)
        if os.path.exists(idx_path):
            with open(idx_path) as f:
                mine = [int(x) for x in f.read().split()]
            check(all(i % (W * B) // B == r for i in mine),
                  "rank %d saw its own partition: %s" % (r, mine))
            check("rank %d: %d samples" % (r, len(mine)) in text, "rank %d prints its count: %s"
                  % (r, text[-300:]))
            seen += mine
    check(sorted(seen) == list(range(N)),
          "the two ranks together saw every sample exactly once: %s" % sorted(seen))
    check(wait_exit(c, 60) == 0, "the coordinator exits 0 once both ranks finished")
    check(wait_exit(w, 60) == 0, "the worker exits 0")


def main():
    tmp = tempfile.mkdtemp(prefix="stoker-eval-")
    try:
        root = os.path.join(tmp, "data")
        truth = make_folder(root)
        local_checks(root, truth)
        daemon_checks(tmp, root)
    finally:
        reap()
    if fails:
        print("FAILED: %d checks; files in %s" % (len(fails), tmp))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: shuffle = false, drop_last = false and last_batch: every sample once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
