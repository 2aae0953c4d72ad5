"""test_list_deltas.py - the coordinator's published worker list and its
liveness rules, with a real stoker-coordinator, real stoker-worker
processes and stock grpcio clients (message classes that protoc generates
from proto/stoker.proto at test time).

  deltas    a watch that says takes_deltas gets the whole list first, then
            one delta per change (changes are published at most every
            250 ms, so the test waits for each before the next): a worker started (a delta listing it,
            base_version = the version it had), a worker killed -9 (a delta
            whose removed names it), each delta's base_version the version
            before it; applying them gives the list Status shows.
  whole     a watch without takes_deltas (a stock or older client) gets
            whole lists at the same versions.
  stale     a watch with takes_deltas and a known_version the coordinator
            never published gets the whole list; one whose known_version is
            an earlier published version gets the deltas since, in order.
  join      Join answers with the published version and the whole list.
  suspect   a real worker stopped with SIGSTOP (short --heartbeat-interval-ms,
            --heartbeat-lapse-s 4): Status shows it suspect while it stays
            listed (no delta removes it, the log says so once); once the
            lapse passes it is dropped (a delta removes it). SIGCONT in a
            finally block.

Every wait polls a condition and is bounded; every process is reaped.
Usage: test_list_deltas.py BIN_DIR PROTO_DIR
Exit 0 passed, 1 failed, 77 skipped (no grpcio/protobuf/protoc).
"""
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, say_passes, spawn, until, wait_port  # noqa: E402

if len(sys.argv) != 3:
    print(__doc__)
    sys.exit(2)
BIN, PROTO = sys.argv[1], sys.argv[2]
try:
    import grpc
    import google.protobuf  # noqa: F401
except ImportError as e:
    print("SKIP: %s (apt-get install python3-grpcio python3-protobuf)" % e)
    sys.exit(77)
if not shutil.which("protoc"):
    print("SKIP: protoc is not installed (apt-get install protobuf-compiler)")
    sys.exit(77)
say_passes()
PROTOCOL_VERSION = 1
pb = None  # stoker_pb2, generated in main


class Watch:
    """A WatchWorkers call read on a thread of its own: every WorkerList in
    order in self.q (None once the call ended)."""

    def __init__(self, ch, rank, known=0, deltas=True):
        call = ch.unary_stream("/stoker.v1.Coordinator/WatchWorkers",
                               request_serializer=pb.WatchRequest.SerializeToString,
                               response_deserializer=pb.WorkerList.FromString)
        self.resp = call(pb.WatchRequest(rank=rank, known_version=known,
                                         takes_deltas=deltas), timeout=120)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for m in self.resp:
                self.q.put(m)
        except grpc.RpcError:
            pass
        self.q.put(None)

    def next(self, timeout=20):
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return None

    def quiet(self, timeout):
        """True when nothing comes within timeout seconds."""
        try:
            m = self.q.get(timeout=timeout)
        except queue.Empty:
            return True
        self.q.put(m)  # (order no longer matters to the caller)
        return False

    def cancel(self):
        self.resp.cancel()


def apply(lst, m):
    """The list (dict id -> (address, cores)) after m."""
    if not m.delta:
        return {w.worker_id: (w.address, w.cores) for w in m.workers}
    out = dict(lst)
    for r in m.removed:
        out.pop(r, None)
    for w in m.workers:
        out[w.worker_id] = (w.address, w.cores)
    return out


def status(ch):
    call = ch.unary_unary("/stoker.v1.Coordinator/Status",
                          request_serializer=pb.StatusRequest.SerializeToString,
                          response_deserializer=pb.StatusResponse.FromString)
    return call(pb.StatusRequest(), timeout=20)


def listed(ch):
    return {w.worker.worker_id: w for w in status(ch).workers}


def start_worker(d, port, tag):
    pf = f"{d}/{tag}.port"
    p = spawn([f"{BIN}/stoker-worker", "--coordinator", f"127.0.0.1:{port}",
               "--threads", "1", "--port-file", pf, "--orphan-timeout-s", "60"],
              f"{d}/{tag}.log")
    wait_port(pf, p, timeout=30)
    return p


def main():
    global pb
    d = tempfile.mkdtemp(prefix="stoker-deltas-test.")
    subprocess.run(["protoc", "--proto_path", PROTO, "--python_out", d,
                    os.path.join(PROTO, "stoker.proto")], check=True, timeout=60)
    sys.path.insert(0, d)
    import stoker_pb2
    pb = stoker_pb2
    with open(f"{d}/job.txt", "w") as f:
        f.write("source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n"
                "batch_size = 8\nworld_size = 2\nepochs = 1\n")
    stopped = []
    watches = []
    try:
        clog = f"{d}/coord.log"
        coord = spawn([f"{BIN}/stoker-coordinator", "--job", f"{d}/job.txt",
                       "--port-file", f"{d}/coord.port", "--heartbeat-interval-ms", "200",
                       "--heartbeat-misses", "3", "--heartbeat-lapse-s", "4",
                       "--watch-lease-s", "300", "--log-level", "debug"], clog)
        port = wait_port(f"{d}/coord.port", coord)
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")

        # ---- deltas / whole -------------------------------------------------
        wa = start_worker(d, port, "wa")
        until(lambda: len(listed(ch)) == 1, 30, "worker A listed")
        a_id = next(iter(listed(ch)))
        # The list is published at most every 250 ms: read until it has A.
        dw = Watch(ch, 0, deltas=True)
        ww = Watch(ch, 1, deltas=False)
        first = dw.next()
        check(first is not None and not first.delta,
              "a takes_deltas watch gets the whole list first")
        lst, m = apply({}, first), first
        while m is not None and a_id not in lst:
            m = dw.next()
            check(m is not None and m.delta and m.base_version == first.version,
                  "then a delta based on the version it had")
            lst = apply(lst, m) if m is not None else lst
        check(list(lst) == [a_id], "the deltas applied list worker A")
        v1 = m.version if m is not None else 0
        mw = ww.next()
        while mw is not None and mw.version != v1:
            check(not mw.delta, "a plain watch gets whole lists only")
            mw = ww.next()
        check(mw is not None and not mw.delta and
              [w.worker_id for w in mw.workers] == [a_id],
              "a plain watch gets the whole list at the same version")

        wb = start_worker(d, port, "wb")
        m = dw.next()
        check(m is not None and m.delta and m.base_version == v1 and
              len(m.workers) == 1 and m.workers[0].worker_id != a_id and not m.removed,
              "worker B started: one delta listing it, based on the version before")
        b_id = m.workers[0].worker_id if m is not None and m.workers else None
        lst = apply(lst, m)
        v2 = m.version if m is not None else 0
        check(v2 == v1 + 1, "versions count up by one per published change")
        mw = ww.next()
        check(mw is not None and not mw.delta and mw.version == v2 and
              sorted(w.worker_id for w in mw.workers) == sorted([a_id, b_id]),
              "the plain watch gets the whole list (A and B)")
        check(set(lst) == set(listed(ch)), "the deltas applied give the list Status shows")

        wb.kill()
        wb.wait()
        m = dw.next()
        check(m is not None and m.delta and m.base_version == v2 and
              list(m.removed) == [b_id] and not m.workers,
              "worker B killed: one delta whose removed names it")
        lst = apply(lst, m)
        v3 = m.version if m is not None else 0
        mw = ww.next()
        check(mw is not None and not mw.delta and mw.version == v3 and
              [w.worker_id for w in mw.workers] == [a_id],
              "the plain watch gets the whole list (A)")
        check(set(lst) == {a_id}, "the deltas applied leave worker A alone")

        # ---- stale, in history, join ---------------------------------------
        sw = Watch(ch, 0, known=v1 - 1000, deltas=True)
        m = sw.next()
        check(m is not None and not m.delta and m.version == v3 and
              [w.worker_id for w in m.workers] == [a_id],
              "a watch at a version never published gets the whole list")
        sw.cancel()
        hw = Watch(ch, 1, known=v1, deltas=True)
        m1, m2 = hw.next(), hw.next()
        check(m1 is not None and m2 is not None and m1.delta and m2.delta and
              (m1.base_version, m1.version, m2.base_version, m2.version) ==
              (v1, v2, v2, v3),
              "a watch at an earlier version gets the deltas since, chained, in order")
        hw.cancel()
        join = ch.unary_unary("/stoker.v1.Coordinator/Join",
                              request_serializer=pb.JoinRequest.SerializeToString,
                              response_deserializer=pb.JoinResponse.FromString)
        jr = join(pb.JoinRequest(rank=1, world_size=2, client_id="deltas-test",
                                 protocol_version=PROTOCOL_VERSION), timeout=20)
        check(jr.list_version == v3 and [w.worker_id for w in jr.workers] == [a_id] and
              jr.job.hash != 0 and "world_size = 2" in jr.job.canonical,
              "Join answers with the published version, list and the job")

        # ---- suspect, then dropped ------------------------------------------
        os.kill(wa.pid, signal.SIGSTOP)
        stopped.append(wa)
        until(lambda: a_id in listed(ch) and listed(ch)[a_id].suspect, 30,
              "a stopped worker is shown suspect")
        check(a_id in listed(ch), "a suspect worker stays listed")
        check(dw.quiet(1.0), "no delta while the worker is only suspect")
        until(lambda: "suspect, still listed" in open(clog).read(), 10,
              "the coordinator logs that the worker is suspect")
        m = dw.next(timeout=30)
        check(m is not None and m.delta and list(m.removed) == [a_id],
              "after --heartbeat-lapse-s the worker is dropped (a delta removes it)")
        check(a_id not in listed(ch), "and Status no longer lists it")
        check(open(clog).read().count("suspect, still listed") == 1,
              "the suspect line is logged once")
        os.kill(wa.pid, signal.SIGCONT)
        stopped.remove(wa)
        # It comes back: its session was ended, it registers again.
        m = dw.next(timeout=30)
        check(m is not None and m.delta and len(m.workers) == 1,
              "the worker, continued, registers again (a delta lists it)")

        for w in (dw, ww):
            w.cancel()
        ch.close()
        coord.send_signal(signal.SIGTERM)
        check(coord.wait(60) == 0, "the coordinator exits 0 on SIGTERM")
    finally:
        for p in stopped:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for w in watches:
            w.cancel()
        reap()
        if fails:
            print("logs kept in", d)
            for name in sorted(os.listdir(d)):
                if name.endswith(".log"):
                    print("----", name)
                    print(open(os.path.join(d, name), errors="replace").read()[-4000:])
        else:
            shutil.rmtree(d, ignore_errors=True)
    print("FAILED: %d" % len(fails) if fails else "PASSED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
