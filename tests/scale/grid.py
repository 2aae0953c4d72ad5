#!/usr/bin/python3
"""grid.py - the scale grid with real processes (not part of CI's default
run; tests/scale/README.md): for each N x M, one stoker-coordinator, M
single-thread stoker-workers and N stoker-train-loop ranks on 127.0.0.1,
a synthetic job of 8x8 images in batches of 4 and a simulated step of
max(100, N) ms (none for an input-bound case, which runs --input-steps),
every rank started at once.
One table row per case:

  joined / first / wall  seconds from the start of the ranks until every
                rank had joined (its open returned, from its "first batch"
                line; else the coordinator's log), had its first
                batch (the ranks' "first batch" line; '-' when this
                stoker-train-loop does not print it) and had exited
  coord MB      the coordinator's largest RSS
  worker MB, fds, streams
                each worker's largest RSS, descriptors and open streams
                (its stats lines), as median / max over the workers
  rank MB, threads, fds
                each rank's largest RSS, thread and descriptor count,
                median / max over the ranks
  drops         coordinator log lines dropping a worker for heartbeats
                (and, where the coordinator has them, lines making one
                suspect)
  reissued      requests re-issued, summed over the ranks' summary lines
  exits         every process's exit code ("all 0", else the counts)
  built         workers that built at least one batch / M (their exit
                line, else their last stats line)
  verified      sampled ranks that ran with --verify (every batch byte for
                byte equal to the reference built in-process) and exited 0;
                every rank checks order and count (stoker-train-loop exits
                non-zero otherwise), so all exits 0 = exactly once, in order
  notes         how long the ranks took to spawn and to pass the gate,
                ranks whose Finish failed, duplicates the clients dropped
                (hedged or re-issued requests answered twice), processes
                still running at the end (killed)

RSS, threads and descriptors are sampled from /proc every --sample-s. Every
wait is bounded; a case that runs past --budget-s is killed and its row
says so, and so are daemons still up --end-wait-s after the last rank
(a coordinator that missed some rank's Finish waits for its idle
timeout); every process is killed and reaped when a case ends, however it
ends (each runs in its own session with PR_SET_PDEATHSIG).

Usage: grid.py [--bin-dir build/rel] [--grid 16x2,64x8,2x300:input]
               [--steps 32] [--markdown] [--keep] [--check]
Grid entries are NxM (ranks x workers), NxM:input for no step. --check
exits 1 unless every case passes (all exits 0, every worker built,
every sampled rank verified, every rank joined) - for the CI case; the
figures themselves are never judged.
Exit 0 done (with --check: passed), 1 a check failed, 2 usage/setup error.
"""
import argparse
import ctypes
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

DEFAULT_GRID = "16x2,64x32,256x8,256x32,512x8,512x32,2x300:input"
MIB = 1024 * 1024

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
SETPRIV = shutil.which("setpriv")  # util-linux: --pdeathsig without a preexec_fn
# A rank waits at the gate (a FIFO) until every rank is started: one line
# read (dash's read takes one byte at a time from a pipe), then exec.
GATE_SH = 'read _ < "$0"; exec "$@"'


def _child_setup():
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the script
    if os.getppid() == 1:
        os._exit(1)


def popen(argv, out, env=None):
    """Start argv in a session of its own, killed if this script dies
    (PR_SET_PDEATHSIG: through setpriv, which keeps Popen's fast vfork
    path; a preexec_fn costs ~50 ms a process on a busy machine)."""
    if SETPRIV:
        return subprocess.Popen([SETPRIV, "--pdeathsig", "KILL"] + argv, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_child_setup, env=env)


def say(msg):
    print("[grid %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


class Proc:
    """A process of a case: Popen, log path, and the largest RSS, threads,
    descriptors seen in /proc."""

    def __init__(self, kind, name, argv, log, env=None):
        self.kind, self.name, self.log = kind, name, log
        self.rss = self.threads = self.fds = 0
        self.started = time.monotonic()
        with open(log, "wb") as out:
            self.p = popen(argv, out, env)
        self.pid = self.p.pid
        self.code = None
        self.ended = None

    def poll(self):
        if self.code is None:
            c = self.p.poll()
            if c is not None:
                self.code, self.ended = c, time.monotonic()
        return self.code

    def sample(self):
        if self.code is not None:
            return
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        self.rss = max(self.rss, int(line.split()[1]) * 1024)
                    elif line.startswith("Threads:"):
                        self.threads = max(self.threads, int(line.split()[1]))
            self.fds = max(self.fds, len(os.listdir("/proc/%d/fd" % self.pid)))
        except (OSError, ValueError):
            pass

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.poll()

    def text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def med_max(vals, fmt="%.0f"):
    if not vals:
        return "-"
    return (fmt + " / " + fmt) % (statistics.median(vals), max(vals))


def log_time(line):
    """The UTC time of a daemon log line (2026-01-02T03:04:05.678Z ...) as
    a Unix time, or None."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ", line)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=timezone.utc).timestamp()


class Case:
    def __init__(self, a, n, m, input_bound, tmp):
        self.a, self.n, self.m, self.input_bound = a, n, m, input_bound
        self.step_ms = 0 if input_bound else max(100, n)
        self.steps = a.input_steps if input_bound else a.steps
        self.dir = os.path.join(tmp, "%dx%d%s" % (n, m, "-input" if input_bound else ""))
        os.makedirs(self.dir)
        self.procs = []
        self.row = {"case": "%d x %d%s" % (n, m, " input-bound" if input_bound else "")}
        self.notes = []
        self.failed = []
        self.stop_sampler = threading.Event()

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def bin(self, name):
        return self.a.bins[name]

    def spawn(self, kind, name, argv, env=None):
        p = Proc(kind, name, argv, self.path(name + ".log"), env)
        self.procs.append(p)
        return p

    def sampler(self):
        while True:
            for p in list(self.procs):
                p.sample()
            if self.stop_sampler.wait(self.a.sample_s):
                return

    def wait_port(self, p, pf, deadline):
        while time.monotonic() < deadline:
            try:
                with open(pf) as f:
                    s = f.read().strip()
                if s:
                    return int(s)
            except FileNotFoundError:
                pass
            if p.poll() is not None:
                raise RuntimeError("%s exited %s before listening:\n%s"
                                   % (p.name, p.code, p.text()[-1500:]))
            time.sleep(0.02)
        raise RuntimeError("%s: no port file within its budget" % p.name)

    def run(self):
        a, n, m = self.a, self.n, self.m
        t_case = time.monotonic()
        deadline = t_case + a.budget_s
        samples = n * 4 * self.steps  # batch_size 4: every rank gets self.steps steps
        with open(self.path("job.conf"), "w") as f:
            f.write("name = grid\nsource = synthetic\nnum_samples = %d\nheight = 8\n"
                    "width = 8\nbatch_size = 4\nworld_size = %d\nepochs = 1\nseed = 7\n"
                    "synthetic_cost_us = %d\n" % (samples, n, a.cost_us))
        cpf = self.path("coord.port")
        coord = self.spawn("coordinator", "coordinator",
                           [self.bin("coordinator"), "--listen", "127.0.0.1:0",
                            "--port-file", cpf, "--job", self.path("job.conf"),
                            "--stats-interval-s", "1", "--idle-timeout-s",
                            str(max(60, a.budget_s))] + a.coord_opt)
        self.coord = coord
        port = self.wait_port(coord, cpf, deadline)
        sampler = threading.Thread(target=self.sampler, daemon=True)
        sampler.start()
        workers = []
        for i in range(m):
            workers.append(self.spawn(
                "worker", "w%d" % i,
                [self.bin("worker"), "--coordinator", "127.0.0.1:%d" % port, "--listen",
                 "127.0.0.1:0", "--port-file", self.path("w%d.port" % i), "--threads", "1",
                 "--stats-interval-s", "1"] + a.worker_opt))
        for i, w in enumerate(workers):
            self.wait_port(w, self.path("w%d.port" % i), deadline)
        # every worker on the coordinator's list before the ranks start
        while coord.text().count(" registered at ") < m:
            if time.monotonic() > deadline or coord.poll() is not None:
                raise RuntimeError("only %d of %d workers registered"
                                   % (coord.text().count(" registered at "), m))
            time.sleep(0.05)
        verify = set(self.sample_ranks())
        ranks = []
        gate = self.path("gate")
        os.mkfifo(gate)
        ts = time.monotonic()
        for r in range(n):
            argv = [self.bin("train-loop"), "--coordinator", "127.0.0.1:%d" % port, "--rank",
                    str(r), "--world-size", str(n), "--step-ms", str(self.step_ms)]
            if a.prefetch:
                argv += ["--prefetch", str(a.prefetch)]
            if r in verify:
                argv.append("--verify")
            ranks.append(self.spawn("rank", "rank%d" % r, ["/bin/sh", "-c", GATE_SH, gate]
                                    + argv + a.rank_opt, env=a.rank_env))
        t_spawn = time.monotonic() - ts
        # open the gate: one line per rank, held open until every rank has
        # exec'd (a shell that opens the FIFO late still finds its line)
        wall0, t0 = time.time(), time.monotonic()
        gfd = os.open(gate, os.O_RDWR)
        try:
            os.write(gfd, b"\n" * n)
            exe = os.path.realpath(self.bin("train-loop"))
            while time.monotonic() < deadline:
                waiting = 0
                for r in ranks:
                    try:
                        waiting += r.code is None and os.readlink(
                            "/proc/%d/exe" % r.pid) != exe
                    except OSError:
                        pass
                if not waiting:
                    break
                time.sleep(0.05)  # light: the ranks are joining meanwhile
        finally:
            os.close(gfd)
        self.notes.append("ranks spawned in %.1f s, released at once (all exec'd %.2f s "
                          "after the gate opened)" % (t_spawn, time.monotonic() - t0))
        killed = False
        while any(r.poll() is None for r in ranks):
            if time.monotonic() > deadline:
                killed = True
                break
            time.sleep(0.1)
        t_end = time.monotonic()
        if not killed:  # every rank finished: the daemons end by themselves
            end_by = min(deadline, t_end + self.a.end_wait_s)
            for p in [coord] + workers:
                while p.poll() is None and time.monotonic() < end_by:
                    time.sleep(0.1)
            if coord.poll() is None:
                fin = re.findall(r" ranks_finished=(\d+) ", coord.text())
                self.notes.append("the coordinator had not ended %.0f s after the last rank "
                                  "(%s/%d ranks finished)" % (self.a.end_wait_s,
                                                             fin[-1] if fin else "?", n))
        self.stop_sampler.set()
        sampler.join()
        alive = [p.name for p in self.procs if p.poll() is None]
        for p in self.procs:
            p.kill()
        self.collect(coord, workers, ranks, verify, wall0, t0, t_end, killed, alive)

    def sample_ranks(self):
        n, k = self.n, min(self.a.verify_ranks, self.n)
        if k <= 0:
            return []
        return sorted({round(i * (n - 1) / max(1, k - 1)) for i in range(k)})

    def collect(self, coord, workers, ranks, verify, wall0, t0, t_end, killed, alive):
        n, m, row = self.n, self.m, self.row
        ctext = coord.text()
        # joins: the coordinator's "rank R joined" lines (log time, UTC)
        joins = {}
        for line in ctext.splitlines():
            mm = re.search(r" rank (\d+) (?:joined|rejoined) ", line)
            if mm and int(mm.group(1)) not in joins:
                t = log_time(line)
                if t is not None:
                    joins[int(mm.group(1))] = t - wall0
        first, opened = {}, {}
        summary = {}
        for i, r in enumerate(ranks):
            text = r.text()
            mm = re.search(r"first batch ([\d.]+) s after open began \(open took ([\d.]+) s; "
                           r"monotonic ([\d.]+)\)", text)
            if mm:
                after, took, mono = (float(x) for x in mm.groups())
                first[i] = mono - t0
                opened[i] = mono - after + took - t0  # when its open (the join) returned
            mm = re.search(r"summary rank \d+: batches (\d+).*reissued (\d+)\s+duplicates "
                           r"(\d+).*verify_failures (\d+).*order_failures (\d+)", text)
            if mm:
                summary[i] = [int(x) for x in mm.groups()]
        # joined: when the last rank's open returned (its own line), else the
        # coordinator's last "rank R joined" line
        if len(opened) == n:
            joins = opened
        row["joined"] = "%.2f" % max(joins.values()) if len(joins) == n else \
            "%d/%d" % (len(joins), n)
        row["first"] = "%.2f" % max(first.values()) if len(first) == n else \
            ("-" if not first else "%d/%d" % (len(first), n))
        row["wall"] = ("killed at %.0f" % (t_end - t0)) if killed else "%.1f" % (t_end - t0)
        row["coord_mb"] = "%.1f" % (coord.rss / MIB)
        row["worker_mb"] = med_max([w.rss / MIB for w in workers], "%.1f")
        row["worker_fds"] = med_max([w.fds for w in workers])
        streams = []
        built = 0
        for w in workers:
            t = w.text()
            s = [int(x) for x in re.findall(r" stats state=\w+ streams=(\d+)", t)]
            streams.append(max(s) if s else 0)
            # its exit line, else (killed) its last stats line
            b = [int(x) for x in re.findall(r"exiting \(code \d+\): (\d+) batches built", t)]
            b += [int(x) for x in re.findall(r" stats state=\w+ .*? batches_built=(\d+) ", t)]
            built += bool(b and max(b) > 0)
        row["streams"] = med_max(streams)
        row["rank_mb"] = med_max([r.rss / MIB for r in ranks], "%.1f")
        row["rank_thr"] = med_max([r.threads for r in ranks])
        row["rank_fds"] = med_max([r.fds for r in ranks])
        drops = sum(1 for ln in ctext.splitlines()
                    if "heartbeat" in ln and "dropped" in ln)
        suspect = sum(1 for ln in ctext.splitlines() if "suspect" in ln and " WARN" in ln)
        row["drops"] = str(drops) + (" (%d suspect)" % suspect if suspect else "")
        row["reissued"] = str(sum(s[1] for s in summary.values()))
        codes = {}
        for p in self.procs:
            codes.setdefault(p.kind, []).append(p.code)
        bad = []
        for kind, cs in codes.items():
            nz = [c for c in cs if c != 0]
            if nz:
                hist = {}
                for c in nz:
                    hist[c] = hist.get(c, 0) + 1
                bad.append("%s %s" % (kind, ", ".join("%d x %s" % (k, "killed" if c is None
                                                                     or c == -9 else c)
                                                      for c, k in hist.items())))
        row["exits"] = "all 0" if not bad else "; ".join(bad)
        row["built"] = "%d/%d" % (built, m)
        ok_verified = sum(1 for i in verify if ranks[i].code == 0 and i in summary
                          and summary[i][3] == 0 and summary[i][4] == 0
                          and summary[i][0] == self.steps)
        row["verified"] = "%d/%d" % (ok_verified, len(verify))
        fin_fail = sum(1 for r in ranks if "finish: " in r.text())
        if fin_fail:
            self.notes.append("%d ranks' Finish failed" % fin_fail)
        dups = sum(s[2] for s in summary.values())
        if dups:
            self.notes.append("%d duplicates dropped by clients" % dups)
        if alive:
            self.notes.append("still running at the end, killed: %s"
                              % ", ".join(alive[:8]) + (" ..." if len(alive) > 8 else ""))
        row["notes"] = "; ".join(self.notes)
        # the checks --check judges: counts and guarantees, never durations
        if killed:
            self.failed.append("ran past its budget")
        if bad:
            self.failed.append("exit codes: " + row["exits"])
        if built != m:
            self.failed.append("only %d of %d workers built batches" % (built, m))
        if ok_verified != len(verify):
            self.failed.append("verified ranks: %s" % row["verified"])
        if len(joins) != n:
            self.failed.append("joined: %d of %d" % (len(joins), n))
        if len(summary) != n or any(s[0] != self.steps for s in summary.values()):
            self.failed.append("not every rank reported all %d batches" % self.steps)


COLS = [("case", "N x M"), ("joined", "joined s"), ("first", "first batch s"),
        ("wall", "wall s"), ("coord_mb", "coord MB"), ("worker_mb", "worker MB"),
        ("worker_fds", "worker fds"), ("streams", "streams/worker"),
        ("rank_mb", "rank MB"), ("rank_thr", "rank threads"), ("rank_fds", "rank fds"),
        ("drops", "hb drops"),
        ("reissued", "reissued"), ("exits", "exits"), ("built", "workers built"),
        ("verified", "verified")]


def print_table(rows, markdown):
    if markdown:
        print("| " + " | ".join(h for _, h in COLS) + " | notes |")
        print("|" + "---|" * (len(COLS) + 1))
        for r in rows:
            print("| " + " | ".join(r.get(k, "-") for k, _ in COLS) + " | %s |"
                  % r.get("notes", ""))
    else:
        w = [max([len(h)] + [len(r.get(k, "-")) for r in rows]) for k, h in COLS]
        print("  ".join(h.ljust(x) for (_, h), x in zip(COLS, w)))
        for r in rows:
            print("  ".join(r.get(k, "-").ljust(x) for (k, _), x in zip(COLS, w)))
            if r.get("notes"):
                print("    " + r["notes"])
    sys.stdout.flush()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(here, "..", "..", "build", "rel"))
    ap.add_argument("--grid", default=DEFAULT_GRID,
                    help="comma-separated NxM[:input] (default %(default)s)")
    ap.add_argument("--steps", type=int, default=32, help="steps per rank (default 32)")
    ap.add_argument("--input-steps", type=int, default=1200,
                    help="steps per rank of an input-bound case (default 1200)")
    ap.add_argument("--cost-us", type=int, default=0,
                    help="synthetic_cost_us of the job (build time per sample)")
    ap.add_argument("--prefetch", type=int, default=0,
                    help="the ranks' --prefetch (default: stoker-train-loop's)")
    ap.add_argument("--verify-ranks", type=int, default=4,
                    help="ranks (spread over 0..N-1) that compare every batch with the "
                         "reference (default 4)")
    ap.add_argument("--budget-s", type=int, default=600, help="per case (default 600)")
    ap.add_argument("--sample-s", type=float, default=0.5,
                    help="/proc sampling period (default 0.5 s; ~0.1 ms of CPU a process "
                         "each time)")
    ap.add_argument("--end-wait-s", type=float, default=30.0,
                    help="after the last rank, how long the daemons get to exit (the "
                         "coordinator ends once every rank finished)")
    ap.add_argument("--coord-opt", action="append", default=[],
                    help="extra coordinator option, e.g. --coord-opt=--heartbeat-misses=5 "
                         "(repeatable)")
    ap.add_argument("--worker-opt", action="append", default=[],
                    help="extra worker option (repeatable)")
    ap.add_argument("--rank-opt", action="append", default=[],
                    help="extra stoker-train-loop option (repeatable)")
    ap.add_argument("--rank-env", action="append", default=[],
                    help="NAME=VALUE in the ranks' environment, e.g. "
                         "--rank-env STOKER_WORKING_SET=8 (repeatable)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--keep", action="store_true", help="keep the logs")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every case passed its checks")
    a = ap.parse_args()
    cases = []
    for item in a.grid.split(","):
        mm = re.fullmatch(r"\s*(\d+)x(\d+)(:input)?\s*", item)
        if not mm or int(mm.group(1)) < 1 or int(mm.group(2)) < 1:
            ap.error("bad grid entry %r (want NxM or NxM:input)" % item)
        cases.append((int(mm.group(1)), int(mm.group(2)), bool(mm.group(3))))
    a.coord_opt = [x for o in a.coord_opt for x in o.split("=", 1)]
    a.worker_opt = [x for o in a.worker_opt for x in o.split("=", 1)]
    a.rank_opt = [x for o in a.rank_opt for x in o.split("=", 1)]
    env = dict(os.environ)
    for kv in a.rank_env:
        if "=" not in kv:
            ap.error("--rank-env wants NAME=VALUE, not %r" % kv)
        k, v = kv.split("=", 1)
        env[k] = v
    a.rank_env = env if a.rank_env else None
    bd = os.path.abspath(a.bin_dir)
    a.bins = {"coordinator": os.path.join(bd, "server", "stoker-coordinator"),
              "worker": os.path.join(bd, "server", "stoker-worker"),
              "train-loop": os.path.join(bd, "examples", "stoker-train-loop")}
    for k, b in a.bins.items():
        if not os.access(b, os.X_OK):
            print("grid.py: %s not found at %s: build first" % (k, b), file=sys.stderr)
            return 2
    # descriptors: a worker holds one per rank stream, the script one per log
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = max(n * 1 + m for n, m, _ in cases) + 64
    if hard < need:
        say("RLIMIT_NOFILE hard limit %d may be short of ~%d" % (hard, need))
    # what these binaries have (the table is the same either way)
    helps = {k: subprocess.run([b, "--help"], capture_output=True, text=True).stdout
             for k, b in a.bins.items()}
    say("features: coordinator --heartbeat-lapse-s %s; stoker-train-loop first-batch line "
        "%s" % ("yes" if "--heartbeat-lapse-s" in helps["coordinator"] else "no",
                "(seen in the rows: '-' when absent)"))
    tmp = tempfile.mkdtemp(prefix="stoker-grid.")
    say("bin dir %s; logs in %s; %s" % (bd, tmp, ", ".join(
        "%dx%d%s" % (n, m, ":input" if i else "") for n, m, i in cases)))
    rows, failed = [], 0

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        for n, m, inp in cases:
            c = Case(a, n, m, inp, tmp)
            t = time.monotonic()
            try:
                c.run()
            except RuntimeError as e:
                c.failed.append(str(e))
                c.row["notes"] = "setup failed: %s" % str(e).splitlines()[0]
            except KeyboardInterrupt:
                c.failed.append("interrupted")
                c.row["notes"] = "interrupted"
                rows.append(c.row)
                raise
            finally:
                c.stop_sampler.set()
                for p in c.procs:
                    p.kill()
            say("%s done in %.0f s%s" % (c.row["case"], time.monotonic() - t,
                                        (": FAILED " + "; ".join(c.failed)) if c.failed
                                        else ""))
            failed += bool(c.failed)
            rows.append(c.row)
            print_table([c.row], False) if not a.markdown and len(cases) > 1 else None
    except KeyboardInterrupt:
        say("interrupted")
        failed += 1
    print()
    print_table(rows, a.markdown)
    if a.keep or (failed and a.check):
        say("logs kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
