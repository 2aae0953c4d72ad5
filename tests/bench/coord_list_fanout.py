"""coord_list_fanout.py - what one worker joining and one leaving cost a
stoker-coordinator with many watchers: M fake workers (raw WorkerSession
calls that register and heartbeat) and N WatchWorkers calls (a stock
grpcio client, asyncio, a few channels; takes_deltas set, as libstoker
does), then one more worker registers and later leaves. For each change
it prints the time until every watcher had a message about it, the bytes
the watchers received for it, and the coordinator's CPU seconds over the
change. With --baseline BIN the same run is made with another coordinator
binary first, on the same machine.

Usage: /usr/bin/python3 coord_list_fanout.py COORDINATOR_BIN
       [--watchers N] [--workers M] [--baseline COORDINATOR_BIN]
Not a ctest case (a measurement); needs python3-grpcio.
"""
import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import grpc
import grpc.aio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from protowire import f_bytes, f_fixed64, f_varint, parse  # noqa: E402


def hello(wid, addr, job_hash=0, size=0):
    info = f_bytes(1, wid) + f_bytes(2, addr) + f_varint(3, 1)
    reg = (f_bytes(1, info) + f_varint(2, 1) + f_fixed64(3, job_hash) +
           f_varint(4, size) + f_fixed64(5, 0x1234) + f_varint(8, 1))
    return f_bytes(1, reg)


HEARTBEAT = f_bytes(2, f_bytes(1, b""))
SAMPLES = 1 << 20


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().split()
    return (int(f[13]) + int(f[14])) / os.sysconf("SC_CLK_TCK")


class Worker:
    """A fake worker: registers, heartbeats every 0.5 s until stopped."""

    def __init__(self, ch, i):
        self.ch, self.i, self.task, self.ok = ch, i, None, asyncio.Event()

    async def run(self):
        call = self.ch.stream_stream("/stoker.v1.Coordinator/WorkerSession",
                                     request_serializer=None, response_deserializer=None)()
        wid, addr = f"fake-{self.i}", f"127.0.0.1:{20000 + self.i}"
        try:
            await call.write(hello(wid, addr))
            ack = parse(parse(await call.read())[1][0])
            h = parse(ack[1][0])[2][0]
            await call.write(hello(wid, addr, h, SAMPLES))
            self.ok.set()
            while True:
                await call.write(HEARTBEAT)
                await asyncio.sleep(0.5)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            call.cancel()

    def start(self):
        self.task = asyncio.ensure_future(self.run())

    def stop(self):
        self.task.cancel()


class Watcher:
    def __init__(self, ch, rank):
        self.ch, self.rank, self.events = ch, rank, []  # (time, bytes)
        self.error = None

    async def run(self):
        req = f_varint(1, self.rank) + f_varint(7, 1)  # rank, takes_deltas
        call = self.ch.unary_stream("/stoker.v1.Coordinator/WatchWorkers",
                                    request_serializer=None, response_deserializer=None)(
            req)
        try:
            async for m in call:
                self.events.append((time.monotonic(), len(m)))
        except grpc.aio.AioRpcError as e:
            self.error = "%s %s" % (e.code().name, e.details())
        except asyncio.CancelledError:
            call.cancel()


async def until(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(0.02)
    return False


async def change(tag, what, ws, pid, act):
    """Do act(); report when every watcher had a message after it."""
    n0 = [len(w.events) for w in ws]
    c0, t0 = cpu_s(pid), time.monotonic()
    act()
    ok = await until(lambda: all(len(w.events) > n for w, n in zip(ws, n0)), 60)
    t1 = max(w.events[n][0] for w, n in zip(ws, n0) if len(w.events) > n)
    await asyncio.sleep(0.5)  # anything else it sends for this change
    c1 = cpu_s(pid)
    got = sum(b for w, n in zip(ws, n0) for _, b in w.events[n:])
    msgs = sum(len(w.events) - n for w, n in zip(ws, n0))
    print(f"{tag}: one worker {what}: every watcher had it {t1 - t0:.3f} s after "
          f"({'all' if ok else 'NOT all'} {len(ws)}), {msgs} messages, {got} bytes "
          f"({got / max(1, len(ws)):.0f} per watcher), coordinator CPU "
          f"{c1 - c0:.3f} s", flush=True)


async def bench(coord, nwatch, nwork, tag):
    d = tempfile.mkdtemp(prefix="stoker-fanout.")
    p = None
    try:
        with open(f"{d}/job.txt", "w") as f:
            f.write(f"source = synthetic\nnum_samples = {SAMPLES}\nheight = 8\nwidth = 8\n"
                    f"batch_size = 1\nworld_size = {nwatch}\nepochs = 1\n")
        p = subprocess.Popen([coord, "--job", f"{d}/job.txt", "--port-file", f"{d}/port",
                              "--trust-worker-addresses", "--watch-lease-s", "3600",
                              "--max-calls", str(nwatch + nwork + 100),
                              "--log-level", "warn"],
                             stdout=open(f"{d}/coord.log", "w"), stderr=subprocess.STDOUT)
        for _ in range(500):
            if os.path.exists(f"{d}/port") and open(f"{d}/port").read().strip():
                break
            time.sleep(0.02)
        port = int(open(f"{d}/port").read())
        nch = max(1, (nwatch + nwork) // 90 + 1)
        chans = [grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                           options=[("grpc.use_local_subchannel_pool", 1)])
                 for _ in range(nch)]
        workers = [Worker(chans[i % nch], i) for i in range(nwork)]
        for w in workers:
            w.start()
        await asyncio.gather(*(w.ok.wait() for w in workers))
        ws = [Watcher(chans[i % nch], i) for i in range(nwatch)]
        tasks = [asyncio.ensure_future(w.run()) for w in ws]
        ok = await until(lambda: all(w.events or w.error for w in ws), 60)
        errs = {}
        for w in ws:
            if w.error:
                errs[w.error] = errs.get(w.error, 0) + 1
        if errs:
            print(f"{tag}: watch errors: {errs}")
        await asyncio.sleep(1.0)  # the list with every worker, published
        total = sum(b for w in ws for _, b in w.events)
        print(f"{tag}: {nwatch} watchers, {nwork} workers: {'all' if ok else 'NOT all'} "
              f"watchers got their first list ({total / max(1, nwatch):.0f} bytes each); "
              f"coordinator RSS {int(open(f'/proc/{p.pid}/status').read().split('VmRSS:')[1].split()[0]) / 1024:.1f} MB",
              flush=True)
        extra = Worker(chans[0], nwork)
        await change(tag, "joining", ws, p.pid, extra.start)
        await change(tag, "leaving", ws, p.pid, extra.stop)
        for t in tasks:
            t.cancel()
        for w in workers:
            w.stop()
        await asyncio.sleep(0.2)
        for ch in chans:
            await ch.close()
    finally:
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coordinator")
    ap.add_argument("--watchers", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--baseline")
    a = ap.parse_args()
    if a.baseline:
        asyncio.run(bench(a.baseline, a.watchers, a.workers, "baseline"))
    asyncio.run(bench(a.coordinator, a.watchers, a.workers, "this build"))


if __name__ == "__main__":
    sys.exit(main())
