"""test_rejoin_bounds.py - the coordinator stays flat across many rejoins:
a job of 300 ranks with a state journal (--state-dir); every rank joins,
rank 299 finishes, then 3,000 rounds of: a rank (0..298 in turn) joins
again (its own client id: a restarted training process rejoining), opens
a WatchWorkers call, reads its first list and cancels it, and rank 299
sends Finish again. Raw protobuf over
stock grpcio (tests/protowire.py), as many clients over days would.

Checks, between the state after 300 rounds (warm) and after 3,000: the
journal file (the whole-state snapshot) keeps its size; the coordinator's
RSS grows by at most 2 MiB, its open fds by at most 4, its threads by at
most 2; the job still runs (nothing finished twice: Finish answers 1 of
300 finished).

usage: test_rejoin_bounds.py BIN_DIR (stoker-coordinator in it). Exit 0
passed, 1 failed, 77 skipped (no grpcio). Every wait is bounded; every
process is reaped.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, spawn, wait_port  # noqa: E402
from protowire import f_bytes, f_varint, parse  # noqa: E402

PROTOCOL_VERSION = 1  # include/stoker/version.h.in
RANKS, WARM, ROUNDS = 300, 600, 3000
MIB = 1024 * 1024


def figures(pid, state):
    with open("/proc/%d/status" % pid) as f:
        st = dict(ln.split(":", 1) for ln in f if ":" in ln)
    return {"rss": int(st["VmRSS"].split()[0]) * 1024, "threads": int(st["Threads"]),
            "fds": len(os.listdir("/proc/%d/fd" % pid)), "state": os.path.getsize(state)}


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
    tmp = tempfile.mkdtemp(prefix="stoker-rejoin-bounds.")
    state_dir = os.path.join(tmp, "state")
    try:
        pf = os.path.join(tmp, "coord.port")
        p = spawn([coord, "--listen", "127.0.0.1:0", "--port-file", pf, "--set",
                   "num_samples=4096", "--set", "height=16", "--set", "width=16", "--set",
                   "batch_size=4", "--set", "world_size=%d" % RANKS, "--state-dir", state_dir,
                   "--idle-timeout-s", "120", "--stats-interval-s", "5"],
                  os.path.join(tmp, "coord.log"), group=True)
        port = wait_port(pf, p, timeout=30)
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        join = ch.unary_unary("/stoker.v1.Coordinator/Join")
        watch = ch.unary_stream("/stoker.v1.Coordinator/WatchWorkers")
        finish = ch.unary_unary("/stoker.v1.Coordinator/Finish")

        def join_rank(r):
            return join(f_varint(1, r) + f_varint(2, RANKS) + f_bytes(3, "rejoin-%d" % r) +
                        f_varint(4, PROTOCOL_VERSION), timeout=20)

        for r in range(RANKS):
            join_rank(r)
        last = RANKS - 1
        fin = parse(finish(f_varint(1, last), timeout=20))
        check(fin.get(1) == [1], "Finish of rank %d: 1 rank finished (%s)" % (last, fin))
        state = os.path.join(state_dir, "state")
        warm = None
        watched = 0
        for i in range(ROUNDS):
            r = i % last
            join_rank(r)
            call = watch(f_varint(1, r) + f_bytes(6, "rejoin-%d" % r) + f_varint(7, 1),
                         timeout=10)
            try:
                next(call)
                watched += 1
            except (grpc.RpcError, StopIteration):
                pass
            call.cancel()
            fin = parse(finish(f_varint(1, last), timeout=20))
            if i + 1 == WARM:
                warm = figures(p.pid, state)
        end = figures(p.pid, state)
        ch.close()
        print("after %d rounds: %s; after %d: %s; %d watches answered"
              % (WARM, warm, ROUNDS, end, watched))
        check(watched >= ROUNDS // 2, "most watches got their first list (%d)" % watched)
        check(fin.get(1) == [1] and fin.get(2) == [RANKS],
              "Finish still answers 1 of %d finished (%s)" % (RANKS, fin))
        check(end["state"] == warm["state"], "journal size %d bytes, %d when warm"
              % (end["state"], warm["state"]))
        # Under ASan freed memory waits in its quarantine (up to 256 MiB), so
        # RSS says nothing there: printed, judged only without sanitizers.
        rss = "coordinator RSS %.2f MiB, %.2f when warm" % (end["rss"] / MIB, warm["rss"] / MIB)
        if os.environ.get("STOKER_SANITIZED") == "1":
            print("info " + rss + " (not judged under sanitizers)")
        else:
            check(end["rss"] <= warm["rss"] + 2 * MIB, rss)
        check(end["fds"] <= warm["fds"] + 4, "fds %d, %d when warm" % (end["fds"], warm["fds"]))
        check(end["threads"] <= warm["threads"] + 2, "threads %d, %d when warm"
              % (end["threads"], warm["threads"]))
        check(p.poll() is None, "the coordinator still runs")
    finally:
        reap(term_s=0)
        if fails:
            with open(os.path.join(tmp, "coord.log"), errors="replace") as h:
                print("---- coord.log (tail) ----\n" + h.read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_rejoin_bounds: %s" % ("FAILED (%d)" % len(fails) if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
