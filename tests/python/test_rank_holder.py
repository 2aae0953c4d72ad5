"""test_rank_holder.py - a rank is held by one process, against a real
coordinator and worker on loopback (a synthetic job of 2 ranks, 2 epochs):

  1. process A holds rank 0 (a batch taken, its watch open); process B
     joins rank 0 with a join timeout of 300 s and is refused at once:
     StokerError naming A (hostname and pid: client HOST:PID:rank0), while
     A is still alive.
  2. A is killed (SIGKILL: a crash); the coordinator logs that rank 0 was
     released as A's connection closed, and process C, started after
     that, joins rank 0 (the coordinator logs that it replaced A), reads
     rank 0 to its end and exits 0; the coordinator logs rank 0 finished.
  3. process D joins the finished rank 0 and is refused at once: the rank
     has finished in this job; the coordinator logged "rank 0 finished"
     exactly once.
  4. rank 1 reads its data; the job ends (every rank finished), the
     coordinator and the worker exit 0.
Orders of events and messages are asserted, never durations: a refusal
that came only at the join timeout (300 s) would overrun the test.
Exit 77 without the binaries or torch, or under sanitizers.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, require, spawn, wait_exit, wait_log, wait_port  # noqa: E402,E501

COORD, WORKER = require(torch=True, bins=("STOKER_COORDINATOR_BIN", "STOKER_WORKER_BIN"))

HOLD = """
import os, signal, stoker, sys, time
L = stoker.Loader(sys.argv[1], rank=0, world_size=2, join_timeout_ms=60000)
next(iter(L))
for _ in range(1200):  # its watch open (bounded): the hold no longer rests on the join
    if L.stats()["coordinator_watching"]:
        break
    time.sleep(0.05)
print("holding rank 0: pid %d" % os.getpid(), flush=True)
while True:
    signal.pause()
"""
JOIN = """
import stoker, sys
try:
    L = stoker.Loader(sys.argv[1], rank=int(sys.argv[2]), world_size=2,
                      join_timeout_ms=300000)
    n = 0
    for epoch in range(L.epochs):
        for images, labels in L:
            n += 1
    print("read rank %s: %d steps" % (sys.argv[2], n), flush=True)
except stoker.StokerError as e:
    print("refused: %s" % e, flush=True)
    sys.exit(3)
"""


def script(tmp, name, text):
    path = os.path.join(tmp, name + ".py")
    with open(path, "w") as f:
        f.write(text)
    return path


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def run(tmp, target, rank):
    """A process joining `rank`: (exit code, its output)."""
    r = subprocess.run([sys.executable, script(tmp, "join", JOIN), target, str(rank)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=150)
    return r.returncode, r.stdout


def main():
    tmp = tempfile.mkdtemp(prefix="stoker-holder-")
    clog_path, wlog_path = os.path.join(tmp, "coord.log"), os.path.join(tmp, "worker.log")
    host = socket.gethostname()
    try:
        pf = os.path.join(tmp, "coord.port")
        args = [COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--idle-timeout-s",
                "600"]
        for kv in ("source=synthetic", "num_samples=96", "height=8", "width=8",
                   "batch_size=8", "world_size=2", "epochs=2", "seed=5"):
            args += ["--set", kv]
        c = spawn(args, clog_path)
        target = "127.0.0.1:%d" % wait_port(pf, c)
        wpf = os.path.join(tmp, "w.port")
        w = spawn([WORKER, "--coordinator", target, "--listen", "127.0.0.1:0", "--port-file",
                   wpf, "--threads", "1"], wlog_path)
        wait_port(wpf, w)

        # 1. A holds rank 0; B is refused at once, naming A
        alog = os.path.join(tmp, "a.log")
        a = spawn([sys.executable, script(tmp, "hold", HOLD), target], alog)
        check(wait_log(alog, "holding rank 0", a, 120), "A holds rank 0: %s" % read(alog))
        code, out = run(tmp, target, 0)
        check(code == 3 and "rank 0 is held by client %s:%d:rank0" % (host, a.pid) in out,
              "B's join for rank 0 is refused, naming A (%s:%d): %s" % (host, a.pid, out[-600:]))
        check("a live process" in out and "one process per rank" in out,
              "the refusal says what to do: %s" % out[-600:])
        check(a.poll() is None, "A still holds rank 0 when B is refused")

        # 2. A crashes; the rank is released; C takes it and reads it to its end
        a.send_signal(signal.SIGKILL)
        wait_exit(a, 30)
        check(wait_log(clog_path, "rank 0 released", c, 60),
              "the coordinator releases rank 0 as A's connection closes")
        code, out = run(tmp, target, 0)
        check(code == 0 and "read rank 0:" in out,
              "C (after A crashed) reads rank 0: %s" % out[-600:])
        log = read(clog_path)
        check("replacing client %s:%d:rank0 (gone)" % (host, a.pid) in log,
              "the coordinator logs that C replaced A")
        check("rank 0 finished" in log, "rank 0 finished once C read it all")
        check(log.find("rank 0 released") < log.find("replacing client"),
              "released before C's join")

        # 3. the finished rank is not served again
        code, out = run(tmp, target, 0)
        check(code == 3 and "rank 0 has finished in job" in out,
              "D's join for the finished rank 0 is refused: %s" % out[-600:])
        check(read(clog_path).count("rank 0 finished") == 1,
              "the coordinator logged rank 0 finished exactly once")

        # 4. rank 1 ends the job
        code, out = run(tmp, target, 1)
        check(code == 0 and "read rank 1: 12 steps" in out, "rank 1 reads its data: %s" % out)
        check(wait_exit(c, 60) == 0, "the coordinator exits 0 once every rank finished")
        check(wait_exit(w, 60) == 0, "the worker exits 0")
    finally:
        reap()
    if fails:
        print("FAILED: %d checks; logs in %s" % (len(fails), tmp))
        print(read(clog_path)[-3000:])
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: one process per rank: a live holder refused a rival at once, a crashed "
          "one released the rank, a finished rank was not served again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
