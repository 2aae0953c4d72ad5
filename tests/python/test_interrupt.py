"""test_interrupt.py - nothing silent: Ctrl-C and failures reach a Python
training process blocked in the Loader, against a real coordinator and
worker on loopback, each rank a Python process of its own.

  a. Joining with no worker yet (an ImageFolder job whose size only a
     worker can tell), join_timeout_ms 120 s: the rank logs that it waits
     to join; SIGINT then ends it with KeyboardInterrupt, long before the
     join timeout (bound 30 s).
  b. Waiting for a batch with the only worker SIGSTOPped: the rank logs
     what it waits for; SIGINT ends it with KeyboardInterrupt (bound 30 s);
     the daemons keep running (SIGCONT, still serving Status), and the
     rank started again (stoker-train-loop --verify) runs the job to its
     end.
  c. A worker that cannot open the job's dataset (`dataset = flowerz`,
     no such folder): the rank, joining with join_timeout_ms 120 s, fails
     with the worker's reason ("no worker can serve the job ... cannot
     open the dataset") and not with the join timeout's message.
  d. No live worker mid-job (a synthetic job, no worker started): the rank
     logs "waiting for a worker: none alive for N s" and then fails after
     its no_worker_timeout_ms (8 s) with that limit named; the line comes
     first.
  e. Loader("127.0.0.1") without a port is refused at once, naming the
     missing port.
Bounds are the code's own limits (the join timeout, no_worker_timeout_ms),
never a race: the test waits for the log line that says the rank is in
the state, then acts. No torch needed (no batch is ever handed out).
Exit 77 without the binaries, or under sanitizers that cannot be preloaded.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (check, fails, reap, require, say_passes, spawn, wait_exit,  # noqa: E402
                     wait_log, wait_port)

COORD, WORKER, CLI = require(bins=("STOKER_COORDINATOR_BIN", "STOKER_WORKER_BIN",
                                   "STOKER_CLI_BIN"))

# The rank: opens (joins), then waits for its first batch. Prints how the
# wait ended; KeyboardInterrupt is left to Python (its traceback on stderr).
RANK = r"""
import sys, time, stoker
target, nw = sys.argv[1], int(sys.argv[2])
t0 = time.monotonic()
L = stoker.Loader(target, rank=0, world_size=1, join_timeout_ms=120000,
                  no_worker_timeout_ms=nw)
print("rank constructed", flush=True)
try:
    for batch in L:
        print("got a batch", flush=True)
        break
except stoker.StokerError as e:
    print("StokerError after %.1f s: %s" % (time.monotonic() - t0, e), flush=True)
    sys.exit(3)
"""


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def coordinator(tmp, log, name, sets):
    pf = os.path.join(tmp, name + ".port")
    args = [COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--idle-timeout-s", "600"]
    for kv in sets:
        args += ["--set", kv]
    c = spawn(args, log)
    return c, "127.0.0.1:%d" % wait_port(pf, c)


def worker(tmp, log, name, target, extra=()):
    pf = os.path.join(tmp, name + ".port")
    w = spawn([WORKER, "--coordinator", target, "--listen", "127.0.0.1:0", "--port-file",
               pf, "--threads", "1"] + list(extra), log)
    return w, pf


def rank(tmp, name, target, no_worker_ms=120000):
    path = os.path.join(tmp, "rank.py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(RANK)
    log = os.path.join(tmp, name + ".log")
    env = dict(os.environ, STOKER_CLIENT_LOG="1")
    return spawn([sys.executable, path, target, str(no_worker_ms)], log, env=env), log


def interrupted(p, log, what):
    """SIGINT p (in the state its log says) and check it ends with
    KeyboardInterrupt within 30 s, far below its 120 s limits."""
    p.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    code = wait_exit(p, 30)
    out = read(log)
    check(code is not None, "%s: the rank exits after SIGINT (bound 30 s): %s"
          % (what, out[-800:]))
    check("KeyboardInterrupt" in out and "StokerError" not in out,
          "%s: it ends with KeyboardInterrupt: %s" % (what, out[-800:]))
    print("%s: exited %s, %.2f s after SIGINT" % (what, code, time.monotonic() - t0))


IMAGEFOLDER = ("source=imagefolder", "num_samples=0", "pipeline=train", "batch_size=4",
               "world_size=1", "height=8", "width=8")
SYNTHETIC = ("source=synthetic", "num_samples=64", "height=8", "width=8", "batch_size=4",
             "world_size=1", "epochs=1", "seed=3")


def main():
    say_passes()
    tmp = tempfile.mkdtemp(prefix="stoker-interrupt-")
    dlog_path = os.path.join(tmp, "daemons.log")
    dlog = open(dlog_path, "w")
    stopped = []
    try:
        # a. joining with no worker yet
        c, target = coordinator(tmp, dlog, "a", IMAGEFOLDER + ("dataset=imgs",))
        p, log = rank(tmp, "a", target)
        check(wait_log(log, "waiting to join the job at " + target, p, 60),
              "a: the joining rank logs what it waits for: %s" % read(log)[-600:])
        check("waiting for a worker" in read(log), "a: ... a worker, in the coordinator's "
              "words")
        interrupted(p, log, "a (joining)")
        check(c.poll() is None, "a: the coordinator still runs")

        # b. waiting for a batch, the only worker stopped
        blog = os.path.join(tmp, "b-daemons.log")
        c, target = coordinator(tmp, blog, "b", SYNTHETIC)
        w, wpf = worker(tmp, blog, "wb", target)
        check(wait_log(blog, "registered at", c, 60), "b: the worker is listed")
        os.kill(w.pid, signal.SIGSTOP)
        stopped.append(w)
        p, log = rank(tmp, "b", target)
        check(wait_log(log, "INFO waiting for ", p, 60),
              "b: the waiting rank logs what it waits for: %s" % read(log)[-600:])
        out = read(log)
        check("of 1 listed workers alive" in out or "(listed 1;" in out,
              "b: ... with the stopped worker listed: %s" % out[-600:])
        interrupted(p, log, "b (worker stopped)")
        os.kill(w.pid, signal.SIGCONT)
        stopped.remove(w)
        r = subprocess.run([CLI, "status", "--coordinator", target], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        check(r.returncode == 0 and w.poll() is None and c.poll() is None,
              "b: the daemons keep serving after the rank's Ctrl-C: %s" % r.stdout[-400:])
        loop = os.environ.get("STOKER_TRAIN_LOOP_BIN")
        if loop and os.access(loop, os.X_OK):
            # the rank started again takes the whole job, verified
            env = dict(os.environ, STOKER_COORDINATOR=target, RANK="0", WORLD_SIZE="1")
            r = subprocess.run([loop, "--verify", "--join-timeout-ms", "60000"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
            check(r.returncode == 0, "b: the rank started again runs the job, verified: %s"
                  % r.stdout[-600:])
            check(wait_exit(c, 60) == 0 and wait_exit(w, 60) == 0,
                  "b: then the job ends, every daemon exits 0")

        # c. a worker that cannot open the job's dataset
        root = os.path.join(tmp, "root")
        os.makedirs(root)
        c, target = coordinator(tmp, dlog, "c", IMAGEFOLDER + ("dataset=flowerz",))
        w, _ = worker(tmp, dlog, "wc", target, ("--data-root", root))
        p, log = rank(tmp, "c", target)
        code = wait_exit(p, 100)  # below the rank's join timeout (120 s)
        out = read(log)
        check(code == 3, "c: the rank fails (exit 3) before its join timeout: %s (%s)"
              % (out[-800:], code))
        check("UNAVAILABLE" in out and "no worker can serve the job" in out and
              "cannot open the dataset" in out and "flowerz" in out,
              "c: with the worker's reason: %s" % out[-800:])
        check("within 120000 ms" not in out, "c: not at the join timeout")
        check(wait_exit(w, 30) == 1, "c: the bad worker exits 1")

        # d. no live worker: the waiting line, then the limit
        c, target = coordinator(tmp, dlog, "d", SYNTHETIC)
        p, log = rank(tmp, "d", target, 8000)
        code = wait_exit(p, 100)
        out = read(log)
        line = out.find("waiting for a worker: none alive for ")
        err = out.find("StokerError")
        check(line >= 0, "d: the rank logs the waiting line: %s" % out[-800:])
        check(code == 3 and err > line >= 0,
              "d: then fails after no_worker_timeout_ms: %s (%s)" % (out[-800:], code))
        check("UNAVAILABLE: no live worker for 8000 ms (no_worker_timeout_ms" in out,
              "d: naming the limit: %s" % out[-500:])

        # e. a coordinator address without a port
        import stoker
        t0 = time.monotonic()
        try:
            L = stoker.Loader("127.0.0.1", rank=0, world_size=1, join_timeout_ms=120000)
            len(L)
            check(False, "e: Loader('127.0.0.1') opened")
        except stoker.StokerError as e:
            check(e.name == "INVALID_ARGUMENT" and "has no port" in str(e),
                  "e: refused, naming the missing port: %s" % e)
        check(time.monotonic() - t0 < 110, "e: at once, not after the join timeout (120 s)")
    finally:
        for w in stopped:
            os.kill(w.pid, signal.SIGCONT)
        reap()
        dlog.close()
    if fails:
        print("FAILED: %d checks; logs in %s" % (len(fails), tmp))
        print(read(dlog_path)[-3000:])
        print(read(os.path.join(tmp, "b-daemons.log"))[-2000:])
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: Ctrl-C and every failure reached the rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
