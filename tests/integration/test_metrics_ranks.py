"""test_metrics_ranks.py - /metrics keeps a bounded number of series when
a job has 10,000 ranks: every rank reports its figures (ReportStats, raw
protobuf over stock grpcio, as 10,000 clients would), and the coordinator
exposes per-rank series (stoker_rank_*) for the ranks below
--metrics-rank-series only (default 64; the test also runs one with 8),
while every other family stays one series each.

usage: test_metrics_ranks.py BIN_DIR (stoker-coordinator in it). Exit 0
passed, 1 failed, 77 skipped (no grpcio). Every wait is bounded; every
process is reaped.
"""
import os
import re
import shutil
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, spawn, until, wait_port  # noqa: E402
from protowire import f_varint  # noqa: E402

RANKS = 10000


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def one(grpc, coord, tmp, cap):
    name = "coord%s" % ("" if cap is None else cap)
    log = os.path.join(tmp, name + ".log")
    pf = os.path.join(tmp, name + ".port")
    args = [coord, "--listen", "127.0.0.1:0", "--port-file", pf, "--set",
            "num_samples=1000000", "--set", "height=16", "--set", "width=16", "--set",
            "batch_size=4", "--set", "world_size=%d" % RANKS, "--idle-timeout-s", "120",
            "--metrics-listen", "127.0.0.1:0"]
    if cap is not None:
        args += ["--metrics-rank-series", str(cap)]
    p = spawn(args, log, group=True)
    port = wait_port(pf, p, timeout=30)
    mport = []

    def metrics_line():
        with open(log, errors="replace") as f:
            m = re.search(r"metrics on http://\S+ \(port (\d+)\)", f.read())
        if m:
            mport.append(int(m.group(1)))
        return bool(m)
    if not until(metrics_line, 30, name + " logs its metrics port"):
        return
    ch = grpc.insecure_channel("127.0.0.1:%d" % port)
    report = ch.unary_unary("/stoker.v1.Coordinator/ReportStats")
    for lo in range(0, RANKS, 500):  # waves of 500 calls in flight
        futs = [report.future(f_varint(1, r) + f_varint(4, 1000 + r), timeout=60)
                for r in range(lo, min(RANKS, lo + 500))]
        for f in futs:
            f.result()
    ch.close()
    text = scrape(mport[0])
    series = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    per_rank = [ln for ln in series if ln.startswith("stoker_rank_")]
    want = 64 if cap is None else cap
    check(len(per_rank) == 8 * want, "%s: %d per-rank series for %d ranks reporting, want "
          "8 x %d" % (name, len(per_rank), RANKS, want))
    if want:
        last = 'stoker_rank_batches_total{rank="%d"} %d' % (want - 1, 1000 + want - 1)
        check(last in series, "%s: the last rank shown has its figures (%s)" % (name, last))
    check(not any('rank="%d"' % want in ln for ln in series),
          "%s: no series for rank %d" % (name, want))
    check(len(series) < 600, "%s: %d series in all (< 600)" % (name, len(series)))
    check(len(text) < 64 * 1024, "%s: /metrics is %d bytes (< 64 KiB)" % (name, len(text)))
    reap()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    try:
        import grpc
    except ImportError:
        print("SKIP: grpcio is not importable (Debian: python3-grpcio)")
        return 77
    coord = os.path.join(sys.argv[1], "stoker-coordinator")
    tmp = tempfile.mkdtemp(prefix="stoker-metrics-ranks.")
    try:
        one(grpc, coord, tmp, None)
        one(grpc, coord, tmp, 8)
    finally:
        reap(term_s=0)
        if fails:
            for f in sorted(os.listdir(tmp)):
                if f.endswith(".log"):
                    with open(os.path.join(tmp, f), errors="replace") as h:
                        print("---- %s (tail) ----\n%s" % (f, h.read()[-2000:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_metrics_ranks: %s" % ("FAILED (%d)" % len(fails) if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
