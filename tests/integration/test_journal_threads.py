"""test_journal_threads.py - the state journal (--state-dir) is written
and waited for only off the serving threads: a coordinator with a state
dir and two workers (their admissions are journaled) serves two real
ranks (stoker-train-loop --verify: Join, WatchWorkers, Finish, each
answered once on disk), a stock grpcio rank 2 that joins, a worker killed
(its leave is journaled), and rank 2's Finish{abort_job} (the end of the
job on disk before it is answered). The coordinator counts the snapshots
by the thread that wrote them, and the writes or waits on a serving
thread (/metrics stoker_coordinator_journal_snapshots_total, and its last
log line): mid-run and at the end, writer > 0 and serving threads 0.

usage: test_journal_threads.py BIN_DIR TRAIN_LOOP. Exit 0 passed, 1
failed, 77 skipped (no grpcio). Every wait is bounded; every process is
reaped.
"""
import os
import re
import shutil
import socket
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (check, fails, reap, say_passes, spawn, until, wait_exit,  # noqa: E402
                     wait_port)
from protowire import f_bytes, f_varint, parse  # noqa: E402

PROTOCOL_VERSION = 1  # include/stoker/version.h.in
EXIT_ABORTED = 4      # the coordinator's exit code for Finish{abort_job}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def snapshots(mport):
    """{thread: count} from the coordinator's /metrics, or {} if unreadable."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {m.group(1): int(float(m.group(2))) for m in re.finditer(
        r'^stoker_coordinator_journal_snapshots_total\{thread="(\w+)"\} (\S+)$', text,
        re.M)}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    try:
        import grpc
    except ImportError:
        print("SKIP: grpcio is not importable (Debian: python3-grpcio)")
        return 77
    say_passes()
    coord = os.path.join(sys.argv[1], "stoker-coordinator")
    worker = os.path.join(sys.argv[1], "stoker-worker")
    train = sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="stoker-journal-threads.")
    clog = os.path.join(tmp, "coord.log")
    try:
        pf, mport = os.path.join(tmp, "coord.port"), free_port()
        c = spawn([coord, "--listen", "127.0.0.1:0", "--port-file", pf, "--set",
                   "num_samples=768", "--set", "height=8", "--set", "width=8", "--set",
                   "batch_size=8", "--set", "world_size=3", "--state-dir",
                   os.path.join(tmp, "state"), "--idle-timeout-s", "120",
                   "--metrics-listen", "127.0.0.1:%d" % mport], clog, group=True)
        port = wait_port(pf, c, timeout=30)
        ws = []
        for i in range(2):
            wpf = os.path.join(tmp, "w%d.port" % i)
            ws.append(spawn([worker, "--coordinator", "127.0.0.1:%d" % port, "--threads", "1",
                             "--port-file", wpf], os.path.join(tmp, "w%d.log" % i),
                            group=True))
            wait_port(wpf, ws[-1], timeout=30)
        until(lambda: open(clog, errors="replace").read().count("registered at") >= 2, 30,
              "both workers registered")
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        join = ch.unary_unary("/stoker.v1.Coordinator/Join")
        finish = ch.unary_unary("/stoker.v1.Coordinator/Finish")
        # The list a Join returns is the published one, which follows a
        # registration within one publish tick: join again (same client id)
        # until it lists a worker.
        got = {}

        def joined():
            got["r"] = parse(join(f_varint(1, 2) + f_varint(2, 3) +
                                  f_bytes(3, "journal-rank2") +
                                  f_varint(4, PROTOCOL_VERSION), timeout=30))
            return len(got["r"].get(3, [])) >= 1
        until(joined, 30, "Join lists the workers")
        check(len(got.get("r", {}).get(3, [])) >= 1, "rank 2 joins (stock grpcio)")
        for r in range(2):
            p = spawn([train, "--coordinator", "127.0.0.1:%d" % port, "--rank", str(r),
                       "--world-size", "3", "--verify"], os.path.join(tmp, "rank%d.log" % r),
                      group=True)
            rc = wait_exit(p, 120)
            check(rc == 0, "rank %d gets every batch, verified, and finishes (rc %s)" %
                  (r, rc))
        mid = snapshots(mport)
        check(mid.get("writer", 0) >= 3 and mid.get("rpc", -1) == 0,
              "mid-run /metrics: journal snapshots by the writer thread, none written or "
              "waited for on a serving thread: %s" % mid)
        ws[1].kill()
        wait_exit(ws[1], 30)
        until(lambda: " left; " in open(clog, errors="replace").read(), 30,
              "the killed worker leaves the list (journaled)")
        resp = parse(finish(f_varint(1, 2) + f_varint(3, 1) + f_bytes(4, "journal test"),
                            timeout=30))
        check(resp.get(2) == [3], "rank 2's Finish{abort_job} is answered: %s" % resp)
        rc = wait_exit(c, 60)
        check(rc == EXIT_ABORTED, "the coordinator exits %d (aborted): %s" %
              (EXIT_ABORTED, rc))
        log = open(clog, errors="replace").read()
        m = re.search(r"state journal: (\d+) snapshots written by its writer thread, (\d+) "
                      r"by main, (\d+) written or waited for by serving threads", log)
        check(m is not None and int(m.group(1)) > mid.get("writer", 0) and
              int(m.group(3)) == 0,
              "at the end: more snapshots by the writer thread, none written or waited "
              "for on a serving thread: %s" % (m.group(0) if m else None))
        check("on a serving thread (a bug)" not in log,
              "the coordinator never logs a journal write or wait on a serving thread")
        wait_exit(ws[0], 60)
        ch.close()
    finally:
        reap()
        if fails:
            for n in sorted(os.listdir(tmp)):
                if n.endswith(".log"):
                    print("---- %s (tail)" % n)
                    print("".join(open(os.path.join(tmp, n), errors="replace")
                                  .readlines()[-15:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % len(fails) if fails else "test_journal_threads: all passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
