"""coord_finish_storm.py - thousands of ranks ending at once: R concurrent
Coordinator.Finish calls (a stock grpcio client, C channels) at a real
stoker-coordinator with --state-dir, while a real stoker-worker
heartbeats every 200 ms (--heartbeat-misses 3). Prints the latency
percentiles of the Finish calls, their errors, the wall time, the
journal writes that answered them (from /metrics, where the coordinator
has them) and the heartbeat lapses the coordinator logged meanwhile.
With --baseline BIN the same run is made with another coordinator binary
first (e.g. one built from an older commit), on the same machine.

Usage: /usr/bin/python3 coord_finish_storm.py BIN_DIR [--ranks R]
       [--channels C] [--baseline COORDINATOR_BIN] [--tmp DIR (default /var/tmp)]
Not a ctest case (a measurement); needs python3-grpcio.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from protowire import varint  # noqa: E402


def wait_file(path, proc, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read())
        if proc.poll() is not None:
            raise RuntimeError("%s exited %s" % (proc.args[0], proc.returncode))
        time.sleep(0.02)
    raise RuntimeError("no port file " + path)


def pct(v, p):
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]


def run(coord_bin, worker_bin, ranks, channels, tag, tmp):
    d = tempfile.mkdtemp(prefix="stoker-finish-storm.", dir=tmp)
    procs = []
    try:
        with open(f"{d}/job.txt", "w") as f:
            # world_size ranks + 1: the job stays up after the storm (rank R
            # never finishes), so /metrics can still be read.
            f.write(f"source = synthetic\nnum_samples = {4 * (ranks + 1)}\nheight = 8\n"
                    f"width = 8\nbatch_size = 1\nworld_size = {ranks + 1}\nepochs = 1\n")
        log = f"{d}/coord.log"
        args = [coord_bin, "--job", f"{d}/job.txt", "--port-file", f"{d}/port",
                "--state-dir", f"{d}/state", "--heartbeat-interval-ms", "200",
                "--heartbeat-misses", "3", "--metrics-listen", "127.0.0.1:0"]
        c = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        procs.append(c)
        port = wait_file(f"{d}/port", c)
        w = subprocess.Popen([worker_bin, "--coordinator", f"127.0.0.1:{port}",
                              "--threads", "1", "--port-file", f"{d}/wport"],
                             stdout=open(f"{d}/w.log", "w"), stderr=subprocess.STDOUT)
        procs.append(w)
        wait_file(f"{d}/wport", w)
        time.sleep(1.0)  # registered, a few heartbeats
        chans = [grpc.insecure_channel(f"127.0.0.1:{port}",
                                       options=[("grpc.use_local_subchannel_pool", 1)])
                 for _ in range(channels)]
        for ch in chans:
            grpc.channel_ready_future(ch).result(timeout=10)
        calls = [ch.unary_unary("/stoker.v1.Coordinator/Finish", request_serializer=None,
                                response_deserializer=None) for ch in chans]
        lat, errs, mu = [], {}, threading.Lock()
        done = threading.Event()
        left = [ranks]
        cpu0 = open(f"/proc/{c.pid}/stat").read().split()
        t0 = time.monotonic()

        def finished(fut, start):
            el = time.monotonic() - start
            with mu:
                try:
                    fut.result()
                    lat.append(el)
                except grpc.RpcError as e:
                    errs[e.code().name] = errs.get(e.code().name, 0) + 1
                left[0] -= 1
                if not left[0]:
                    done.set()

        for r in range(ranks):
            req = (b"\x08" + varint(r)) if r else b""
            st = time.monotonic()
            fut = calls[r % channels].future(req, timeout=60)
            fut.add_done_callback(lambda f, st=st: finished(f, st))
        done.wait(120)
        wall = time.monotonic() - t0
        cpu1 = open(f"/proc/{c.pid}/stat").read().split()
        cpu = (int(cpu1[13]) + int(cpu1[14]) - int(cpu0[13]) - int(cpu0[14])) / \
            os.sysconf("SC_CLK_TCK")
        text = open(log).read()
        writes = waiters = "n/a"
        m = re.search(r"metrics on http://\S+ \(port (\d+)\)", text)
        if m:
            body = urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/metrics",
                                          timeout=10).read().decode()
            mw = re.search(r"^stoker_coordinator_journal_writes_total (\S+)", body, re.M)
            mq = re.search(r"^stoker_coordinator_journal_waiters_total (\S+)", body, re.M)
            writes = mw.group(1) if mw else "n/a"
            waiters = mq.group(1) if mq else "n/a"
        lapses = len(re.findall(r"missed \d+ heartbeats|suspect, still listed", text))
        lat.sort()
        print(f"{tag}: {ranks} Finish calls over {channels} channels: "
              f"{len(lat)} ok, errors {errs or 'none'}; latency s p50 {pct(lat, 50):.3f} "
              f"p90 {pct(lat, 90):.3f} p99 {pct(lat, 99):.3f} max {lat[-1]:.3f}; "
              f"wall {wall:.2f} s; coordinator CPU {cpu:.2f} s; journal writes {writes} "
              f"for {waiters} waiters; heartbeat lapses logged {lapses}"
              if lat else f"{tag}: no call succeeded: {errs}", flush=True)
        for ch in chans:
            ch.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--ranks", type=int, default=2000)
    ap.add_argument("--channels", type=int, default=20)
    ap.add_argument("--baseline")
    ap.add_argument("--tmp", default="/var/tmp",
                    help="where the state dir goes (a real disk: fsync must cost)")
    a = ap.parse_args()
    worker = os.path.join(a.bin_dir, "stoker-worker")
    if a.baseline:
        run(a.baseline, worker, a.ranks, a.channels, "baseline", a.tmp)
    run(os.path.join(a.bin_dir, "stoker-coordinator"), worker, a.ranks, a.channels,
        "this build", a.tmp)


if __name__ == "__main__":
    sys.exit(main())
