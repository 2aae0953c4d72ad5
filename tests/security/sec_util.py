"""sec_util.py - what the security tests share: the binaries, check and
bounded waits from ../harness.py (every check printed), processes each in
its own group that are always reaped (spawn, then reap_all), a small
synthetic job, a coordinator with one worker, and a training rank that
verifies its batches.

Usage: import after checking sys.argv (BIN_DIR TRAIN_LOOP ...).
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
# check, fails, wait_log and wait_port are the security tests' too
# (imported from here)
from harness import check, fails, wait_log, wait_port  # noqa: E402,F401

BIN, TRAIN = sys.argv[1], sys.argv[2]
COORD, WORKER, CLI = (os.path.join(BIN, n) for n in
                      ("stoker-coordinator", "stoker-worker", "stoker"))
harness.say_passes()  # every check printed, ok or FAIL


def spawn(args, log):
    """harness.spawn, each process leading its own group (stop() and
    reap_all() signal the group)."""
    return harness.spawn(args, log, group=True)


def stop(p, limit_s=20):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return p.wait()


def run(args, limit_s=60):
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=limit_s)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        return 124, str(e)


def job_file(d):
    path = f"{d}/job.txt"
    with open(path, "w") as f:
        f.write("source = synthetic\nnum_samples = 512\nheight = 8\nwidth = 8\n"
                "batch_size = 8\nworld_size = 8\nepochs = 1\nseed = 3\n")
    return path


def start_job(d, tag, tls_args, worker_tls_args=None):
    """A coordinator and one worker with these TLS options; (coord, worker,
    port) once the worker has registered, or None."""
    pf = f"{d}/{tag}.port"
    c = spawn([COORD, "--job", job_file(d), "--listen", "127.0.0.1:0", "--port-file", pf,
               "--idle-timeout-s", "120", *tls_args], f"{d}/{tag}.coord.log")
    port = wait_port(pf, c, timeout=30, or_none=True)
    if not check(port is not None, f"{tag}: coordinator up"):
        return None
    w = spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--threads", "1",
               *(worker_tls_args if worker_tls_args is not None else tls_args)],
              f"{d}/{tag}.worker.log")
    ok = wait_log(f"{d}/{tag}.coord.log", "registered at", c)
    check(ok, f"{tag}: the worker registered over its TLS session")
    return c, w, port


RANKS = {}


def train(port, *extra, join_ms=60000):
    # a fresh rank each time (the job has 8): a rank that finished cannot
    # join again, and the job must not end before the last case
    rank = RANKS.setdefault(port, [0])
    r = rank[0]
    rank[0] += 1
    return run([TRAIN, "--coordinator", f"127.0.0.1:{port}", "--rank", str(r),
                "--world-size", "8", "--verify", "--join-timeout-ms", str(join_ms),
                *extra])


def reap_all(d):
    """Kill every spawned process still running and wait for all of them;
    after a failure, print the tail of every log in d."""
    harness.reap(term_s=0)
    if fails:
        for name in sorted(os.listdir(d)):
            if name.endswith(".log"):
                print("---- %s (tail)" % name)
                print("".join(open(os.path.join(d, name), errors="replace")
                              .readlines()[-15:]))
