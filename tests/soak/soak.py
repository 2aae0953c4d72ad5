#!/usr/bin/python3
"""soak.py - the soak run (not part of CI's default run): a whole job on
127.0.0.1 for --minutes (default 10) with faults injected at random, then
two checks of the whole run.

Processes: one stoker-coordinator, --workers stoker-workers (default 3) over
a generated JPEG dataset (tar shards), two stoker-soak-rank clients (ranks 0
and 1 of 2). Faults, from a seeded random schedule (--seed, printed):
  - a worker other than w0 killed with SIGKILL every --kill-every-s seconds
    on average (w0 is never killed, so one worker lives the whole run and
    its RSS says something), restarted 0.5..8 s later;
  - --client-crashes times (default 1 per 5 minutes, at least 1) a random
    rank killed with SIGKILL mid-epoch and restarted from its state file
    (stk_client_save_state after every batch).
When the time is up, the ranks are told to stop at the end of the epoch
after the current one (a worker still down stays down); every process
that was not killed on purpose must then exit 0.

Checks:
  stream  each rank's digest file (one line per delivered batch, written by
          the rank after comparing the batch byte for byte with the
          reference built in-process) must show every address of every
          epoch 0..E exactly in order, all equal to the reference; a resumed
          rank must start at its last saved address (at most one batch
          before its last logged one: it may die between logging and
          saving), and a batch delivered twice across a crash must have the
          same digest both times.
  rss     VmRSS of every process, sampled every --sample-s: the value after
          warm-up (max of the samples in the 5 s after --warmup-s) against
          the value at the end (max of its last 5 s before the stop), for
          each process that lived at least --min-span-s after warm-up (the
          value in the middle is printed too, not judged):
          end <= start * 1.2 + 8 MiB (see README.md for why).

--profile long (the multi-day check, README.md "Long profile"): 2 workers
with 2 builder threads over photo-sized JPEGs (375..500 px), pipeline train
at 224x224, batch 32, one float32 rank and one uint8 rank at full rate (no
step), 120 minutes, a worker other than w0 killed every ~300 s
(--kills off: none), no client crash. Its ranks compare nothing
in-process: every --verify-every'th batch's digest is compared with its
reference after the run, by a separate process (stoker-soak-rank
--check-digests), so the ranks' heaps hold only what a training rank's
does. Every --metrics-every-s (60) it
samples each process: RSS and anonymous RSS, threads (/proc/PID/status),
fds (/proc/PID/fd) and glibc's heap in use and held (the daemons' /metrics stoker_heap_bytes,
the ranks' own "heap" lines); at the end it prints them as a table, writes
metrics.tsv and soak.svg (one panel per metric, one line per process) into
the kept run directory, and judges each process that lived past the
warm-up (--warmup-s, 600): its RSS after the warm-up never exceeds its
value at the warm-up (the largest sample within --ref-window-s, 60 s, of
it: the periodic malloc_trim makes RSS a saw-tooth) by more than 2 % or
2 MiB, whichever is larger.

Every process runs in its own session with PR_SET_PDEATHSIG, and is killed
and reaped when the script ends, however it ends. Every wait is bounded.

Usage: soak.py [--bin-dir build/rel] [--minutes 10] [--seed N] [--keep]
       soak.py --profile long [--minutes 120] [--kills on|off]
Exit 0 passed, 1 failed, 2 usage or setup error.
"""
import argparse
import atexit
import ctypes
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import daemon_heap, metrics_port, wait_port  # noqa: E402

MIB = 1024 * 1024
RSS_FACTOR, RSS_SLACK_MIB = 1.2, 8
LONG_FRAC, LONG_SLACK_MIB = 0.02, 2  # long profile: RSS after warm-up

# What each profile sets for the options left unset on the command line.
PROFILES = {
    "short": dict(minutes=10.0, workers=3, kill_every_s=20.0, samples=1024, batch=16,
                  step_ms=10, size=40, min_side=40, max_side=160, builders=1,
                  chunk_bytes=16384, verify_every=1, sample_s=0.5, metrics_every_s=0.0,
                  converts=("none", "none"), verify_after=False),
    "long": dict(minutes=120.0, workers=2, kill_every_s=300.0, samples=512, batch=32,
                 step_ms=0, size=224, min_side=375, max_side=500, builders=2,
                 chunk_bytes=0, verify_every=16, sample_s=1.0, metrics_every_s=60.0,
                 converts=("float32", "none"), client_crashes=0, warmup_s=600.0,
                 verify_after=True),
}
METRICS = (("rss", "RSS (MiB)"), ("anon", "anonymous RSS (MiB)"), ("heap_use", "heap in use (MiB)"),
           ("heap_held", "heap held (MiB)"), ("fds", "open fds"), ("threads", "threads"))

T0 = time.monotonic()


def log(msg):
    print("[%7.1f s] %s" % (time.monotonic() - T0, msg), flush=True)


_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _child_setup():
    # die with the soak script even if it is killed with -9
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        os._exit(1)


class Proc:
    """One process instance: its Popen, log, and VmRSS samples."""

    def __init__(self, name, argv, logpath, killable=False, env=None):
        self.name, self.argv, self.log = name, argv, logpath
        self.slot = name.split(".")[0]  # w1.3 -> w1: the line it is drawn on
        self.metrics_port = None
        self.killable = killable  # SIGKILLed on purpose: -9 is its expected end
        self.killed = False
        self.samples = []  # (monotonic, bytes)
        self.started = time.monotonic()
        self.ended = None
        self.code = None
        with open(logpath, "ab") as out:
            self.p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True,
                                      preexec_fn=_child_setup,
                                      env=dict(os.environ, **env) if env else None)
        self.pid = self.p.pid

    def alive(self):
        return self.poll() is None

    def poll(self):
        if self.code is None:
            c = self.p.poll()
            if c is not None:
                self.code, self.ended = c, time.monotonic()
        return self.code

    def sample(self):
        if not self.alive():
            return
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        self.samples.append((time.monotonic(), int(line.split()[1]) * 1024))
                        return
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass

    def proc_counts(self):
        """(threads, fds, RssAnon bytes) from /proc, or Nones once gone.
        RssAnon leaves out file pages (the dataset, libraries): the heap,
        stacks and anonymous maps, where a leak shows."""
        try:
            threads = anon = None
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("Threads:"):
                        threads = int(line.split()[1])
                    elif line.startswith("RssAnon:"):
                        anon = int(line.split()[1]) * 1024
            return threads, len(os.listdir("/proc/%d/fd" % self.pid)), anon
        except (OSError, ValueError):
            return None, None, None

    def heap(self):
        """(in use, held) bytes of glibc's heap, or (None, None): a daemon's
        /metrics stoker_heap_bytes, a rank's last 'heap' line."""
        if self.slot.startswith("rank"):
            for ln in reversed(self.tail(4000).splitlines()):
                f = ln.split()
                if len(f) == 4 and f[0] == "heap":
                    return int(f[2]), int(f[2]) + int(f[3])
            return None, None
        if self.metrics_port is None:
            self.metrics_port = metrics_port(self.tail(1 << 16))
            if self.metrics_port is None:
                return None, None
        return daemon_heap(self.metrics_port)

    def kill(self, timeout=10):
        """SIGKILL the process group and reap; the exit code (or None)."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def wait(self, timeout):
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def tail(self, n=2000):
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log) - n))
                return f.read().decode(errors="replace")
        except OSError as e:
            return "(no log: %s)" % e


ALL = []  # every Proc ever started


def reap_all():
    for p in ALL:
        if p.poll() is None:
            p.kill(timeout=5)


def _on_signal(signum, frame):
    reap_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.tmp = tempfile.mkdtemp(prefix="stoker-soak.")
        self.fails = []
        self.bins = {
            "coordinator": os.path.join(a.bin_dir, "server", "stoker-coordinator"),
            "worker": os.path.join(a.bin_dir, "server", "stoker-worker"),
            "dataset": os.path.join(a.bin_dir, "tools", "stoker-dataset"),
            "rank": os.path.join(a.bin_dir, "tests", "soak", "stoker-soak-rank"),
        }
        self.workers = {}  # slot -> current Proc
        self.worker_gen = {}
        self.ranks = {}  # rank -> current Proc
        self.rank_gen = {}
        self.dead_until = {}  # worker slot -> restart time
        self.events = {"worker_kills": 0, "worker_restarts": 0, "client_crashes": 0}
        self.table = []  # (t s, Proc, {metric: value or None}) every metrics_every_s

    def fail(self, what):
        log("FAIL " + what)
        self.fails.append(what)

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    # ---- setup ---------------------------------------------------------------
    def setup(self):
        for k, b in self.bins.items():
            if not os.access(b, os.X_OK):
                raise SystemExit("soak.py: %s not found: build first (%s)" % (k, b))
        root = self.path("data")
        r = subprocess.run([self.bins["dataset"], "gen", "--out", root, "--count",
                            str(self.a.samples), "--seed", str(self.a.seed % 1000),
                            "--layout", "tar", "--per-shard", "256", "--min-side",
                            str(self.a.min_side), "--max-side", str(self.a.max_side)],
                           capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            raise SystemExit("soak.py: stoker-dataset gen failed: %s" % r.stderr)
        self.root = root
        with open(self.path("job.conf"), "w") as f:
            f.write("name = soak\nsource = tar\ndataset = shards\nnum_samples = 0\n"
                    "pipeline = train\nheight = %d\nwidth = %d\nbatch_size = %d\n"
                    "world_size = 2\nepochs = 1000000\nseed = %d\n"
                    % (self.a.size, self.a.size, self.a.batch, self.a.seed))
        self.stop_file = self.path("stop")

    def start_coordinator(self):
        pf = self.path("coordinator.port")
        argv = [self.bins["coordinator"], "--listen", "127.0.0.1:0", "--port-file", pf,
                "--job", self.path("job.conf"), "--stats-interval-s", "10",
                "--idle-timeout-s", "300"] + self.metrics_argv()
        self.coord = Proc("coordinator", argv, self.path("coordinator.log"))
        ALL.append(self.coord)
        self.port = wait_port(pf, self.coord, timeout=30, or_none=True)
        if not self.port:
            raise RuntimeError("coordinator did not start:\n" + self.coord.tail())
        log("coordinator pid %d on port %d" % (self.coord.pid, self.port))

    def metrics_argv(self):
        return ["--metrics-listen", "127.0.0.1:0"] if self.a.metrics_every_s > 0 else []

    def start_worker(self, slot):
        g = self.worker_gen.get(slot, -1) + 1
        self.worker_gen[slot] = g
        name = "w%d.%d" % (slot, g)
        pf = self.path(name + ".port")
        argv = [self.bins["worker"], "--coordinator", "127.0.0.1:%d" % self.port,
                "--listen", "127.0.0.1:0", "--port-file", pf, "--data-root", self.root,
                "--threads", str(self.a.builders), "--stats-interval-s", "10"]
        if self.a.chunk_bytes:
            argv += ["--chunk-bytes", str(self.a.chunk_bytes)]
        argv += self.metrics_argv()
        p = Proc(name, argv, self.path(name + ".log"), killable=slot != 0)
        ALL.append(p)
        self.workers[slot] = p
        if not wait_port(pf, p, timeout=30, or_none=True):
            raise RuntimeError("worker %s did not start:\n%s" % (name, p.tail()))
        log("worker %s pid %d" % (name, p.pid))

    def start_rank(self, r):
        g = self.rank_gen.get(r, -1) + 1
        self.rank_gen[r] = g
        name = "rank%d.%d" % (r, g)
        argv = [self.bins["rank"], "--coordinator", "127.0.0.1:%d" % self.port, "--rank",
                str(r), "--world-size", "2", "--state-file", self.path("rank%d.state" % r),
                "--digest-file", self.path("rank%d.digest" % r), "--stop-file",
                self.stop_file, "--data-root", self.root, "--step-ms", str(self.a.step_ms),
                "--prefetch", "6", "--convert", self.a.converts[r], "--verify-every",
                str(0 if self.a.verify_after else self.a.verify_every)]
        if self.a.metrics_every_s > 0:
            argv += ["--heap-every-s", str(min(10.0, self.a.metrics_every_s))]
        p = Proc(name, argv, self.path(name + ".log"), killable=True,
                 env=dict(kv.split("=", 1) for kv in self.a.rank_env))
        ALL.append(p)
        self.ranks[r] = p
        log("%s pid %d" % (name, p.pid))

    # ---- digest files ----------------------------------------------------------
    def digest_lines(self, r):
        try:
            with open(self.path("rank%d.digest" % r)) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def progress(self, r):
        """(lines, epoch of the last delivered batch or -1)."""
        lines = self.digest_lines(r)
        for ln in reversed(lines):
            if ln.startswith("b "):
                return len(lines), int(ln.split()[1])
        return len(lines), -1

    # ---- the run -------------------------------------------------------------
    def sample_all(self):
        for p in ALL:
            p.sample()

    def sample_metrics(self, t):
        """One row per live process into self.table (t: seconds into the run)."""
        for p in [self.coord] + list(self.workers.values()) + list(self.ranks.values()):
            if not p.alive() or not p.samples:
                continue
            threads, fds, anon = p.proc_counts()
            use, held = p.heap()
            self.table.append((t, p, {"rss": p.samples[-1][1], "anon": anon, "heap_use": use,
                                      "heap_held": held, "fds": fds, "threads": threads}))

    def check_unexpected_exits(self):
        for p in list(self.workers.values()) + list(self.ranks.values()) + [self.coord]:
            if p.poll() is not None and not p.killed:
                self.fail("%s (pid %d) exited by itself with %d mid-run; log tail:\n%s"
                          % (p.name, p.pid, p.code, p.tail()))
                return True
        return False

    def kill_worker(self):
        alive = [s for s, p in self.workers.items() if s != 0 and p.alive()]
        if not alive:
            return
        slot = self.rng.choice(alive)
        p = self.workers[slot]
        p.killed = True
        code = p.kill()
        self.events["worker_kills"] += 1
        delay = self.rng.uniform(0.5, 8.0)
        self.dead_until[slot] = time.monotonic() + delay
        log("killed worker %s (pid %d, exit %s); restart in %.1f s"
            % (p.name, p.pid, code, delay))
        if code != -signal.SIGKILL:
            self.fail("%s: exit %s after SIGKILL" % (p.name, code))

    def crash_rank(self):
        r = self.rng.randrange(2)
        p = self.ranks[r]
        n0, _ = self.progress(r)
        # only a rank that has delivered since it started (so it saved a state)
        lines = self.digest_lines(r)
        starts = [i for i, ln in enumerate(lines) if ln.startswith("start ")]
        if not starts or not any(ln.startswith("b ") for ln in lines[starts[-1]:]):
            return False
        p.killed = True
        code = p.kill()
        self.events["client_crashes"] += 1
        lines = self.digest_lines(r)
        last = next((ln for ln in reversed(lines) if ln.startswith("b ")), "?")
        log("crashed %s (pid %d, exit %s) after '%s'; restarting from its state file"
            % (p.name, p.pid, code, last))
        if code != -signal.SIGKILL:
            self.fail("%s: exit %s after SIGKILL" % (p.name, code))
        self.start_rank(r)
        return True

    def run(self):
        a = self.a
        dur = a.minutes * 60
        self.setup()
        self.start_coordinator()
        for s in range(a.workers):
            self.start_worker(s)
        for r in range(2):
            self.start_rank(r)
        t_start = time.monotonic()
        deadline = t_start + dur
        self.warm_at = t_start + a.warmup_s
        next_kill = t_start + a.warmup_s / 2 + self.rng.uniform(0.5, 1.5) * a.kill_every_s
        crashes = sorted(t_start + self.rng.uniform(0.25, 0.75) * dur
                         for _ in range(a.client_crashes))
        last_lines, last_progress = -1, time.monotonic()
        next_report = t_start + 30
        self.t_start = t_start
        next_metrics = t_start + (a.metrics_every_s if a.metrics_every_s > 0 else 1e18)
        while time.monotonic() < deadline:
            time.sleep(a.sample_s)
            now = time.monotonic()
            self.sample_all()
            if self.check_unexpected_exits():
                return
            for slot, when in list(self.dead_until.items()):
                if now >= when:
                    del self.dead_until[slot]
                    self.start_worker(slot)
                    self.events["worker_restarts"] += 1
            if now >= next_metrics:
                next_metrics += a.metrics_every_s
                self.sample_metrics(now - t_start)
            if a.kills == "on" and now >= next_kill:
                self.kill_worker()
                next_kill = now + self.rng.uniform(0.5, 1.5) * a.kill_every_s
            if crashes and now >= crashes[0]:
                if self.crash_rank():
                    crashes.pop(0)
            prog = [self.progress(r) for r in range(2)]
            total = sum(n for n, _ in prog)
            if total != last_lines:
                last_lines, last_progress = total, now
            elif now - last_progress > a.stall_s:
                self.fail("no batch delivered for %d s (ranks at epochs %s)"
                          % (a.stall_s, [e for _, e in prog]))
                return
            if now >= next_report:
                next_report = now + 30
                log("progress: ranks at epochs %s, %d digest lines; %s"
                    % ([e for _, e in prog], total, self.events))
        self.stop_phase()

    def stop_phase(self):
        a = self.a
        self.end_at = time.monotonic()  # RSS "end" window closes here
        # a worker still down stays down: one started now could come up as
        # the job ends, and its exit code would then say nothing
        self.dead_until.clear()
        stop_epoch = max(self.progress(r)[1] for r in range(2)) + 1
        with open(self.stop_file + ".tmp", "w") as f:
            f.write("%d\n" % stop_epoch)
        os.rename(self.stop_file + ".tmp", self.stop_file)
        self.stop_epoch = stop_epoch
        log("time is up: ranks stop after epoch %d" % stop_epoch)
        end = time.monotonic() + a.end_timeout_s
        for r, p in self.ranks.items():
            while p.alive() and time.monotonic() < end:
                self.sample_all()
                p.wait(timeout=a.sample_s)
            if p.alive():
                self.fail("%s did not stop within %d s" % (p.name, a.end_timeout_s))
            elif p.code != 0:
                self.fail("%s exit %d; log tail:\n%s" % (p.name, p.code, p.tail()))
        for p in [self.coord] + [w for w in self.workers.values() if not w.killed]:
            code = p.wait(timeout=max(1, end - time.monotonic()) + 30)
            if code != 0:
                self.fail("%s exit %s at the end of the job; log tail:\n%s"
                          % (p.name, code, p.tail()))
        log("every process exited; %s" % self.events)

    # ---- the checks ------------------------------------------------------------
    def check_stream(self, r):
        lines = self.digest_lines(r)
        seen = {}  # seq -> digest
        pos, spe, starts, dups, stop = None, None, 0, 0, None
        last_b = None  # seq of the last 'b' line
        for i, ln in enumerate(lines):
            f = ln.split()
            where = "rank %d digest line %d '%s'" % (r, i + 1, ln)
            if not f:
                return self.fail(where + ": empty")
            if f[0] == "start":
                e, s, n = int(f[1]), int(f[2]), int(f[3])
                if spe is not None and n != spe:
                    return self.fail(where + ": steps/epoch changed")
                spe = n
                seq = e * spe + s
                if starts == 0 and seq != 0:
                    return self.fail(where + ": first start is not at 0 0")
                if starts > 0:
                    nxt = (last_b + 1) if last_b is not None else 0
                    if seq not in (nxt, nxt - 1):
                        return self.fail(where + ": resumed at %d, last delivered %s"
                                         % (seq, last_b))
                starts += 1
                pos = seq
            elif f[0] == "b":
                e, s, d, ok = int(f[1]), int(f[2]), f[3], f[4]
                seq = e * spe + s
                if pos is None or seq != pos:
                    return self.fail(where + ": out of order (expected %s)" % pos)
                if ok not in ("ok", "-"):  # "-": not compared (--verify-every)
                    return self.fail(where + ": differs from the reference")
                if seq in seen:
                    if seen[seq] != d:
                        return self.fail(where + ": delivered again with another digest")
                    dups += 1
                seen[seq] = d
                last_b, pos = seq, seq + 1
            elif f[0] == "e":
                if pos is None or pos % spe or pos // spe - 1 != int(f[1]):
                    return self.fail(where + ": epoch end at the wrong place")
            elif f[0] == "stop":
                stop = int(f[1])
            else:
                return self.fail(where + ": unknown line")
        if stop is None:
            return self.fail("rank %d never stopped" % r)
        if stop != self.stop_epoch:
            self.fail("rank %d stopped after epoch %d, not %d" % (r, stop, self.stop_epoch))
        want = (stop + 1) * spe
        if len(seen) != want or min(seen) != 0 or max(seen) != want - 1:
            return self.fail("rank %d: %d distinct batches, want %d" % (r, len(seen), want))
        log("stream rank %d: epochs 0..%d, %d steps/epoch, %d batches in order, %s; %d "
            "start(s), %d batch(es) delivered again after a crash (same digest)"
            % (r, stop, spe, want, "every %dth compared with the reference after the run"
               % self.a.verify_every if self.a.verify_after else
               "every %dth equal to the reference" % self.a.verify_every, starts, dups))

    def check_after(self, r):
        """Long profile: every --verify-every'th batch line of rank r's digest
        file compared with its reference, built after the run by a separate
        process (stoker-soak-rank --check-digests), so that the rank whose
        memory is judged does only what a training rank does."""
        argv = [self.bins["rank"], "--check-digests", self.path("rank%d.digest" % r), "--job",
                self.path("job.conf"), "--rank", str(r), "--world-size", "2", "--data-root",
                self.root, "--verify-every", str(self.a.verify_every)]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        except subprocess.TimeoutExpired:
            return self.fail("rank %d: the check after the run took over an hour" % r)
        out = (p.stdout + p.stderr).strip()
        log(out.splitlines()[-1] if out else "rank %d: the check printed nothing" % r)
        if p.returncode != 0:
            self.fail("rank %d: batches differ from the reference (exit %d):\n%s"
                      % (r, p.returncode, out[-2000:]))

    def check_rss_long(self):
        """Long profile: each process that lived --min-span-s past its warm-up
        must keep its RSS within 2 % or 2 MiB (the larger) of its value at
        the warm-up: the largest sample within --ref-window-s of it, since
        the periodic malloc_trim makes RSS a saw-tooth (its peaks are the
        level to compare; a trough is not)."""
        a = self.a
        log("RSS (MiB) after the warm-up of %.0f s: bound max <= at-warm-up (max within %.0f s "
            "of it) + max(%.0f %%, %d MiB)" % (a.warmup_s, a.ref_window_s, LONG_FRAC * 100,
                                              LONG_SLACK_MIB))
        print("  %-12s %7s %8s %9s %8s %8s %9s %7s  %s" % (
            "process", "pid", "lived s", "at warm", "max", "end", "MiB/h", "exit", "verdict"))
        for p in ALL:
            t0 = max(p.started, self.t_start) + a.warmup_s
            t1 = min(p.ended or self.end_at, self.end_at)
            lived = (p.ended or time.monotonic()) - p.started
            ref = [v for t, v in p.samples if abs(t - t0) <= a.ref_window_s]
            after = [(t, v) for t, v in p.samples if t0 <= t <= t1]
            if t1 - t0 < a.min_span_s or not ref or len(after) < 2:
                print("  %-12s %7d %8.0f %9s %8s %8s %9s %7s  not judged (%.0f s after "
                      "warm-up)" % (p.name, p.pid, lived, "-", "-", "-", "-", p.code,
                                    max(0, t1 - t0)))
                continue
            r = max(ref)
            top = max(v for _, v in after)
            bound = r + max(LONG_FRAC * r, LONG_SLACK_MIB * MIB)
            n = len(after)  # least-squares slope: growth that goes on
            mt = sum(t for t, _ in after) / n
            mv = sum(v for _, v in after) / n
            var = sum((t - mt) ** 2 for t, _ in after)
            slope = sum((t - mt) * (v - mv) for t, v in after) / var if var else 0.0
            okk = top <= bound
            if not okk:
                self.fail("RSS of %s grew from %.2f to %.2f MiB after the warm-up (bound "
                          "%.2f)" % (p.name, r / MIB, top / MIB, bound / MIB))
            print("  %-12s %7d %8.0f %9.2f %8.2f %8.2f %9.3f %7s  %s" % (
                p.name, p.pid, lived, r / MIB, top / MIB, after[-1][1] / MIB,
                slope * 3600 / MIB, p.code, "flat" if okk else "GREW"), flush=True)

    def report_metrics(self):
        """The per-process table on stdout, metrics.tsv and soak.svg in the run
        directory."""
        if not self.table:
            return
        def fmt(k, v):
            if v is None:
                return "-"
            return "%.2f" % (v / MIB) if k in ("rss", "anon", "heap_use", "heap_held") else str(v)
        head = ["t_s", "process", "pid"] + [k for k, _ in METRICS]
        print("  " + "%7s %-12s %7s %9s %9s %9s %9s %5s %7s" % tuple(head))
        with open(self.path("metrics.tsv"), "w") as f:
            f.write("\t".join(head) + "\n")
            for t, p, m in self.table:
                row = ["%.0f" % t, p.name, str(p.pid)] + [fmt(k, m[k]) for k, _ in METRICS]
                print("  " + "%7s %-12s %7s %9s %9s %9s %9s %5s %7s" % tuple(row))
                f.write("\t".join(row) + "\n")
        with open(self.path("soak.svg"), "w") as f:
            f.write(svg_plot(self.table, self.a.warmup_s, "stoker soak, seed %d, %s"
                             % (self.a.seed, time.strftime("%Y-%m-%d %H:%M UTC",
                                                           time.gmtime()))))
        log("metrics: %s, plot: %s" % (self.path("metrics.tsv"), self.path("soak.svg")))

    def check_rss(self):
        a = self.a
        log("RSS (MiB): start = max over [warm-up, +5 s], end = max over the last 5 s "
            "before the stop; bound end <= start * %.1f + %d MiB" % (RSS_FACTOR, RSS_SLACK_MIB))
        print("  %-12s %7s %8s %8s %8s %8s %7s  %s" % ("process", "pid", "lived s", "start",
                                                        "middle", "end", "exit", "verdict"))
        for p in ALL:
            t0 = max(p.started + a.warmup_s, self.warm_at)
            t1 = min(p.ended or self.end_at, self.end_at)
            lived = (p.ended or time.monotonic()) - p.started
            first = [v for t, v in p.samples if t0 <= t <= t0 + 5]
            last = [v for t, v in p.samples if t1 - 5 <= t <= t1]
            tm = (t0 + t1) / 2  # the middle says whether growth goes on or settled
            mid = [v for t, v in p.samples if tm - 2.5 <= t <= tm + 2.5]
            m = "%.1f" % (max(mid) / MIB) if mid else "-"
            if t1 - t0 < a.min_span_s or not first or not last:
                verdict, s, e = "not judged (%.0f s after warm-up)" % max(0, t1 - t0), "-", "-"
                m = "-"
            else:
                start, end = max(first), max(last)
                okk = end <= start * RSS_FACTOR + RSS_SLACK_MIB * MIB
                verdict = "flat" if okk else "GREW"
                s, e = "%.1f" % (start / MIB), "%.1f" % (end / MIB)
                if not okk:
                    self.fail("RSS of %s grew from %.1f to %.1f MiB" % (p.name, start / MIB,
                                                                        end / MIB))
            print("  %-12s %7d %8.0f %8s %8s %8s %7s  %s" % (p.name, p.pid, lived, s, m, e,
                                                              p.code, verdict), flush=True)


COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#17becf", "#7f7f7f", "#bcbd22")


def svg_plot(table, warmup_s, title):
    """An SVG (text) of the metrics table: one panel per metric (x: minutes,
    y: its range over the run), one colour per process slot (w1 over its
    restarts), one polyline per process instance; a dashed line at the
    warm-up. Standard library only."""
    slots = sorted({p.slot for _, p, _ in table}, key=lambda s: (s[0] != "c", s))
    color = {s: COLORS[i % len(COLORS)] for i, s in enumerate(slots)}
    W, H, L, R, T = 960, 190, 70, 110, 30
    tmax = max(t for t, _, _ in table) or 1.0
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (W, T + len(METRICS) * (H + 20)),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14">%s</text>' % (L, title)]
    for i, (key, label) in enumerate(METRICS):
        y0 = T + i * (H + 20)
        pw, ph = W - L - R, H - 30
        vals = [m[key] for _, _, m in table if m[key] is not None]
        lo, hi = (min(vals), max(vals)) if vals else (0, 1)
        scale = MIB if key in ("rss", "anon", "heap_use", "heap_held") else 1
        pad = max((hi - lo) * 0.05, scale * 0.5)
        lo, hi = lo - pad, hi + pad
        X = lambda t: L + pw * t / tmax  # noqa: E731
        Y = lambda v: y0 + 10 + ph * (1 - (v - lo) / (hi - lo))  # noqa: E731
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>'
                   % (L, y0 + 10, pw, ph))
        out.append('<text x="%d" y="%d">%s</text>' % (L, y0 + 6, label))
        for v in (lo, (lo + hi) / 2, hi):
            out.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>'
                       % (L - 4, Y(v) + 4, v / scale))
        for k in range(5):
            t = tmax * k / 4
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%.0f min</text>'
                       % (X(t), y0 + ph + 24, t / 60))
        if warmup_s < tmax:
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888" '
                       'stroke-dasharray="4,3"/>' % (X(warmup_s), y0 + 10, X(warmup_s),
                                                     y0 + 10 + ph))
        lines = {}
        for t, p, m in table:
            if m[key] is not None:
                lines.setdefault(p, []).append((t, m[key]))
        for p, pts in lines.items():
            pts_s = " ".join("%.1f,%.1f" % (X(t), Y(v)) for t, v in pts)
            if len(pts) == 1:
                out.append('<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>'
                           % (X(pts[0][0]), Y(pts[0][1]), color[p.slot]))
            else:
                out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" '
                           'points="%s"/>' % (color[p.slot], pts_s))
        for j, s in enumerate(slots):
            out.append('<text x="%d" y="%d" fill="%s">%s</text>'
                       % (W - R + 8, y0 + 24 + 14 * j, color[s], s))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin-dir", default=os.path.join(here, "..", "..", "build", "rel"))
    ap.add_argument("--profile", choices=sorted(PROFILES), default="short",
                    help="short: the fault soak (the defaults below); long: the "
                         "multi-day check (photo-sized images, full rate, metrics "
                         "table and plot, a 2 %% / 2 MiB RSS bound)")
    ap.add_argument("--minutes", type=float, default=None, help="short 10, long 120")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None, help="short 3, long 2")
    ap.add_argument("--kills", choices=("on", "off"), default="on",
                    help="kill workers other than w0 at random")
    ap.add_argument("--kill-every-s", type=float, default=None, help="short 20, long 300")
    ap.add_argument("--client-crashes", type=int, default=None,
                    help="short: 1 per 5 minutes (at least 1), long: 0")
    ap.add_argument("--samples", type=int, default=None, help="dataset size (1024, 512)")
    ap.add_argument("--batch", type=int, default=None, help="batch size per rank (16, 32)")
    ap.add_argument("--step-ms", type=int, default=None,
                    help="simulated training step (10, long 0)")
    ap.add_argument("--verify-every", type=int, default=None,
                    help="compare every Nth batch with the reference (1, long 16)")
    ap.add_argument("--sample-s", type=float, default=None,
                    help="RSS sampling period (0.5, long 1)")
    ap.add_argument("--metrics-every-s", type=float, default=None,
                    help="metrics table period (short off, long 60)")
    ap.add_argument("--warmup-s", type=float, default=None,
                    help="short: 30 s, or 10%% of the run if longer; long: 600 s")
    ap.add_argument("--ref-window-s", type=float, default=60.0,
                    help="long profile: the RSS at warm-up is the largest sample within "
                         "this many seconds of it")
    ap.add_argument("--min-span-s", type=float, default=None,
                    help="judge the RSS of a process that lived this long after warm-up "
                         "(default: a quarter of the run, at least 20 s)")
    ap.add_argument("--stall-s", type=float, default=90.0,
                    help="fail when no batch arrives for this long")
    ap.add_argument("--end-timeout-s", type=int, default=300)
    ap.add_argument("--rank-env", action="append", default=[], metavar="NAME=VALUE",
                    help="set in the ranks' environment only (repeatable), e.g. "
                         "MALLOC_ARENA_MAX=4 or STOKER_MALLOC_TUNING=0 to compare "
                         "allocator settings")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    for k, v in PROFILES[a.profile].items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    if a.minutes <= 0 or a.minutes > 24 * 60 or not 2 <= a.workers <= 16:
        ap.error("--minutes in (0, 1440], --workers in 2..16")
    if any("=" not in kv for kv in a.rank_env):
        ap.error("--rank-env takes NAME=VALUE")
    if a.seed is None:
        a.seed = random.randrange(1, 1 << 30)
    if a.client_crashes is None:
        a.client_crashes = max(1, round(a.minutes / 5))
    if a.warmup_s is None:
        a.warmup_s = max(30.0, a.minutes * 6)
    if a.min_span_s is None:
        a.min_span_s = max(20.0, a.minutes * 15 if a.profile == "short"
                           else (a.minutes * 60 - a.warmup_s) / 4)
    a.bin_dir = os.path.abspath(a.bin_dir)
    atexit.register(reap_all)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _on_signal)

    soak = Soak(a)
    log("soak (%s): %.1f min, seed %d, %d workers x %d builders, 2 ranks (%s), %dx%d, "
        "batch %d, step %d ms, worker kills %s (~%.0f s), %d client crash(es), warm-up "
        "%.0f s, rank env %s, tmp %s" % (a.profile, a.minutes, a.seed, a.workers, a.builders,
                            "/".join(a.converts), a.size, a.size, a.batch, a.step_ms,
                            a.kills, a.kill_every_s, a.client_crashes, a.warmup_s,
                            " ".join(a.rank_env) or "-", soak.tmp))
    try:
        soak.run()
    except RuntimeError as e:
        soak.fail(str(e))
    finally:
        reap_all()
    if hasattr(soak, "stop_epoch"):  # the run got to its stop: check what arrived
        for r in range(2):
            soak.check_stream(r)
            if a.verify_after:
                soak.check_after(r)
    soak.report_metrics()
    if hasattr(soak, "end_at"):
        if a.profile == "long":
            soak.check_rss_long()
        else:
            soak.check_rss()
    for p in ALL:
        if p.name.startswith("rank") and p.code == 0:
            for ln in p.tail().splitlines():
                if ln.startswith("summary"):
                    print("  " + ln)
    if soak.fails or a.keep or a.profile == "long":
        if a.profile == "long":  # the dataset is regenerated from the seed
            shutil.rmtree(soak.path("data"), ignore_errors=True)
        print("soak.py: logs kept in %s" % soak.tmp)
    else:
        shutil.rmtree(soak.tmp, ignore_errors=True)
    print("soak.py: %s (seed %d)" % ("FAILED: %d failure(s)" % len(soak.fails)
                                     if soak.fails else "passed", a.seed))
    return 1 if soak.fails else 0


if __name__ == "__main__":
    sys.exit(main())
