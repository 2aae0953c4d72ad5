"""harness.py - what the Python tests share: a failure list with check(),
bounded waits for a port file, a log line or a condition, and spawned
processes that are always reaped (reap() in a finally). One module for
every folder of tests/; a test imports it with its folder's path to
tests/ first on sys.path:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from harness import check, fails  # noqa: E402

Standard library only; no test logic of its own."""
import os
import re
import signal
import subprocess
import sys
import time

fails = []
procs = []
_groups = set()  # pids of the spawned processes that lead their own group
_ok_prefix, _fail_prefix = None, "FAIL: "


def require(torch=False, bins=()):
    """Exit 77 (skipped, saying why) in a sanitizer build whose runtime
    cannot be preloaded, without torch (torch=True), or when one of the
    environment variables in bins does not name an executable. Returns
    the binaries' paths, in the order asked."""
    if os.environ.get("STOKER_SANITIZED") == "1":
        print("SKIP: libstoker is built with sanitizers whose runtime cannot be preloaded "
              "into python")
        sys.exit(77)
    paths = [os.environ.get(b, "") for b in bins]
    missing = [b for b, p in zip(bins, paths) if not (p and os.access(p, os.X_OK))]
    if missing:
        print("SKIP: not built in this tree: %s" % ", ".join(missing))
        sys.exit(77)
    if torch:
        try:
            import torch as _t  # noqa: F401
        except ImportError:
            print("SKIP: torch is not importable (install python3-torch)")
            sys.exit(77)
    return paths


def say_passes(ok="ok   ", fail="FAIL "):
    """From now on check() prints every check, ok + what for a pass and
    fail + what for a failure (by default only failures, as "FAIL: what")."""
    global _ok_prefix, _fail_prefix
    _ok_prefix, _fail_prefix = ok, fail


def check(cond, what):
    """Record a failure (printed at once); returns cond."""
    if not cond:
        fails.append(what)
        print(_fail_prefix + what, flush=True)
    elif _ok_prefix is not None:
        print(_ok_prefix + what, flush=True)
    return cond


def wait_port(path, proc, timeout=15.0, or_none=False):
    """The port a daemon wrote to its --port-file (bounded wait); raises if
    the daemon exited first or the file never came (or_none: returns None
    then)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            with open(path) as f:
                s = f.read().strip()
            if s:
                return int(s)
        if proc.poll() is not None:
            if or_none:
                return None
            raise RuntimeError("%s exited with %s" % (proc.args[0], proc.returncode))
        time.sleep(0.02)
    if or_none:
        return None
    raise RuntimeError("no port file %s" % path)


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_log(path, text, proc=None, timeout=30.0):
    """True once the file at path contains text (bounded wait, every
    50 ms); False after timeout, or as soon as proc (if given) has exited
    without it having been written."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if text in _read(path):
            return True
        if proc is not None and proc.poll() is not None:
            return text in _read(path)
        time.sleep(0.05)
    return False


def until(cond, timeout, what):
    """Poll cond() every 20 ms until true (bounded); a failed check if not."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    check(False, "%s (waited %g s)" % (what, timeout))
    return False


def spawn(args, log, group=False, **kw):
    """Start a process whose output goes to log (an open file, or a path
    to create); reap() ends it. group: in a session of its own, and reap()
    signals its whole process group."""
    if isinstance(log, (str, bytes, os.PathLike)):
        with open(log, "w") as f:
            return spawn(args, f, group, **kw)
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=group, **kw)
    procs.append(p)
    if group:
        _groups.add(p.pid)
    return p


def wait_exit(p, timeout):
    """p's exit code, or None if it still runs after timeout seconds."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def _signal(p, sig):
    if p.pid in _groups:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    else:
        p.send_signal(sig)


def reap(term_s=5):
    """SIGTERM every spawned process still running, SIGKILL after term_s
    seconds (term_s=0: SIGKILL at once); waits for them all."""
    if not term_s:
        for p in procs:
            if p.poll() is None:
                _signal(p, signal.SIGKILL)
            p.wait()
        return
    for p in procs:
        if p.poll() is None:
            _signal(p, signal.SIGTERM)
    deadline = time.monotonic() + term_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(p, signal.SIGKILL)
            p.wait()


def metrics_port(log_text):
    """The /metrics port a daemon printed at start ("metrics on http://...
    (port N)", --metrics-listen ...:0), or None."""
    m = re.search(r"metrics on http://\S+ \(port (\d+)\)", log_text)
    return int(m.group(1)) if m else None


def daemon_heap(port, timeout=5):
    """(in use, held) bytes of a daemon's glibc heap from its /metrics
    (stoker_heap_bytes in_use and in_use + free), or (None, None)."""
    import urllib.request
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                    timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return None, None
    got = dict(re.findall(r'^stoker_heap_bytes\{state="(\w+)"\} (\S+)$', text, re.M))
    if "in_use" not in got or "free" not in got:
        return None, None
    use = float(got["in_use"])
    return int(use), int(use + float(got["free"]))
