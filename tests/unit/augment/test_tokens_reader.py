#!/usr/bin/python3
"""test_tokens_reader.py - the Megatron .bin/.idx round trip, checked by an
independent reader: documents written by `stoker-dataset tokens` (from text
and synthetic) are read back here with numpy (memmap), written from the
format description alone (augment/megatron.h's comment), and
every sample of a blended token job, as the worker's builder makes it
(`stoker-dataset tokens-dump`), is rebuilt here from those documents:
tokens, labels, loss_mask and position_ids agree token for token, over
two epochs, int32 and int64, and the samples of an epoch are distinct.

Usage: test_tokens_reader.py STOKER_DATASET. Exits 77 without numpy.
"""
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from harness import check, fails  # noqa: E402

try:
    import numpy as np
except ImportError:
    print("SKIP: python3-numpy is not installed")
    sys.exit(77)

TOOL = sys.argv[1]
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
          6: np.float64, 7: np.float32, 8: np.uint16}


def read_indexed(prefix):
    """The documents of PREFIX.idx/.bin, read from the format description."""
    with open(prefix + ".idx", "rb") as f:
        head = f.read(34)
    assert head[:9] == b"MMIDIDX\x00\x00", "magic"
    version, = struct.unpack("<Q", head[9:17])
    assert version == 1
    code = head[17]
    nseq, ndoc = struct.unpack("<QQ", head[18:34])
    idx = np.memmap(prefix + ".idx", dtype=np.uint8, mode="r")
    off = 34
    lens = np.frombuffer(idx, dtype="<i4", count=nseq, offset=off)
    off += 4 * nseq
    ptrs = np.frombuffer(idx, dtype="<i8", count=nseq, offset=off)
    off += 8 * nseq
    docs = np.frombuffer(idx, dtype="<i8", count=ndoc, offset=off)
    off += 8 * ndoc
    assert off == len(idx), "idx size"
    dt = np.dtype(DTYPES[code]).newbyteorder("<")
    binf = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r")
    seqs = []
    for n, p in zip(lens.tolist(), ptrs.tolist()):
        seqs.append(np.frombuffer(binf, dtype=dt, count=n, offset=p).astype(np.int64))
    assert docs[0] == 0 and docs[-1] == nseq
    return seqs


def run(*args):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit("%s failed: %s" % (args, r.stderr))
    return r.stdout


def parse_dump(text):
    lines = text.splitlines()
    head = lines[0].split()
    n, seq_len = int(head[1]), int(head[3])
    prefixes, samples, cur = [], [], None
    for ln in lines[1:]:
        w = ln.split()
        if w[0] == "prefix":
            prefixes.append((int(w[3]), int(w[5]), [int(x) for x in w[7:]]))
        elif w[0] == "sample":
            cur = {"p": int(w[1])}
            samples.append(cur)
        else:
            cur[w[0]] = [float(x) if w[0] == "loss_mask" else int(x) for x in w[1:]]
    return n, seq_len, prefixes, samples


def expect_blend(windows, weights, num_samples):
    """The blend rule of source_megatron.c, written again from its comment."""
    if weights is None:
        return list(windows)
    tot = sum(weights)
    w = [x / tot for x in weights]
    nat = min(int(np.floor(wd / ww)) for wd, ww in zip(windows, w))
    n = num_samples or nat
    counts = [min(int(np.floor(ww * n)), wd) for ww, wd in zip(w, windows)]
    frac = [ww * n - c for ww, c in zip(w, counts)]
    while sum(counts) < n:
        best = max((d for d in range(len(w)) if counts[d] < windows[d]),
                   key=lambda d: (frac[d], -d))
        counts[best] += 1
        frac[best] = -1
    return counts


def check_job(root, names, weights, seq_len, token_dtype, eod, epochs=2, extra=""):
    seqs = [read_indexed(os.path.join(root, n)) for n in names]
    ds = ", ".join(n if weights is None else "%s:%g" % (n, w)
                   for n, w in zip(names, weights or [0] * len(names)))
    job = os.path.join(root, "job.txt")
    with open(job, "w") as f:
        f.write("source = megatron\ndataset = %s\nseq_len = %d\nbatch_size = 3\n"
                "world_size = 2\nepochs = %d\nseed = 7\ntoken_dtype = %s\n"
                "eod_token = %d\nloss_mask = true\neod_mask_loss = true\n%s"
                % (ds, seq_len, epochs, token_dtype, eod, extra))
    windows = [(sum(len(s) for s in ss) - 1) // seq_len for ss in seqs]
    counts = expect_blend(windows, weights, 0)
    for epoch in range(epochs):
        n, sl, prefixes, samples = parse_dump(
            run("tokens-dump", "--job", job, "--data-root", root, "--epoch", str(epoch)))
        check(sl == seq_len and n == sum(counts), "sample count %d vs %d" % (n, sum(counts)))
        check([c for _, c, _ in prefixes] == counts,
              "blend counts %s vs %s" % ([c for _, c, _ in prefixes], counts))
        concat = []
        for d, (start, count, order) in enumerate(prefixes):
            check(sorted(order) == list(range(len(seqs[d]))), "order is a permutation")
            concat.append(np.concatenate([seqs[d][q] for q in order]))
        ps = [s["p"] for s in samples]
        check(len(set(ps)) == len(ps), "samples of an epoch are distinct")
        check(len(ps) == (n // 6) * 6, "steps * W * B samples")
        for s in samples:
            p = s["p"]
            check(s.get("index", [p]) == [p], "index tensor of sample %d" % p)
            d = max(i for i, (st, _, _) in enumerate(prefixes) if st <= p)
            k = p - prefixes[d][0]
            check(k < prefixes[d][1], "sample in its prefix's range")
            win = concat[d][k * seq_len:k * seq_len + seq_len + 1]
            check(len(win) == seq_len + 1, "window length")
            check(s["tokens"] == win[:-1].tolist(), "tokens of sample %d" % p)
            check(s["labels"] == win[1:].tolist(), "labels of sample %d" % p)
            lm = [0.0 if t == eod else 1.0 for t in win[:-1].tolist()]
            check(s["loss_mask"] == lm, "loss_mask of sample %d" % p)
            if "position_ids" in s:
                pos, want = 0, []
                for i, t in enumerate(win[:-1].tolist()):
                    if i and win[i - 1] == eod:
                        pos = 0
                    want.append(pos)
                    pos += 1
                check(s["position_ids"] == want, "position_ids of sample %d" % p)
    return samples


def main():
    root = tempfile.mkdtemp(prefix="stoker-tokens-")
    try:
        rnd = random.Random(11)
        docs = []
        for i in range(120):
            n = rnd.choice([0, 1, 2, 5, 17, 40, 130])
            docs.append([rnd.randrange(1, 30000) for _ in range(n)] + [0])
        docs[5] = []  # an empty document
        with open(os.path.join(root, "docs.txt"), "w") as f:
            for d in docs:
                f.write(" ".join(map(str, d)) + "\n")
        for dt in ("uint16", "int32"):
            run("tokens", "--in", os.path.join(root, "docs.txt"),
                "--out", os.path.join(root, "text_" + dt), "--dtype", dt)
            got = read_indexed(os.path.join(root, "text_" + dt))
            check([g.tolist() for g in got] == docs, "text documents round trip (%s)" % dt)
        run("tokens", "--synthetic", "300", "--out", os.path.join(root, "syn"),
            "--dtype", "int32", "--vocab", "100000", "--eod", "3", "--max-len", "200",
            "--seed", "5")
        syn = read_indexed(os.path.join(root, "syn"))
        check(len(syn) == 300 and all(len(s) >= 2 and s[-1] == 3 for s in syn),
              "synthetic corpus shape")
        out = run("tokens-check", os.path.join(root, "syn"))
        check("300 sequences" in out and "%d tokens" % sum(map(len, syn)) in out,
              "tokens-check summary: " + out)
        run("tokens", "--synthetic", "300", "--out", os.path.join(root, "syn2"),
            "--dtype", "int32", "--vocab", "100000", "--eod", "3", "--max-len", "200",
            "--seed", "5")
        check(all((a == b).all() for a, b in zip(syn, read_indexed(os.path.join(root, "syn2")))),
              "synthetic corpus is deterministic")
        # one prefix, int64, position_ids reset at eod
        check_job(root, ["text_uint16"], None, 16, "int64", 0,
                  extra="position_ids = true\nreset_position_ids = true\n")
        # a weighted blend of three, int32
        check_job(root, ["text_uint16", "syn", "text_int32"], [0.5, 0.3, 0.2], 32, "int32", 3)
        # unweighted: every window of both
        check_job(root, ["syn", "text_int32"], None, 64, "int32", 0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if fails:
        print("%d check(s) failed" % len(fails))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
