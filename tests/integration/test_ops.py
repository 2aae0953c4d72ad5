"""test_ops.py - the daemons as an operator runs them.

One case per run (argv[1]); ctest runs each as its own test:
  token     the token from --token-file, $STOKER_TOKEN and $STOKER_TOKEN_FILE
            (daemons, stoker CLI, libstoker through stoker-train-loop); it is
            never in /proc/PID/cmdline, `ps` output, the logs or
            --print-config; --token still works, warns, and is overwritten
            in argv
  notify    sd_notify to a real NOTIFY_SOCKET (a unix datagram socket this
            test binds): READY=1 once listening (coordinator) / registered
            (worker), STATUS=, WATCHDOG=1 with $WATCHDOG_USEC, STOPPING=1
  metrics   /metrics of both daemons while two ranks train, validated by
            `promtool check metrics` (and a strict exposition-format parser
            here), then `stoker status --json` parsed: every worker's rate
            and busy fraction, every rank's stall, the verdict; the ranks
            exit without Finish, so the job runs until `stoker finish`
  cgroup    a worker under a cgroup CPU quota of half a core (root only,
            else skipped): `stoker status` shows 0.50 cores
  bad       a generated ImageFolder with corrupt files: the worker log names
            every corrupt file exactly once (dataset-relative path),
            `stoker status --json` counts them by reason with the last
            paths; then --max-bad-fraction fails the job (worker exit 5,
            coordinator exit 4)
  usererr   a python op that raises on some samples (tests/data/pyops):
            by default the job fails at the first exception (coordinator 4,
            worker 5) and both ranks' errors carry its type, message,
            traceback and sample; bad_samples = substitute(100%) completes;
            substitute(3) fails past 3 with the counts and the list

Environment (tests/integration/CMakeLists.txt): STOKER_COORDINATOR_BIN,
STOKER_WORKER_BIN, STOKER_CLI_BIN, STOKER_TRAIN_LOOP_BIN, STOKER_DATASET_BIN.
Every wait is bounded and polls a condition; every process is killed and
reaped in a finally block. Standard library only.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails  # noqa: E402

BIN = {k: os.environ.get(v, "") for k, v in {
    "coord": "STOKER_COORDINATOR_BIN", "worker": "STOKER_WORKER_BIN",
    "cli": "STOKER_CLI_BIN", "loop": "STOKER_TRAIN_LOOP_BIN",
    "dataset": "STOKER_DATASET_BIN"}.items()}
SLOW = 3 if os.environ.get("STOKER_SANITIZED") == "1" else 1


def wait_for(pred, timeout_s, what):
    """Poll pred every 50 ms until it returns a true value (returned) or
    timeout_s * SLOW passes (None, a failure)."""
    end = time.monotonic() + timeout_s * SLOW
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            check(False, "timed out waiting for " + what)
            return None
        time.sleep(0.05)


class Procs:
    """Spawned daemons and tools, each with its stderr+stdout in a log
    file; kill_all() kills and reaps whatever is still running."""

    def __init__(self, tmp):
        self.tmp, self.procs = tmp, {}

    def spawn(self, name, argv, env=None):
        log = open(os.path.join(self.tmp, name + ".log"), "wb")
        e = dict(os.environ)
        for v in ("STOKER_TOKEN", "STOKER_TOKEN_FILE", "NOTIFY_SOCKET", "WATCHDOG_USEC",
                  "WATCHDOG_PID", "STOKER_COORDINATOR", "RANK", "WORLD_SIZE"):
            e.pop(v, None)
        e.update(env or {})
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=e,
                             start_new_session=True)
        log.close()
        self.procs[name] = p
        return p

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait(self, name, timeout_s):
        try:
            return self.procs[name].wait(timeout=timeout_s * SLOW)
        except subprocess.TimeoutExpired:
            check(False, "%s did not exit within %d s" % (name, timeout_s * SLOW))
            return None

    def kill_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            p.wait()

    def dump(self):
        for name in self.procs:
            print("---- %s.log (tail) ----" % name)
            print(self.log(name)[-3000:])


def port_from_file(path, timeout_s=15):
    def get():
        try:
            with open(path) as f:
                t = f.read()
            return int(t) if t.endswith("\n") else None
        except (OSError, ValueError):
            return None
    return wait_for(get, timeout_s, "port file " + path)


def metrics_port(P, name):
    m = wait_for(lambda: re.search(r"metrics on http://\S+ \(port (\d+)\)", P.log(name)),
                 15, name + "'s metrics line")
    return int(m.group(1)) if m else None


def start_coordinator(P, tmp, name, args, env=None):
    pf = os.path.join(tmp, name + ".port")
    P.spawn(name, [BIN["coord"], "--listen", "127.0.0.1:0", "--port-file", pf,
                   "--stats-interval-s", "1"] + args, env)
    return port_from_file(pf)


def start_worker(P, name, cport, args, env=None):
    return P.spawn(name, [BIN["worker"], "--coordinator", "127.0.0.1:%d" % cport,
                          "--listen", "127.0.0.1:0", "--threads", "1",
                          "--stats-interval-s", "1"] + args, env)


def cli(args, env=None, timeout_s=30):
    e = dict(os.environ)
    for v in ("STOKER_TOKEN", "STOKER_TOKEN_FILE"):
        e.pop(v, None)
    e.update(env or {})
    r = subprocess.run([BIN["cli"]] + args, capture_output=True, env=e,
                       timeout=timeout_s * SLOW)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def status_json(cport, env=None):
    rc, out, err = cli(["status", "--coordinator", "127.0.0.1:%d" % cport, "--json"], env)
    if rc != 0:
        return None
    try:
        return json.loads(out)
    except ValueError as e:
        check(False, "stoker status --json is not JSON (%s): %r" % (e, out[:300]))
        return None


def live_workers(cport, n, env=None):
    s = status_json(cport, env)
    return s if s and len(s["workers"]) >= n else None


SYN = ["--set", "num_samples=256", "--set", "height=8", "--set", "width=8",
       "--set", "batch_size=4", "--set", "world_size=1", "--idle-timeout-s", "60"]


# ---- token -----------------------------------------------------------------

def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().decode("utf-8", "replace")


def case_token(P, tmp):
    tok, tok2 = "tk-" + os.urandom(8).hex(), "tv-" + os.urandom(8).hex()
    tf = os.path.join(tmp, "token")
    with open(tf, "w") as f:
        f.write(tok + "\n")
    os.chmod(tf, 0o600)
    # --print-config shows where the token comes from, never the token
    r = subprocess.run([BIN["coord"], "--token", tok2, "--print-config"], capture_output=True)
    out = r.stdout.decode()
    check(r.returncode == 0 and tok2 not in out and "token = (set)" in out,
          "--print-config hides --token: %r" % out[-200:])
    r = subprocess.run([BIN["coord"], "--token", tok2, "--token-file", tf, "--listen",
                        "127.0.0.1:0"] + SYN, capture_output=True, timeout=20 * SLOW)
    check(r.returncode == 2 and b"give the token once" in r.stderr,
          "--token with --token-file is a usage error: %d %r" % (r.returncode, r.stderr[-200:]))
    r = subprocess.run([BIN["coord"], "--token-file", os.path.join(tmp, "nope")] + SYN,
                       capture_output=True, timeout=20 * SLOW)
    check(r.returncode == 2 and b"token file" in r.stderr,
          "a missing --token-file is a usage error: %r" % r.stderr[-200:])

    # coordinator: --token-file; worker: $STOKER_TOKEN; a second coordinator
    # with --token on the command line (still works, warns, scrubbed)
    cport = start_coordinator(P, tmp, "coord", ["--token-file", tf] + SYN)
    if not check(cport, "coordinator with --token-file started"):
        return
    start_worker(P, "worker", cport, [], {"STOKER_TOKEN": tok})
    check(wait_for(lambda: live_workers(cport, 1, {"STOKER_TOKEN": tok}), 20,
                   "the worker (token from $STOKER_TOKEN) registered"),
          "worker registered with the token from the environment")
    cport2 = start_coordinator(P, tmp, "coord_argv", ["--token", tok2] + SYN)
    check(cport2, "coordinator with --token started")
    check("every local user can read it" in P.log("coord_argv"),
          "--token logs a warning that it is visible")
    for name in ("coord", "worker", "coord_argv"):
        cl = cmdline(P.procs[name].pid)
        check(tok not in cl and tok2 not in cl,
              "%s's /proc/PID/cmdline has no token: %r" % (name, cl))
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True).stdout.decode()
    check(tok not in ps and tok2 not in ps, "ps output has no token")

    # the CLI: --token-file, $STOKER_TOKEN, $STOKER_TOKEN_FILE work; none or a
    # wrong one is refused (exit 1, UNAUTHENTICATED)
    target = ["--coordinator", "127.0.0.1:%d" % cport]
    check(cli(["status"] + target + ["--token-file", tf])[0] == 0, "status --token-file")
    check(cli(["status"] + target, {"STOKER_TOKEN": tok})[0] == 0, "status $STOKER_TOKEN")
    check(cli(["status"] + target, {"STOKER_TOKEN_FILE": tf})[0] == 0,
          "status $STOKER_TOKEN_FILE")
    rc, _, err = cli(["status"] + target)
    check(rc == 1 and "status 16" in err, "status without a token is refused: %r" % err)
    rc, _, err = cli(["status"] + target, {"STOKER_TOKEN": "wrong"})
    check(rc == 1 and "status 16" in err, "status with a wrong token is refused: %r" % err)
    check(cli(["status", "--coordinator", "127.0.0.1:%d" % cport2], {"STOKER_TOKEN": tok2})[0]
          == 0, "the --token coordinator still takes its token")

    # libstoker: $STOKER_TOKEN_FILE through stoker-train-loop, which ends the job
    if BIN["loop"]:
        P.spawn("loop", [BIN["loop"], "--coordinator", "127.0.0.1:%d" % cport, "--rank", "0",
                         "--world-size", "1"], {"STOKER_TOKEN_FILE": tf})
        check(P.wait("loop", 60) == 0, "stoker-train-loop with $STOKER_TOKEN_FILE ran the job")
        check(P.wait("coord", 30) == 0, "the coordinator ended the job (exit 0)")
        check(P.wait("worker", 30) == 0, "the worker exited 0")
    for name in P.procs:
        check(tok not in P.log(name) and tok2 not in P.log(name), "%s's log has no token" % name)


# ---- notify ----------------------------------------------------------------

class NotifySocket:
    """A unix datagram socket as systemd's NOTIFY_SOCKET, read all the time
    by a thread as systemd does (a unix datagram queue holds only about 10
    messages: unread, it would block the daemon's sd_notify)."""

    def __init__(self, path):
        self.path = path
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(path)
        self.s.settimeout(0.1)
        self.msgs, self.mu, self.stop = [], threading.Lock(), False
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        while not self.stop:
            try:
                m = self.s.recv(4096).decode("utf-8", "replace")
            except socket.timeout:
                continue
            except OSError:
                return
            with self.mu:
                self.msgs.append(m)

    def has(self, prefix, count=1):
        with self.mu:
            n = sum(1 for m in self.msgs for line in m.split("\n") if line.startswith(prefix))
        return n >= count

    def close(self):
        self.stop = True
        self.t.join()
        self.s.close()


def case_notify(P, tmp):
    cs, ws = NotifySocket(os.path.join(tmp, "c.sock")), NotifySocket(os.path.join(tmp, "w.sock"))
    try:
        cport = start_coordinator(P, tmp, "coord", SYN,
                                  {"NOTIFY_SOCKET": cs.path, "WATCHDOG_USEC": "400000"})
        if not check(cport, "coordinator started"):
            return
        check(wait_for(lambda: cs.has("READY=1"), 15, "coordinator READY=1"),
              "coordinator sent READY=1")
        check(wait_for(lambda: cs.has("WATCHDOG=1", 3), 15, "coordinator WATCHDOG=1 x3"),
              "coordinator sends WATCHDOG=1 keep-alives")
        check(wait_for(lambda: cs.has("STATUS="), 15, "coordinator STATUS="),
              "coordinator sends STATUS= lines")
        start_worker(P, "worker", cport, [], {"NOTIFY_SOCKET": ws.path})
        check(wait_for(lambda: ws.has("READY=1"), 20, "worker READY=1"), "worker sent READY=1")
        # READY only after registering: the coordinator lists it by now
        s = status_json(cport)
        check(s and len(s["workers"]) == 1, "the worker was registered when it said READY=1")
        check(wait_for(lambda: ws.has("STATUS=serving"), 15, "worker STATUS=serving"),
              "worker STATUS= with its figures")
        check(not ws.has("WATCHDOG=1"), "no WATCHDOG=1 without $WATCHDOG_USEC")
        P.procs["worker"].send_signal(signal.SIGTERM)
        check(P.wait("worker", 30) == 0, "worker exits 0 on SIGTERM")
        check(ws.has("STOPPING=1"), "worker sent STOPPING=1 on drain")
        P.procs["coord"].send_signal(signal.SIGTERM)
        check(P.wait("coord", 30) == 0, "coordinator exits 0 on SIGTERM")
        check(cs.has("STOPPING=1"), "coordinator sent STOPPING=1")
    finally:
        cs.close()
        ws.close()


# ---- metrics + status --json ------------------------------------------------

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
                    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? '
                    r'(-?[0-9.eE+-]+|NaN|[+-]Inf)$')


def parse_exposition(text, what):
    """A strict reading of the text format: every family has HELP then TYPE
    before its samples, every sample line parses and belongs to the
    family just declared (histograms: _bucket/_sum/_count), no family twice.
    Returns {sample name with labels: value}."""
    out, fam, ftype, seen = {}, None, None, set()
    check(text.endswith("\n"), what + " ends with a newline")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            fam = line.split(" ")[2]
            check(fam not in seen, "%s: family %s once" % (what, fam))
            seen.add(fam)
            ftype = None
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            check(len(parts) == 4 and parts[2] == fam and
                  parts[3] in ("counter", "gauge", "histogram"), "%s: TYPE line %r" % (what, line))
            ftype = parts[3]
            continue
        m = SAMPLE.match(line)
        if not check(m, "%s: sample line parses: %r" % (what, line)):
            continue
        name = m.group(1)
        ok = name == fam or (ftype == "histogram" and name in
                             (fam + "_bucket", fam + "_sum", fam + "_count"))
        check(ok and ftype, "%s: %s belongs to the family declared (%s)" % (what, name, fam))
        out[name + (m.group(2) or "")] = float(m.group(4))
    return out


def scrape(port, path="/metrics"):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", ""
    except OSError:
        return None, "", ""


def promtool_ok(text, what):
    tool = shutil.which("promtool")
    if not tool:
        print("promtool not installed (Debian: prometheus): only the parser here checks " + what)
        return
    r = subprocess.run([tool, "check", "metrics"], input=text.encode(), capture_output=True,
                       timeout=30)
    check(r.returncode == 0, "promtool check metrics %s: %s" % (what, r.stdout.decode() +
                                                                r.stderr.decode()))


def case_metrics(P, tmp):
    job = ["--set", "num_samples=8192", "--set", "height=16", "--set", "width=16",
           "--set", "batch_size=4", "--set", "world_size=2", "--idle-timeout-s", "300",
           "--metrics-listen", "127.0.0.1:0"]
    cport = start_coordinator(P, tmp, "coord", job)
    if not check(cport, "coordinator started"):
        return
    start_worker(P, "worker", cport, ["--metrics-listen", "127.0.0.1:0"])
    cm, wm = metrics_port(P, "coord"), metrics_port(P, "worker")
    if not check(cm and wm, "both daemons log their metrics port"):
        return
    wait_for(lambda: live_workers(cport, 1), 20, "worker registered")
    # The ranks exit without Finish (--no-finish): the job stays running,
    # both ranks known, however long the looking below takes (a sanitizer,
    # a loaded host); the test finishes them at the end (stoker finish).
    for r in (0, 1):
        P.spawn("rank%d" % r, [BIN["loop"], "--coordinator", "127.0.0.1:%d" % cport,
                               "--rank", str(r), "--world-size", "2", "--step-ms", "5",
                               "--no-finish"])

    def figures():
        c, w = scrape(cm), scrape(wm)
        if c[0] != 200 or w[0] != 200:
            return None
        cv, wv = parse_exposition(c[2], "coordinator"), parse_exposition(w[2], "worker")
        ranks = [k for k in cv if k.startswith("stoker_rank_stall_fraction{")]
        if len(ranks) == 2 and wv.get("stoker_worker_batches_built_total", 0) > 0:
            return c, w, cv, wv
        return None
    got = wait_for(figures, 30, "metrics with both ranks and built batches")
    if not got:
        P.dump()
        return
    c, w, cv, wv = got
    check(c[1].startswith("text/plain; version=0.0.4"), "content type %r" % c[1])
    promtool_ok(c[2], "(coordinator)")
    promtool_ok(w[2], "(worker)")
    for name in ("stoker_worker_batches_built_total", "stoker_worker_bytes_sent_total",
                 "stoker_worker_samples_substituted_total", "stoker_worker_build_seconds_count",
                 'stoker_worker_build_seconds_bucket{le="+Inf"}', "stoker_worker_busy_fraction",
                 "stoker_worker_queued_requests", "stoker_worker_open_streams",
                 "stoker_worker_free_buffers", 'stoker_worker_bad_samples_total{reason="truncated"}',
                 "stoker_worker_cpu_cores", "stoker_worker_cpu_seconds_total",
                 "stoker_worker_batches_per_cpu_second"):
        check(name in wv, "worker metric " + name)
    check(wv.get("stoker_worker_build_seconds_count") ==
          wv.get('stoker_worker_build_seconds_bucket{le="+Inf"}'), "histogram count = +Inf bucket")
    for name in ("stoker_coordinator_live_workers", "stoker_coordinator_ranks_joined",
                 "stoker_coordinator_ranks_finished", 'stoker_coordinator_job_state{state="running"}',
                 'stoker_rank_batches_per_second{rank="0"}', 'stoker_rank_stall_fraction{rank="1"}',
                 "stoker_job_workers_needed", "stoker_job_workers_spare",
                 'stoker_rank_step_seconds{rank="0"}',
                 'stoker_rank_receive_cpu_seconds_per_gigabyte{rank="1"}',
                 'stoker_rank_receive_cpu_user_seconds_per_gigabyte{rank="1"}',
                 'stoker_rank_receive_cpu_system_seconds_per_gigabyte{rank="0"}',
                 'stoker_rank_receive_host_cpu_share{rank="0"}',
                 "stoker_job_cores_more", "stoker_job_worker_cores"):
        check(name in cv, "coordinator metric " + name)
    for who, v in (("coordinator", cv), ("worker", wv)):
        for name in ("process_resident_memory_bytes", "process_threads", "process_open_fds",
                     "process_max_fds", "process_cpu_seconds_total",
                     'stoker_heap_bytes{state="in_use"}', 'stoker_heap_bytes{state="free"}'):
            check(name in v, "%s process metric %s" % (who, name))
        check(v.get("process_resident_memory_bytes", 0) > 1 << 20 and
              v.get("process_threads", 0) >= 2 and v.get("process_open_fds", 0) >= 3 and
              # a sanitizer's allocator replaces glibc's: mallinfo2 reads 0
              (SLOW > 1 or v.get('stoker_heap_bytes{state="in_use"}', 0) > 0),
              "%s process figures are real (RSS %s, threads %s, fds %s)" %
              (who, v.get("process_resident_memory_bytes"), v.get("process_threads"),
               v.get("process_open_fds")))
    check(wv.get("stoker_worker_cpu_cores", 0) > 0, "the worker's usable cores on /metrics")
    check(cv.get("stoker_coordinator_live_workers") == 1, "one live worker")
    check(cv.get('stoker_coordinator_job_state{state="running"}') == 1, "state running")
    check(scrape(cm, "/other")[0] == 404, "other paths are 404")

    # both ranks, each with its receiving cost (reported once 1 MB came)
    s = wait_for(lambda: (lambda j: j if j and len(j["ranks"]) == 2 and
                          all(k["recv_cpu_s_per_gb"] > 0 for k in j["ranks"]) else None)(
                     status_json(cport)),
                 30 * SLOW, "status --json with both ranks' receive CPU s/GB")
    if s:
        check(s["state"] == "running" and len(s["workers"]) == 1, "status: running, 1 worker")
        wk = s["workers"][0]
        for k in ("batches_per_s", "busy_fraction", "bad_samples", "bad_recent", "free_buffers",
                  "cpu_seconds", "batches_per_cpu_s"):
            check(k in wk, "status --json worker has " + k)
        check(0 < wk["cpu_cores"] <= os.cpu_count(),
              "status --json: the worker's usable cores %r" % wk.get("cpu_cores"))
        for rk in s["ranks"]:
            check(0 <= rk["stall_fraction"] <= 1 and rk["batches"] >= 0 and
                  rk["step_ms"] >= 0 and rk["recv_cpu_s"] > 0 and rk["recv_cpu_s_per_gb"] > 0,
                  "status --json rank %s figures %r" % (rk.get("rank"), rk))
            # the receiving cost split into user and system, and its share
            # of the cores the rank's process may use
            check(rk["recv_cpu_user_s"] >= 0 and rk["recv_cpu_sys_s"] >= 0 and
                  abs(rk["recv_cpu_user_s"] + rk["recv_cpu_sys_s"] - rk["recv_cpu_s"])
                  <= 1e-5 * rk["recv_cpu_s"] + 1e-6 and  # printed with 6 digits
                  abs(rk["recv_cpu_user_s_per_gb"] + rk["recv_cpu_sys_s_per_gb"] -
                      rk["recv_cpu_s_per_gb"]) <= 1e-5 * rk["recv_cpu_s_per_gb"] + 1e-6 and
                  0 < rk["host_cores"] <= os.cpu_count() and rk["recv_host_share"] >= 0,
                  "status --json rank %s receive split and host share %r" %
                  (rk.get("rank"), rk))
        v = s["verdict"]
        check(v["kind"] in ("input-bound", "compute-bound", "balanced", "unknown") and
              v["workers"] == 1 and
              v["worker_cores"] == min(wk["cpu_cores"], wk["cores"] or wk["cpu_cores"]),
              "status --json verdict %r" % v)
        check(v["text"].startswith(v["kind"]) or
              (v["kind"] == "unknown" and "missing: " in v["text"] and v["missing"]),
              "the verdict text says it: %r" % v["text"])
        check("workers would" not in v["text"], "no unitless worker count: %r" % v["text"])
        rc, out, _ = cli(["status", "--coordinator", "127.0.0.1:%d" % cport])
        check(rc == 0 and "verdict" in out and "STALL" in out and "RECV-CPU" in out,
              "status table: ranks, verdict")
    for r in (0, 1):
        check(P.wait("rank%d" % r, 120 * SLOW) == 0, "rank %d trained to the end" % r)
    rc, out, err = cli(["finish", "--coordinator", "127.0.0.1:%d" % cport, "--ranks", "0,1"])
    check(rc == 0, "stoker finish --ranks 0,1: rc %d %s" % (rc, err[-200:]))
    check(P.wait("coord", 30) == 0 and P.wait("worker", 30) == 0, "daemons exit 0")


# ---- bad samples -------------------------------------------------------------

def make_corrupt_set(tmp):
    """40 generated JPEGs, 6 of them spoiled; returns (root, [relative paths
    under the dataset dir of the spoiled ones])."""
    root = os.path.join(tmp, "data")
    r = subprocess.run([BIN["dataset"], "gen", "--out", root, "--count", "40", "--classes", "2",
                        "--layout", "imagefolder", "--min-side", "40", "--max-side", "90"],
                       capture_output=True, timeout=120 * SLOW)
    if not check(r.returncode == 0, "stoker-dataset gen: %r" % r.stderr[-300:]):
        return None, []
    ds = os.path.join(root, "imagefolder")
    files = sorted(os.path.relpath(os.path.join(d, f), ds)
                   for d, _, fs in os.walk(ds) for f in fs if f.endswith(".jpg"))
    bad = files[1::7][:6]
    for i, rel in enumerate(bad):
        p = os.path.join(ds, rel)
        with open(p, "rb") as f:
            data = f.read()
        with open(p, "wb") as f:
            if i % 3 == 0:
                f.write(data[:len(data) // 3])             # truncated
            elif i % 3 == 1:
                f.write(b"this is not a JPEG at all\n" * 8)  # not a JPEG
            # else: empty
    return root, bad


def case_bad(P, tmp):
    root, bad = make_corrupt_set(tmp)
    if not root:
        return
    job = ["--set", "source=imagefolder", "--set", "dataset=imagefolder", "--set", "pipeline=eval",
           "--set", "height=16",
           "--set", "width=16", "--set", "batch_size=4", "--set", "world_size=2",
           "--idle-timeout-s", "60"]
    cport = start_coordinator(P, tmp, "coord", job)
    if not check(cport, "coordinator started"):
        return
    start_worker(P, "worker", cport, ["--data-root", root])
    wait_for(lambda: live_workers(cport, 1), 20, "worker registered")
    loop = [BIN["loop"], "--coordinator", "127.0.0.1:%d" % cport, "--world-size", "2"]
    P.spawn("rank0", loop + ["--rank", "0"])
    check(P.wait("rank0", 120) == 0, "rank 0 trained through the bad samples")

    def logged():
        return re.findall(r"WARN bad sample (\S+): (.*) \(reason (\w+);", P.log("worker"))

    def status_caught_up():  # the heartbeat after the last log line
        s = status_json(cport)
        if not s or not s["workers"]:
            return None
        n = sum(s["workers"][0]["bad_samples"].values())
        return s if n == len(logged()) else None
    s = wait_for(status_caught_up, 20, "status counting what the log names")
    if s:
        wk = s["workers"][0]
        check(set(wk["bad_samples"]) >= {"truncated", "not_jpeg", "empty"},
              "status --json counts by reason: %r" % wk["bad_samples"])
        check(all(r.split(":")[0] in bad for r in wk["bad_recent"]) and
              len(wk["bad_recent"]) == min(8, len(logged())),
              "status --json last paths are the bad files: %r" % wk["bad_recent"])
        rc, out, _ = cli(["status", "--coordinator", "127.0.0.1:%d" % cport])
        check(rc == 0 and (not logged() or "bad samples" in out), "status table shows bad samples")
    P.spawn("rank1", loop + ["--rank", "1"])
    check(P.wait("rank1", 120) == 0, "rank 1 trained through the bad samples")
    check(P.wait("worker", 30) == 0 and P.wait("coord", 30) == 0, "daemons exit 0")
    names = [m[0] for m in logged()]
    check(sorted(names) == sorted(bad),
          "the worker log names every bad file exactly once:\n  logged %r\n  bad    %r"
          % (sorted(names), sorted(bad)))
    reasons = {m[0]: m[2] for m in logged()}
    for i, rel in enumerate(bad):
        want = ("truncated", "not_jpeg", "empty")[i % 3]
        check(reasons.get(rel) == want, "%s logged as %s (got %s)" % (rel, want, reasons.get(rel)))

    # --max-bad-fraction: 6 of 40 bad (15%) > 5%: the job fails as an abort.
    # The coordinator checks at each heartbeat (1 s): the job (20 epochs of
    # 5 steps of at least 50 ms, the bad files all met in the first) lasts
    # long enough for several.
    cport = start_coordinator(P, tmp, "coord2", job + ["--max-bad-fraction", "0.05",
                                                       "--set", "epochs=20"])
    start_worker(P, "worker2", cport, ["--data-root", root])
    loop = [BIN["loop"], "--coordinator", "127.0.0.1:%d" % cport, "--world-size", "2",
            "--step-ms", "50"]
    P.spawn("rank0b", loop + ["--rank", "0"])
    P.spawn("rank1b", loop + ["--rank", "1"])
    check(P.wait("coord2", 120) == 4, "coordinator exits 4 (job failed: too many bad samples)")
    check(P.wait("worker2", 30) == 5, "worker exits 5 (job aborted)")
    check("too many bad samples" in P.log("coord2"), "the coordinator says why")
    for r in ("rank0b", "rank1b"):
        check(P.wait(r, 60) not in (0, None), "%s fails with the job" % r)


def case_cgroup(P, tmp):
    """A worker under a cgroup CPU quota of half a core registers 0.5
    cores, and a training rank in it reports 0.5 usable cores beside its
    receiving cost (root and a writable cgroup v1 cpu or v2 hierarchy
    only)."""
    if os.geteuid() != 0:
        print("SKIP: not root: cannot make a cgroup with a CPU quota")
        sys.exit(77)
    v1 = "/sys/fs/cgroup/cpu"
    name = "stoker-test-%d" % os.getpid()
    if os.path.isfile(os.path.join(v1, "cpu.cfs_quota_us")):
        cg, files = os.path.join(v1, name), [("cpu.cfs_period_us", "100000"),
                                               ("cpu.cfs_quota_us", "50000")]
    elif os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
        cg, files = os.path.join("/sys/fs/cgroup", name), [("cpu.max", "50000 100000")]
    else:
        print("SKIP: no cgroup v1 cpu or v2 hierarchy at /sys/fs/cgroup")
        sys.exit(77)
    try:
        os.mkdir(cg)
        for f, val in files:
            with open(os.path.join(cg, f), "w") as fh:
                fh.write(val)
    except OSError as e:
        try:
            os.rmdir(cg)
        except OSError:
            pass
        print("SKIP: cannot write a cgroup CPU quota at %s: %s" % (cg, e))
        sys.exit(77)
    try:
        cport = start_coordinator(P, tmp, "coord", ["--set", "num_samples=64",
                                                    "--set", "height=8", "--set", "width=8",
                                                    "--set", "batch_size=4",
                                                    "--set", "epochs=100"])
        if not check(cport, "coordinator started"):
            return
        # the worker enters the cgroup before it execs (its own shell)
        argv = [BIN["worker"], "--coordinator", "127.0.0.1:%d" % cport,
                "--listen", "127.0.0.1:0", "--threads", "1"]
        P.spawn("worker", ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cg]
                + argv)
        s = wait_for(lambda: (lambda j: j if j and len(j["workers"]) == 1 else None)(
            status_json(cport)), 20 * SLOW, "the worker registered")
        if s:
            cores = s["workers"][0]["cpu_cores"]
            check(abs(cores - 0.5) < 1e-9, "a 50000/100000 quota is 0.5 cores: %r" % cores)
            rc, out, _ = cli(["status", "--coordinator", "127.0.0.1:%d" % cport])
            check(rc == 0 and re.search(r"127\.0\.0\.1:\d+\s+0\.50\s", out),
                  "the status table shows 0.50 cores")
            check("0.50 usable cores (cgroup v" in P.log("worker"),
                  "the worker logs its usable cores and where they came from")
        # a rank in the same cgroup: its receive path's host share is of 0.5
        loop = [BIN["loop"], "--coordinator", "127.0.0.1:%d" % cport, "--rank", "0",
                "--world-size", "1", "--step-ms", "20"]
        P.spawn("rank0", ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cg]
                + loop)
        s = wait_for(lambda: (lambda j: j if j and j["ranks"] and
                              j["ranks"][0]["host_cores"] > 0 else None)(status_json(cport)),
                     20 * SLOW, "the rank reported its usable cores")
        if s:
            rk = s["ranks"][0]
            check(abs(rk["host_cores"] - 0.5) < 1e-6 and rk["recv_host_share"] >= 0,
                  "the rank under a 0.5-core quota reports 0.5 usable cores: %r" % rk)
            rc, out, _ = cli(["status", "--coordinator", "127.0.0.1:%d" % cport])
            check(rc == 0 and re.search(r"% of 0\.5\b", out),
                  "the status table shows the rank's host share of 0.5 cores")
    finally:
        P.kill_all()
        for _ in range(50):  # the killed worker leaves the cgroup once reaped
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.1)


PYOPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pyops")


def count_procs(needle):
    """Processes (other than this one) whose command line holds needle."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        n += needle in cmd
    return n


def user_job(P, tmp, tag, root, policy, epochs, step_ms):
    """A job whose chain runs stk_test_ops:raise_some (it raises ValueError
    on the samples whose image sum is even: about half of them) with
    bad_samples = policy (None: the default); one worker (--python-path
    tests/data/pyops), two stoker-train-loop ranks. Returns the exit codes
    (coordinator, worker, rank 0, rank 1)."""
    job = ["--set", "source=imagefolder", "--set", "dataset=imagefolder",
           "--set", "pipeline=resize(16, 16) | python(stk_test_ops:raise_some) | "
           "to(uint8, nhwc)",
           "--set", "batch_size=4", "--set", "world_size=2", "--set", "epochs=%d" % epochs,
           "--idle-timeout-s", "60"]
    if policy:
        job += ["--set", "bad_samples=" + policy]
    cport = start_coordinator(P, tmp, "coord-" + tag, job)
    if not check(cport, tag + ": coordinator started"):
        return None
    start_worker(P, "worker-" + tag, cport, ["--data-root", root, "--python-path", PYOPS])
    loop = [BIN["loop"], "--coordinator", "127.0.0.1:%d" % cport, "--world-size", "2",
            "--step-ms", str(step_ms)]
    for r in (0, 1):
        P.spawn("rank%d-%s" % (r, tag), loop + ["--rank", str(r)])
    codes = [P.wait(n + "-" + tag, 120) for n in ("coord", "worker", "rank0", "rank1")]
    # a runner goes with its worker (PR_SET_PDEATHSIG): none is left
    wait_for(lambda: count_procs("stk_test_ops:raise_some") == 0, 30,
             tag + ": no python runner left")
    return codes


def case_usererr(P, tmp):
    if subprocess.run(["/usr/bin/python3", "-c", "import numpy"],
                      capture_output=True).returncode != 0:
        print("SKIP: /usr/bin/python3 with numpy is needed for python ops")
        sys.exit(77)
    root = os.path.join(tmp, "data")
    r = subprocess.run([BIN["dataset"], "gen", "--out", root, "--count", "40", "--classes", "2",
                        "--layout", "imagefolder", "--min-side", "40", "--max-side", "90"],
                       capture_output=True, timeout=120 * SLOW)
    if not check(r.returncode == 0, "stoker-dataset gen: %r" % r.stderr[-300:]):
        return
    sample = r"(?:class|[\w-]+)\S*\.jpg \(index \d+\)"

    # (a) the default: the first exception fails the job (an abort:
    # coordinator 4, workers 5); each rank's next fails with the
    # exception's type, message and traceback and the sample. The job
    # (200 epochs of 5 steps of at least 20 ms: 20 s or more) outlasts by
    # far the heartbeat (1 s) that carries the first error.
    codes = user_job(P, tmp, "fail", root, None, 200, 20)
    if codes:
        check(codes[0] == 4, "default: coordinator exits 4 (job aborted), got %r" % codes[0])
        check(codes[1] == 5, "default: worker exits 5 (job aborted), got %r" % codes[1])
        for r in (0, 1):
            log = P.log("rank%d-fail" % r)
            check(codes[2 + r] not in (0, None), "default: rank %d fails" % r)
            for want in ("the job failed: a python or plugin op failed on a sample",
                         "python op stk_test_ops:raise_some raised ValueError: unlucky sample",
                         "Traceback (most recent call last)", "in raise_some",
                         'raise ValueError("unlucky sample %d" % v)',
                         "bad_samples = fail is the default"):
                check(want in log, "default: rank %d's error says %r:\n%s" % (r, want, log[-3000:]))
            check(re.search(sample, log), "default: rank %d's error names the sample" % r)
        wlog = P.log("worker-fail")
        check(re.search(r"ERROR bad sample " + sample + r": python op stk_test_ops:raise_some "
                        r"raised ValueError: unlucky sample \d+.*Traceback.*\(reason user_code; "
                        r"the job fails", wlog),
              "default: the worker logs the first error with its traceback, reason user_code")
        check("a python or plugin op failed on a sample" in P.log("coord-fail"),
              "default: the coordinator says why the job failed")

    # (a2) the same in a job shorter than one heartbeat (1 epoch of 5 steps,
    # no step time): the worker never sends a batch on which the op failed,
    # so each rank fails at that step and never finishes; the coordinator
    # aborts the job (4) when the worker's report comes, never a success.
    codes = user_job(P, tmp, "short", root, None, 1, 0)
    if codes:
        check(codes[0] == 4 and codes[1] == 5,
              "short job: coordinator 4, worker 5 (aborted), got %r" % codes[:2])
        for r in (0, 1):
            log = P.log("rank%d-short" % r)
            check(codes[2 + r] not in (0, None), "short job: rank %d fails" % r)
            for want in ("the job failed: a python or plugin op failed on a sample",
                         "python op stk_test_ops:raise_some raised ValueError: unlucky sample",
                         "Traceback (most recent call last)"):
                check(want in log, "short job: rank %d's error says %r:\n%s" % (r, want,
                                                                             log[-3000:]))
            check(re.search(sample, log), "short job: rank %d's error names the sample" % r)
        check("rank 0 finished" not in P.log("coord-short"),
              "short job: no rank finished a job whose op failed")

    # (b) substitute(100%): every raising sample is replaced, the job ends
    # normally; the worker counts them as user_code.
    codes = user_job(P, tmp, "sub", root, "substitute(100%)", 2, 0)
    if codes:
        check(codes == [0, 0, 0, 0], "substitute(100%%): every process exits 0, got %r" % codes)
        n = len(re.findall(r"WARN bad sample " + sample + r": python op stk_test_ops:raise_some "
                           r"raised ValueError: unlucky sample \d+.*\(reason user_code; "
                           r"replaced by the next good sample, bad_samples = substitute\(100%\)\)",
                           P.log("worker-sub")))
        check(n >= 1, "substitute(100%%): the worker logs the replaced samples (%d)" % n)

    # (c) substitute(3): past 3 bad samples (about 20 of the 40 raise) the
    # job fails with the count, the first error and the list.
    codes = user_job(P, tmp, "budget", root, "substitute(3)", 200, 20)
    if codes:
        check(codes[0] == 4 and codes[1] == 5,
              "substitute(3): coordinator 4, worker 5, got %r" % codes[:2])
        for r in (0, 1):
            log = P.log("rank%d-budget" % r)
            check(codes[2 + r] not in (0, None), "substitute(3): rank %d fails" % r)
            m = re.search(r"the job failed: too many bad samples: (\d+) \((\d+) where a python "
                          r"or plugin op failed, 0 corrupt files\), over bad_samples = "
                          r"substitute\(3\)", log)
            check(m and int(m.group(1)) > 3 and m.group(1) == m.group(2),
                  "substitute(3): rank %d's error gives the counts:\n%s" % (r, log[-3000:]))
            check("the first op error (worker " in log and "Traceback" in log,
                  "substitute(3): rank %d's error has the first exception" % r)
            listed = re.search(r"the last (\d+) of worker (.*)", log)
            check(listed and int(listed.group(1)) >= 4 and
                  len(re.findall(sample + r": python op", listed.group(2))) ==
                  int(listed.group(1)),
                  "substitute(3): rank %d's error lists the samples" % r)


CASES = {"token": case_token, "notify": case_notify, "metrics": case_metrics, "bad": case_bad,
         "cgroup": case_cgroup, "usererr": case_usererr}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: test_ops.py " + "|".join(CASES))
        return 2
    need = ["coord", "worker", "cli"] \
        + (["loop"] if sys.argv[1] in ("metrics", "bad", "usererr") else []) \
        + (["dataset"] if sys.argv[1] in ("bad", "usererr") else [])
    missing = [k for k in need if not BIN[k]]
    if missing:
        print("SKIP: binaries not given: " + ", ".join(missing))
        return 77
    tmp = tempfile.mkdtemp(prefix="stoker-ops-")
    P = Procs(tmp)
    try:
        CASES[sys.argv[1]](P, tmp)
    finally:
        P.kill_all()
        if fails:
            P.dump()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %s" % (sys.argv[1], "FAILED (%d)" % len(fails) if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
