#!/usr/bin/python3
"""loadgen.py - the coordinator load test (not part of CI's default run;
tests/scale/README.md): one real stoker-coordinator, and in its place the
workers and ranks of a job of --ranks x --workers (default 10,000 x 1,000)
played by this script over a few connections (grpc.aio, Debian's
python3-grpcio; the message classes are generated from proto/stoker.proto
by protoc at run time):

  workers   --workers Coordinator.WorkerSession streams, each registering
            like stoker-worker (hello, RegisterAck, second hello with the
            job hash and dataset size; a fake address on 127.0.0.1), then
            heartbeating every interval the coordinator asks for; a session
            the coordinator ends registers again within about a second
  ranks     --ranks Join calls, then one WatchWorkers stream per rank
            (re-announcing like libstoker: job hash, client id; with
            takes_deltas unless --no-deltas)
  changes   --changes times: one more worker registers, then leaves (its
            session cancelled)

and reports: the time to admit every join; the coordinator's CPU
(utime+stime from /proc/PID/stat) and RSS after the joins and watches;
and for one worker joining and one leaving, the coordinator's CPU above
its idle rate, the bytes every watcher received for it (message sizes)
and the time from the change until each watcher had it (p50/p99/max).
Whether the coordinator sends deltas shows in the messages (WorkerList.
delta); every delta must chain (its base_version is the version the
watcher had) and, on a sample of watchers that apply them, give the same
list as a whole-list watch. The client-side processes are Python, so the
times are upper bounds: they include this script's own receive (its CPU
is printed too; it shares the machine with the coordinator).

The coordinator needs world_size = --ranks, and serve limits above their
defaults at full size (--max-calls, --max-streams-per-conn: the script
sets them from the sizes and prints which it set; --default-limits runs
without them to show what the defaults do), and a long --watch-lease-s so
no watch ends during the run.

The workers register all at once (a cluster starting) and, like
stoker-worker, retry a transient refusal with backoff; the report gives
the burst: time until every worker was registered, the refusals seen and
the most tries one worker took.

Usage: loadgen.py [--bin-dir build/rel] [--ranks 10000] [--workers 1000]
                  [--conns 4] [--procs 2] [--changes 2] [--no-deltas]
                  [--worker-host 127.0.0.1] [--check] [--markdown]
--check exits 1 unless every worker registered (a numeric --worker-host
with no refusal at all: such an address needs no lookup), every join was
admitted, every watch started and none ended, every watcher saw every
change, no delta broke its chain, the delta-applied lists equal the whole
list and no worker was dropped (counts, never durations). Exit 0 done (--check: passed), 1 a check
failed, 2 setup error, 77 skipped (no grpcio, protobuf or protoc).
"""
import argparse
import asyncio
import json
import os
import queue
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEEK_PROTO = """syntax = "proto3";
package loadgen;
// The top of a WorkerList / JoinResponse, its entries left as bytes: a
// watcher reads the version and the delta fields without parsing the list.
message ListPeek {
  uint64 version = 1;
  repeated bytes workers = 2;
  bool shutting_down = 3;
  bool delta = 6;
  uint64 base_version = 7;
  repeated string removed = 8;
}
message JoinPeek {
  bytes job = 1;
  uint64 list_version = 2;
  repeated bytes workers = 3;
}
"""
FINGERPRINT = 0x5CA1E5CA1E
REGISTER_GIVE_UP_S = 120  # a worker still refused after this long has failed
TICKS = os.sysconf("SC_CLK_TCK")


def pctl(vals, q):
    if not vals:
        return float("nan")
    v = sorted(vals)
    return v[min(len(v) - 1, int(q * len(v)))]


def gen_protos(proto_dir, out):
    with open(os.path.join(out, "loadgen_peek.proto"), "w") as f:
        f.write(PEEK_PROTO)
    for args in (["--proto_path", proto_dir, os.path.join(proto_dir, "stoker.proto")],
                 ["--proto_path", out, os.path.join(out, "loadgen_peek.proto")]):
        subprocess.run(["protoc", "--python_out", out] + args, check=True, timeout=60)
    sys.path.insert(0, out)


def cpu_self():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def channels(target, n):
    import grpc
    opts = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1)]
    return [grpc.aio.insecure_channel(target, options=opts + [("loadgen.conn", i)])
            for i in range(n)]


async def read_commands():
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        yield json.loads(line)


# ---- role: the workers' sessions --------------------------------------------
class Sessions:
    def __init__(self, a, pb):
        self.a, self.pb = a, pb
        self.chans = channels(a.target, a.conns)
        self.calls = {}  # worker id -> call
        self.tasks = {}
        self.ended = 0  # sessions the coordinator ended (e.g. heartbeats lapsed)
        self.reregistered = 0
        self.max_gap = 0.0  # longest time between two heartbeats this process sent
        # the registration burst: refusals before a first registration (the
        # coordinator's "retry"), per code, and the most tries one worker took
        self.refusals = {}
        self.max_tries = 0
        self.first_refusal = ""

    def stub(self, i):
        pb = self.pb
        return self.chans[i % len(self.chans)].stream_stream(
            "/stoker.v1.Coordinator/WorkerSession",
            request_serializer=pb.WorkerMessage.SerializeToString,
            response_deserializer=pb.CoordinatorCommand.FromString)

    async def session(self, i, wid, registered):
        """One worker's session, as stoker-worker runs it (server/worker/
        session.c): register, heartbeat on schedule; when the coordinator
        refuses a registration with a transient code (UNAVAILABLE "retry",
        RESOURCE_EXHAUSTED, ...) or ends the session (a heartbeat lapse),
        back off (0.1 s doubling to 1 s) and register again; a final code
        (FAILED_PRECONDITION, INVALID_ARGUMENT, OUT_OF_RANGE,
        UNIMPLEMENTED, UNAUTHENTICATED, PERMISSION_DENIED: stk__rpc_status)
        fails the worker, as it stops stoker-worker. A first registration
        is given REGISTER_GIVE_UP_S in all."""
        import grpc
        final = {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT,
                 grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNIMPLEMENTED,
                 grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}
        pb, a = self.pb, self.a
        info = pb.WorkerInfo(worker_id=wid, address="%s:%d" % (
            "[%s]" % a.host if ":" in a.host and a.host[0] != "[" else a.host,
            20000 + i % 40000),
                             cores=1)
        backoff, was_registered, tries = 0.1, False, 0
        t_start = time.monotonic()
        while True:
            tries += 1
            call = self.stub(i)()
            self.calls[wid] = call
            try:
                await call.write(pb.WorkerMessage(hello=pb.Register(
                    worker=info, protocol_version=1)))
                cmd = await call.read()
                h = cmd.ack.job.hash
                await call.write(pb.WorkerMessage(hello=pb.Register(
                    worker=info, protocol_version=1, job_hash=h, dataset_size=a.samples,
                    dataset_fingerprint=FINGERPRINT)))
                interval = max(0.05, cmd.ack.heartbeat_interval_ms / 1000.0)
                if was_registered:
                    self.reregistered += 1
                was_registered, backoff = True, 0.1
                if not registered.done():
                    self.max_tries = max(self.max_tries, tries)
                    registered.set_result(time.monotonic())
                reader = asyncio.ensure_future(self.reader(call))
                # spread the beats of all sessions over the interval
                last = time.monotonic()
                nxt = last + interval * (i % 1000) / 1000.0
                nb = 0
                while not reader.done():
                    await asyncio.wait([reader], timeout=max(0, nxt - time.monotonic()))
                    if reader.done():
                        break
                    nb += 1
                    await call.write(pb.WorkerMessage(heartbeat=pb.Heartbeat(
                        stats=pb.WorkerStats(batches_built=nb, active_streams=0))))
                    now = time.monotonic()
                    self.max_gap = max(self.max_gap, now - last)
                    last, nxt = now, max(nxt + interval, now)
                reader.result()  # EOF or a Shutdown: the session is over
                return
            except asyncio.CancelledError:
                call.cancel()
                raise
            except Exception as e:  # the coordinator refused or ended the session
                if not registered.done():
                    code = e.code() if isinstance(e, grpc.aio.AioRpcError) else None
                    if (code is None or code in final or
                            time.monotonic() - t_start > REGISTER_GIVE_UP_S):
                        registered.set_exception(e)
                        return
                    name = code.name
                    self.refusals[name] = self.refusals.get(name, 0) + 1
                    if not self.first_refusal:
                        self.first_refusal = "%s %s" % (name, (e.details() or "")[:200])
                else:
                    self.ended += 1
            await asyncio.sleep(backoff)
            backoff = min(1.0, backoff * 2)

    async def reader(self, call):
        import grpc
        while True:
            m = await call.read()
            if m is grpc.aio.EOF:
                return
            if m.HasField("shutdown"):
                return

    def start(self, i, wid):
        loop = asyncio.get_running_loop()
        reg = loop.create_future()
        self.tasks[wid] = asyncio.ensure_future(self.session(i, wid, reg))
        return reg

    async def run(self):
        a = self.a
        regs = []
        t0 = time.monotonic()
        for i in range(a.workers):
            regs.append(self.start(i, "loadgen-w%d" % i))
            if i % 50 == 49:
                await asyncio.sleep(0)
        res = await asyncio.gather(*regs, return_exceptions=True)
        bad = [r for r in res if isinstance(r, Exception)]
        out({"ev": "registered", "n": len(res) - len(bad), "failed": len(bad),
             "first_error": str(bad[0])[:300] if bad else "", "s": time.monotonic() - t0,
             "refusals": self.refusals, "max_tries": self.max_tries,
             "first_refusal": self.first_refusal})
        extra = 0
        async for cmd in read_commands():
            if cmd["cmd"] == "add":
                wid = "loadgen-extra%d" % extra
                extra += 1
                t = time.monotonic()
                reg = self.start(a.workers + extra, wid)
                try:
                    await asyncio.wait_for(reg, 30)
                    out({"ev": "added", "id": wid, "t": t})
                except Exception as e:
                    out({"ev": "added", "id": wid, "t": t, "error": str(e)[:300]})
            elif cmd["cmd"] == "remove":
                wid = cmd["id"]
                t = time.monotonic()
                self.calls[wid].cancel()
                self.tasks[wid].cancel()
                out({"ev": "removed", "id": wid, "t": t})
            elif cmd["cmd"] == "quit":
                break
        for t in self.tasks.values():
            t.cancel()
        for c in self.chans:
            await c.close()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        out({"ev": "bye", "cpu": ru.ru_utime + ru.ru_stime, "ended": self.ended,
             "reregistered": self.reregistered, "max_gap": self.max_gap})


# ---- role: ranks (join + watch) -----------------------------------------------
class Watcher:
    __slots__ = ("rank", "cur", "arrivals", "breaks", "deltas", "wholes", "state", "ended",
                 "deltas_flag")

    def __init__(self, rank, flag, full):
        self.rank, self.deltas_flag = rank, flag
        self.cur = 0
        self.arrivals = []  # (version, monotonic, bytes)
        self.breaks = self.deltas = self.wholes = 0
        self.state = {} if full else None  # worker id -> entry bytes (sampled watchers)
        self.ended = None


class Ranks:
    def __init__(self, a, pb, peek):
        self.a, self.pb, self.peek = a, pb, peek
        self.chans = channels(a.target, a.conns)
        self.watchers = []
        self.job_hash = 0
        self.join_lists = {}  # rank -> {worker id: address} from its Join (sampled ranks)
        # expect(): the version awaited and the watchers still below it, counted
        # down on receipt (no polling of every watcher: it would eat the CPU
        # the receive needs)
        self.target, self.behind = 1 << 64, 0
        self.caught_up = asyncio.Event()
        self.ref = None

    def join_stub(self, i):
        return self.chans[i % len(self.chans)].unary_unary(
            "/stoker.v1.Coordinator/Join",
            request_serializer=self.pb.JoinRequest.SerializeToString,
            response_deserializer=lambda b: b)

    def watch_stub(self, i):
        return self.chans[i % len(self.chans)].unary_stream(
            "/stoker.v1.Coordinator/WatchWorkers",
            request_serializer=self.pb.WatchRequest.SerializeToString,
            response_deserializer=lambda b: b)

    async def join_one(self, i, rank, sem, res):
        import grpc
        pb, a = self.pb, self.a
        async with sem:
            for attempt in range(20):
                try:
                    b = await self.join_stub(i)(pb.JoinRequest(
                        rank=rank, world_size=a.world, client_id="loadgen:%d:rank%d"
                        % (os.getpid(), rank), protocol_version=1), timeout=120)
                    jp = self.peek.JoinPeek.FromString(b)
                    job = pb.JobSpec.FromString(jp.job)
                    self.job_hash = job.hash
                    res[rank] = (jp.list_version, time.monotonic(), len(b), len(jp.workers))
                    if i < a.full_sample:  # the list a full-state watcher starts from
                        self.join_lists[rank] = {e.worker_id: e.address for e in
                                                 pb.JoinResponse.FromString(b).workers}
                    return
                except grpc.aio.AioRpcError as e:
                    if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == 19:
                        res[rank] = e
                        return
                    await asyncio.sleep(0.5)

    async def watch_one(self, i, w, known):
        import grpc
        pb, peek = self.pb, self.peek
        call = self.watch_stub(i)(pb.WatchRequest(
            rank=w.rank, known_version=known, job_hash=self.job_hash,
            client_id="loadgen:%d:rank%d" % (os.getpid(), w.rank),
            takes_deltas=w.deltas_flag))
        w.cur = known
        try:
            async for b in call:
                t = time.monotonic()
                m = peek.ListPeek.FromString(b)
                w.arrivals.append((m.version, t, len(b)))
                if m.delta:
                    w.deltas += 1
                    if m.base_version != w.cur:
                        w.breaks += 1
                else:
                    w.wholes += 1
                if w.state is not None:
                    full = pb.WorkerList.FromString(b)
                    if not m.delta:
                        w.state = {}
                    for e in full.workers:
                        w.state[e.worker_id] = e.address
                    for r in full.removed:
                        w.state.pop(r, None)
                if w is not self.ref and w.cur < self.target <= m.version:
                    self.behind -= 1  # one more watcher has the awaited version
                    if self.behind == 0:
                        self.caught_up.set()
                w.cur = m.version
            w.ended = "OK"
        except grpc.aio.AioRpcError as e:
            w.ended = "%s: %s" % (e.code().name, e.details())
        except asyncio.CancelledError:
            call.cancel()
            raise

    async def run(self):
        a = self.a
        async for cmd in read_commands():
            c = cmd["cmd"]
            if c == "join":
                sem = asyncio.Semaphore(a.inflight)
                res = {}
                t0 = time.monotonic()
                await asyncio.gather(*(self.join_one(i, r, sem, res)
                                       for i, r in enumerate(a.my_ranks)))
                ok = {r: v for r, v in res.items() if not isinstance(v, Exception)}
                bad = [v for v in res.values() if isinstance(v, Exception)]
                self.joined = ok
                out({"ev": "joined", "n": len(ok), "failed": len(bad),
                     "first_error": str(bad[0])[:300] if bad else "", "t0": t0,
                     "t_last": max((v[1] for v in ok.values()), default=t0),
                     "bytes": sum(v[2] for v in ok.values()),
                     "entries": max((v[3] for v in ok.values()), default=0)})
            elif c == "watch":
                self.tasks = []
                for i, r in enumerate(a.my_ranks):
                    w = Watcher(r, not a.no_deltas, i < a.full_sample)
                    if w.state is not None:
                        w.state = dict(self.join_lists.get(r, {}))
                    self.watchers.append(w)
                    self.tasks.append(asyncio.ensure_future(
                        self.watch_one(i, w, self.joined[r][0] if r in self.joined else 0)))
                    if i % 100 == 99:
                        await asyncio.sleep(0)
                # the reference: a watch of whole lists (no deltas)
                self.ref = Watcher(a.my_ranks[0], False, True)
                self.tasks.append(asyncio.ensure_future(self.watch_one(0, self.ref, 0)))
                out({"ev": "watching", "n": len(self.watchers) + 1, "cpu": cpu_self()})
            elif c == "expect":
                out(await self.expect(cmd))
            elif c == "quit":
                break
        for t in getattr(self, "tasks", []):
            t.cancel()
        for ch in self.chans:
            await ch.close()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        out({"ev": "bye", "cpu": ru.ru_utime + ru.ru_stime,
             "ended": sum(1 for w in self.watchers if w.ended),
             "ended_how": sorted({w.ended[:120] for w in self.watchers if w.ended})[:3]})

    async def expect(self, cmd):
        """Wait (bounded) until every watcher has the change: the first version
        at which the sampled full-state watchers see worker id present
        (add) or absent (remove); report each watcher's delay from t."""
        wid, add, t, prev = cmd["id"], cmd["op"] == "add", cmd["t"], cmd["after"]
        deadline = time.monotonic() + cmd["timeout"]
        full = [w for w in self.watchers if w.state is not None] + [self.ref]
        version = None
        while time.monotonic() < deadline:
            vs = [w.cur for w in full if (wid in w.state) == add and w.cur > prev]
            if len(vs) == len(full):
                version = min(vs)
                break
            await asyncio.sleep(0.005)
        if version is None:
            return {"ev": "expect", "version": None, "missing": len(self.watchers)}
        self.caught_up.clear()
        self.behind = sum(1 for w in self.watchers if w.cur < version)
        self.target = version
        if self.behind:
            try:
                await asyncio.wait_for(self.caught_up.wait(),
                                       max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                pass
        self.target = 1 << 64
        delays, nbytes, missing, msgs = [], 0, 0, 0
        for w in self.watchers:
            got = None
            for v, ta, nb in w.arrivals:
                if prev < v <= version:
                    nbytes += nb
                    msgs += 1
                if v >= version and got is None:
                    got = ta
            if got is None:
                missing += 1
            else:
                delays.append(got - t)
        # the sampled delta-applying watchers hold the same list as the reference
        cmp = [w for w in full[:-1] if w.cur == self.ref.cur]
        same = all(w.state == self.ref.state for w in cmp)
        return {"ev": "expect", "version": version, "delays": delays, "bytes": nbytes,
                "msgs": msgs, "missing": missing, "same_as_whole": same,
                "compared": len(cmp),
                "breaks": sum(w.breaks for w in self.watchers),
                "deltas": sum(w.deltas for w in self.watchers),
                "wholes": sum(w.wholes for w in self.watchers),
                "ended": sum(1 for w in self.watchers if w.ended), "cpu": cpu_self()}


def role_main(a):
    pdir = a.gen_dir
    sys.path.insert(0, pdir)
    import stoker_pb2 as pb
    import loadgen_peek_pb2 as peek
    async def run():  # channels made inside the loop that runs them
        if a.role == "sessions":
            await Sessions(a, pb).run()
        else:
            a.my_ranks = list(range(a.first_rank, a.first_rank + a.count))
            await Ranks(a, pb, peek).run()

    asyncio.run(run())
    return 0


# ---- the orchestrator ---------------------------------------------------------
class Child:
    def __init__(self, name, argv, log):
        self.name = name
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(log, "wb"), start_new_session=True,
                                  text=True, bufsize=1)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            try:
                self.q.put(json.loads(line))
            except ValueError:
                pass
        self.q.put(None)

    def send(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def get(self, timeout):
        try:
            m = self.q.get(timeout=max(0.1, timeout))
        except queue.Empty:
            raise RuntimeError("%s: no answer within %.0f s" % (self.name, timeout))
        if m is None:
            raise RuntimeError("%s exited (%s)" % (self.name, self.p.poll()))
        return m

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait()


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        f = f.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICKS


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def is_numeric(host):
    import ipaddress
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def orchestrate(a):
    t_begin = time.monotonic()
    deadline = t_begin + a.budget_s
    bd = os.path.abspath(a.bin_dir)
    coord_bin = os.path.join(bd, "server", "stoker-coordinator")
    if not os.access(coord_bin, os.X_OK):
        print("loadgen.py: %s not found: build first" % coord_bin, file=sys.stderr)
        return 2
    if not shutil.which("protoc"):
        print("SKIP: protoc is not installed (apt-get install protobuf-compiler)")
        return 77
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = tempfile.mkdtemp(prefix="stoker-loadgen.")
    gen_protos(a.proto_dir, tmp)
    helptext = subprocess.run([coord_bin, "--help"], capture_output=True, text=True).stdout

    def default_of(opt):
        m = re.search(r"--%s .*?default: (\d+)" % opt, helptext)
        return int(m.group(1)) if m else None

    samples = a.ranks * 4 * 2
    with open(os.path.join(tmp, "job.conf"), "w") as f:
        f.write("name = loadgen\nsource = synthetic\nnum_samples = %d\nheight = 8\n"
                "width = 8\nbatch_size = 4\nworld_size = %d\nepochs = 1\n"
                % (samples, a.ranks))
    nprocs = max(1, a.procs)
    calls_needed = a.ranks + nprocs + a.workers + a.changes + 64
    per_conn = -(-(a.ranks + nprocs) // a.conns) + 16  # watches on one connection
    set_opts = []
    if not a.default_limits:
        mc, ms = default_of("max-calls"), default_of("max-streams-per-conn")
        if mc is not None and mc < calls_needed:
            set_opts += ["--max-calls", str(calls_needed)]
        if ms is not None and ms < max(per_conn, -(-(a.workers + a.changes) // a.conns) + 16):
            set_opts += ["--max-streams-per-conn",
                         str(max(per_conn, -(-(a.workers + a.changes) // a.conns) + 16))]
    set_opts += ["--watch-lease-s", "3600", "--idle-timeout-s", str(a.budget_s + 60)]
    set_opts += a.coord_opt
    pf = os.path.join(tmp, "coord.port")
    clog = os.path.join(tmp, "coordinator.log")
    argv = [coord_bin, "--listen", "127.0.0.1:0", "--port-file", pf, "--job",
            os.path.join(tmp, "job.conf"), "--stats-interval-s", "1"] + set_opts
    print("# coordinator %s" % " ".join(argv[1:]), flush=True)
    children = []
    coord = subprocess.Popen(argv, stdout=open(clog, "wb"), stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    res = {"ranks": a.ranks, "workers": a.workers, "deltas_asked": not a.no_deltas,
           "options_set": " ".join("%s %s" % (set_opts[i], set_opts[i + 1])
                                   for i in range(0, len(set_opts) - 1, 2)
                                   if set_opts[i].startswith("--max")) or "none"}
    fails = []
    rss_max = [0.0]

    def clog_text():
        with open(clog, errors="replace") as f:
            return f.read()

    def stats_field(name):
        m = re.findall(r" stats state=\w+ .*?\b%s=(\d+)" % name, clog_text())
        return int(m[-1]) if m else None

    def wait_for(cond, timeout, what):
        end = min(deadline, time.monotonic() + timeout)
        while time.monotonic() < end:
            if coord.poll() is not None:
                raise RuntimeError("the coordinator exited %s while %s" % (coord.poll(), what))
            rss_max[0] = max(rss_max[0], rss_mb(coord.pid))
            if cond():
                return True
            time.sleep(0.1)
        raise RuntimeError("timed out while %s" % what)

    try:
        wait_for(lambda: os.path.exists(pf) and open(pf).read().strip(), 30,
                 "waiting for the port file")
        target = "127.0.0.1:%s" % open(pf).read().strip()
        me = [sys.executable, os.path.abspath(__file__), "--gen-dir", tmp, "--target", target,
              "--conns", str(a.conns), "--workers", str(a.workers), "--samples", str(samples),
              "--world", str(a.ranks), "--inflight", str(a.inflight),
              "--host", a.worker_host]
        if a.no_deltas:
            me.append("--no-deltas")
        cpu0 = cpu_s(coord.pid)
        t = time.monotonic()
        sess = Child("sessions", me + ["--role", "sessions"], os.path.join(tmp, "sessions.log"))
        children.append(sess)
        r = sess.get(deadline - time.monotonic())
        res["register_s"] = time.monotonic() - t
        res["burst_s"] = r["s"]
        res["refusals"] = ", ".join("%s %d" % kv for kv in sorted(r["refusals"].items())) \
            or "none"
        res["max_tries"] = r["max_tries"]
        if r["first_refusal"]:
            res["refusals"] += " (first: %s)" % r["first_refusal"][:160]
        if r["failed"]:
            fails.append("%d worker sessions failed: %s" % (r["failed"], r["first_error"]))
        if r["refusals"] and is_numeric(a.worker_host):
            # a numeric address needs no lookup: nothing may refuse the burst
            fails.append("a burst of %d workers with numeric addresses was refused %d "
                         "times: %s" % (a.workers, sum(r["refusals"].values()),
                                        r["first_refusal"]))
        wait_for(lambda: clog_text().count(" registered at ") >= a.workers, 120,
                 "waiting for every worker on the list")
        res["register_cpu_s"] = cpu_s(coord.pid) - cpu0
        per = -(-a.ranks // nprocs)
        rk = []
        for i in range(nprocs):
            first, count = i * per, min(per, a.ranks - i * per)
            if count <= 0:
                break
            rk.append(Child("ranks%d" % i, me + ["--role", "ranks", "--first-rank", str(first),
                                                "--count", str(count), "--full-sample",
                                                str(a.full_sample)],
                            os.path.join(tmp, "ranks%d.log" % i)))
        children.extend(rk)
        # joins
        cpu0 = cpu_s(coord.pid)
        for c in rk:
            c.send(cmd="join")
        js = [c.get(deadline - time.monotonic()) for c in rk]
        res["joins_admitted"] = sum(j["n"] for j in js)
        res["join_failed"] = sum(j["failed"] for j in js)
        if res["join_failed"]:
            fails.append("%d joins failed: %s" % (res["join_failed"],
                                                  [j["first_error"] for j in js if
                                                   j["failed"]][0]))
        res["join_s"] = max(j["t_last"] for j in js) - min(j["t0"] for j in js)
        res["join_cpu_s"] = cpu_s(coord.pid) - cpu0
        res["join_bytes_per_join"] = sum(j["bytes"] for j in js) / max(1, res["joins_admitted"])
        res["join_entries"] = max(j["entries"] for j in js)
        res["rss_after_joins_mb"] = rss_mb(coord.pid)
        # watches
        cpu0, t = cpu_s(coord.pid), time.monotonic()
        for c in rk:
            c.send(cmd="watch")
        ws = [c.get(deadline - time.monotonic()) for c in rk]
        nwatch = sum(w["n"] for w in ws)
        lg_cpu = sum(w["cpu"] for w in ws)  # the watchers' processes, to date
        seen = {"n": -1, "since": time.monotonic()}

        def all_watching():
            n = stats_field("watchers")
            if n is None:  # a coordinator whose stats line does not say: settle 5 s
                res["watch_note"] = "watch starts not observed (no watchers= logged)"
                return time.monotonic() - t > 5
            if n != seen["n"]:
                seen["n"], seen["since"] = n, time.monotonic()
            elif time.monotonic() - seen["since"] > a.stuck_s:
                raise RuntimeError("only %d of %d watches started (no progress for %.0f s: "
                                   "a serve limit?)" % (n, nwatch, a.stuck_s))
            return n >= nwatch

        wait_for(all_watching, 600, "waiting for every watch to start (the coordinator's "
                 "watchers=)")
        res["watch_s"] = time.monotonic() - t
        res["watch_cpu_s"] = cpu_s(coord.pid) - cpu0
        time.sleep(2)
        res["rss_mb"] = rss_mb(coord.pid)
        # idle rate: heartbeats and ticks only
        c0, t0 = cpu_s(coord.pid), time.monotonic()
        time.sleep(a.idle_s)
        idle = (cpu_s(coord.pid) - c0) / (time.monotonic() - t0)
        res["idle_cpu_pct"] = 100 * idle
        version = 0
        events = {"join": [], "leave": []}
        wid, seen_add = None, False  # the extra worker: added, then removed
        for k in range(a.changes):
            for op in ("add", "remove"):
                c0, t0 = cpu_s(coord.pid), time.monotonic()
                if op == "add":
                    sess.send(cmd="add")
                else:
                    sess.send(cmd="remove", id=wid)
                ev = sess.get(deadline - time.monotonic())
                if ev.get("error"):
                    raise RuntimeError("extra worker: %s" % ev["error"])
                wid = ev["id"]
                if op == "remove" and not seen_add:
                    # its arrival was never seen: its absence says nothing
                    fails.append("remove %s: not measured (its join never reached the "
                                 "watchers)" % wid)
                    events["leave"].append(None)
                    time.sleep(1)
                    continue
                for c in rk:
                    c.send(cmd="expect", op=op, id=wid, t=ev["t"], after=version,
                           timeout=min(60, deadline - time.monotonic()))
                rs = [c.get(deadline - time.monotonic() + 5) for c in rk]
                t1 = time.monotonic()
                time.sleep(0.3)  # whatever the change still costs after the last arrival
                cpu = cpu_s(coord.pid) - c0 - idle * (time.monotonic() - t0)
                rss_max[0] = max(rss_max[0], rss_mb(coord.pid))
                seen_add = op == "add" and all(r["version"] is not None for r in rs)
                if any(r["version"] is None for r in rs):
                    fails.append("%s %s: the sampled watchers never saw it" % (op, wid))
                    events["join" if op == "add" else "leave"].append(None)
                    continue
                version = max(r["version"] for r in rs)
                d = [x for r in rs for x in r["delays"]]
                cpu_now = sum(r["cpu"] for r in rs)
                e = {"delays": d, "bytes": sum(r["bytes"] for r in rs),
                     "lg_cpu": cpu_now - lg_cpu,
                     "msgs": sum(r["msgs"] for r in rs),
                     "missing": sum(r["missing"] for r in rs), "cpu": cpu,
                     "window": t1 - t0,
                     "same": all(r["same_as_whole"] for r in rs),
                     "compared": sum(r["compared"] for r in rs),
                     "breaks": sum(r["breaks"] for r in rs),
                     "deltas": sum(r["deltas"] for r in rs),
                     "wholes": sum(r["wholes"] for r in rs),
                     "ended": sum(r["ended"] for r in rs)}
                lg_cpu = cpu_now
                events["join" if op == "add" else "leave"].append(e)
                if d and min(d) < 0:
                    fails.append("%s %s: %d watchers had it before it was made (the "
                                 "measurement is confused)" % (op, wid,
                                                               sum(1 for x in d if x < 0)))
                if e["missing"]:
                    fails.append("%s %s: %d watchers never got it" % (op, wid, e["missing"]))
                if e["breaks"]:
                    fails.append("%d deltas did not chain (base_version)" % e["breaks"])
                if not e["same"]:
                    fails.append("a delta-applied list differs from the whole list")
                if not e["compared"]:
                    fails.append("%s %s: no sampled watcher was at the reference's version"
                                 % (op, wid))
                if e["ended"]:
                    fails.append("%d watches ended" % e["ended"])
        res["events"] = events
        res["rss_max_mb"] = max(rss_max[0], rss_mb(coord.pid))
        text = clog_text()
        res["hb_drops"] = sum(1 for ln in text.splitlines()
                              if "heartbeat" in ln and "dropped" in ln)
        res["suspect_lines"] = sum(1 for ln in text.splitlines()
                                   if "suspect" in ln and " WARN" in ln)
        if res["hb_drops"]:
            fails.append("%d workers dropped for heartbeats" % res["hb_drops"])
        for c in children:
            c.send(cmd="quit")
        byes = {}
        for c in children:
            try:
                byes[c.name] = c.get(30)
            except RuntimeError:
                pass
        res["loadgen_cpu_s"] = sum(b.get("cpu", 0) for b in byes.values())
        res["watches_ended"] = sum(b.get("ended", 0) for n, b in byes.items()
                                   if n != "sessions")
        res["watches_ended_how"] = sorted({h for n, b in byes.items() if n != "sessions"
                                           for h in b.get("ended_how", [])})[:3]
        sb = byes.get("sessions", {})
        res["sessions_ended"] = sb.get("ended")
        res["reregistered"] = sb.get("reregistered")
        res["hb_max_gap"] = sb.get("max_gap")
    except RuntimeError as e:
        fails.append(str(e))
    except KeyboardInterrupt:
        fails.append("interrupted")
    finally:
        for c in children:
            c.kill()
        if coord.poll() is None:
            coord.send_signal(signal.SIGTERM)
            try:
                coord.wait(20)
            except subprocess.TimeoutExpired:
                coord.kill()
                coord.wait()
    res["total_s"] = time.monotonic() - t_begin
    report(res, fails, a)
    if fails or a.keep:
        print("# logs kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if fails and a.check else 0


def report(res, fails, a):
    def f(k, fmt="%.2f"):
        return fmt % res[k] if k in res else "-"

    rows = [("ranks x workers", "%d x %d" % (a.ranks, a.workers)),
            ("serve options the test set", res["options_set"]),
            ("workers registered in s", f("register_s")),
            ("registration burst: all %d sessions registered in s" % a.workers, f("burst_s")),
            ("registration burst: refusals seen (retried)", str(res.get("refusals", "-"))),
            ("registration burst: most tries one worker took", str(res.get("max_tries", "-"))),
            ("joins admitted", "%s of %d" % (res.get("joins_admitted", "-"), a.ranks)),
            ("time to admit every join s", f("join_s")),
            ("coordinator CPU for the joins s", f("join_cpu_s")),
            ("Join response bytes (entries)", "%s (%s)" % (f("join_bytes_per_join", "%.0f"),
                                                           res.get("join_entries", "-"))),
            ("every watch started in s", f("watch_s") + (" (%s)" % res["watch_note"]
                                                         if "watch_note" in res else "")),
            ("coordinator CPU for the watches s", f("watch_cpu_s")),
            ("coordinator RSS after joins / watching / max MB",
             "%s / %s / %s" % (f("rss_after_joins_mb", "%.1f"), f("rss_mb", "%.1f"),
                               f("rss_max_mb", "%.1f"))),
            ("coordinator idle CPU (heartbeats) %", f("idle_cpu_pct", "%.1f"))]
    for kind in ("join", "leave"):
        evs = [e for e in res.get("events", {}).get(kind, []) if e]
        if not evs:
            continue
        d = [x for e in evs for x in e["delays"]]
        rows.append(("worker %s: coordinator CPU above idle ms" % kind,
                     ", ".join("%.0f" % (1000 * e["cpu"]) for e in evs)))
        rows.append(("worker %s: bytes to all watchers (messages)" % kind,
                     ", ".join("%d (%d)" % (e["bytes"], e["msgs"]) for e in evs)))
        rows.append(("worker %s: every watcher has it p50/p99/max s" % kind,
                     "%.3f / %.3f / %.3f" % (pctl(d, .5), pctl(d, .99), max(d))))
        rows.append(("worker %s: the watchers' own CPU (Python receive) s" % kind,
                     ", ".join("%.2f" % e["lg_cpu"] for e in evs)))
        rows.append(("worker %s: sent as" % kind,
                     "deltas" if all(e["deltas"] and not e["wholes"] for e in evs)
                     else "whole lists" if all(not e["deltas"] for e in evs) else
                     "both (deltas %d, whole %d)" % (evs[-1]["deltas"], evs[-1]["wholes"])))
    rows += [("watches ended (how)", "%s %s" % (res.get("watches_ended", "-"),
                                                "; ".join(res.get("watches_ended_how", [])))),
             ("workers dropped for heartbeats", str(res.get("hb_drops", "-"))),
             ("sessions ended by the coordinator / registered again",
              "%s / %s" % (res.get("sessions_ended", "-"), res.get("reregistered", "-"))),
             ("longest gap between two heartbeats sent s (the load generator's own)",
              f("hb_max_gap")),
             ("load generator CPU s (Python)", f("loadgen_cpu_s", "%.1f")),
             ("run time s", f("total_s", "%.0f")),
             ("checks", "passed" if not fails else "FAILED: " + "; ".join(fails))]
    if a.markdown:
        print("| figure | value |\n|---|---|")
        for k, v in rows:
            print("| %s | %s |" % (k, v))
    else:
        w = max(len(k) for k, _ in rows)
        for k, v in rows:
            print("%s  %s" % (k.ljust(w), v))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "rel"))
    ap.add_argument("--proto-dir", default=os.path.join(HERE, "..", "..", "proto"))
    ap.add_argument("--ranks", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--conns", type=int, default=4, help="connections per process")
    ap.add_argument("--procs", type=int, default=2, help="processes playing the ranks")
    ap.add_argument("--inflight", type=int, default=512, help="joins in flight per process")
    ap.add_argument("--changes", type=int, default=2, help="worker join+leave pairs")
    ap.add_argument("--deltas", action=argparse.BooleanOptionalAction, default=True,
                    help="watch with takes_deltas (default); --no-deltas: whole lists")
    ap.add_argument("--full-sample", type=int, default=8,
                    help="watchers per process that apply every message to a full list")
    ap.add_argument("--idle-s", type=float, default=3.0, help="idle CPU measurement")
    ap.add_argument("--budget-s", type=int, default=1200)
    ap.add_argument("--stuck-s", type=float, default=15.0,
                    help="give up when the count of started watches stays put this long")
    ap.add_argument("--default-limits", action="store_true",
                    help="do not raise --max-calls / --max-streams-per-conn")
    ap.add_argument("--coord-opt", action="append", default=[],
                    help="extra coordinator option (--coord-opt=--name=value), repeatable")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--worker-host", default="127.0.0.1",
                    help="host the workers advertise (a name such as localhost goes "
                         "through the coordinator's resolver threads and their queue)")
    # internal: the roles this script runs itself as
    ap.add_argument("--role", choices=("sessions", "ranks"), help=argparse.SUPPRESS)
    for k in ("gen-dir", "target", "host"):
        ap.add_argument("--" + k, help=argparse.SUPPRESS)
    for k in ("samples", "world", "first-rank", "count"):
        ap.add_argument("--" + k, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.no_deltas = not a.deltas
    a.coord_opt = [x for o in a.coord_opt for x in o.split("=", 1)]
    if a.role:
        return role_main(a)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        import grpc  # noqa: F401
        import grpc.aio  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        print("SKIP: %s (apt-get install python3-grpcio python3-protobuf)" % e)
        return 77
    if a.ranks < 1 or a.workers < 1:
        ap.error("--ranks and --workers must be positive")
    return orchestrate(a)


if __name__ == "__main__":
    sys.exit(main())
