"""harness.py - what the Python tests share: a failure list with check(),
bounded waits for a port file or a condition, and spawned processes that
are always reaped (reap() in a finally). Import it from a test in this
folder (the test's own directory is on sys.path when run as a script)."""
import os
import signal
import subprocess
import sys
import time

fails = []
procs = []


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


def check(cond, what):
    """Record a failure (printed at once); returns cond."""
    if not cond:
        fails.append(what)
        print("FAIL:", what, flush=True)
    return cond


def wait_port(path, proc, timeout=15.0):
    """The port a daemon wrote to its --port-file (bounded wait); raises if
    the daemon exited first or the file never came."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            with open(path) as f:
                s = f.read().strip()
            if s:
                return int(s)
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (proc.args[0], proc.returncode))
        time.sleep(0.02)
    raise RuntimeError("no port file %s" % path)


def until(cond, timeout, what):
    """Poll cond() every 20 ms until true (bounded); a failed check if not."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    check(False, "%s (waited %g s)" % (what, timeout))
    return False


def spawn(args, log, **kw):
    """Start a process whose output goes to the open file log; reap() ends it."""
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, **kw)
    procs.append(p)
    return p


def wait_exit(p, timeout):
    """p's exit code, or None if it still runs after timeout seconds."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def reap():
    """SIGTERM every spawned process still running, SIGKILL after 5 s."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
