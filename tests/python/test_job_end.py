"""test_job_end.py - a rank ends when its data ends, with no finish() in
the script, against a real coordinator and worker on loopback.

  1. world_size 3, a job of 2 epochs, each rank a Python process of its own
     and none calls finish():
       rank 0: the README's loop as written (for epoch in
               range(loader.epochs): for images, labels in loader), no
               close(): finished when the last epoch's `for` runs out;
       rank 1: `with stoker.Loader(...)`, takes exactly len(loader) steps
               per epoch (the iterator never runs out): finished at
               context exit;
       rank 2: the same without close() or with: finished at interpreter
               exit.
     The coordinator logs each rank finished and "every rank finished",
     and it and the worker exit 0 (the idle timeout is 600 s).
     Rank 0 then loops past the last epoch twice: no batches, one
     warning naming the job's 2 epochs.
  2. A script that stops early (3 steps) and exits normally finishes its
     rank at interpreter exit (saying so): the daemons exit 0. The same
     script ending in an exception does not (the coordinator still runs,
     no rank finished); `stoker finish --ranks 0` then ends the job and
     every daemon exits 0.
  3. One process per rank: while this process holds rank 0 (its watch
     open), another process's join for rank 0 is refused, naming the
     holder; once the holder closes, a new process takes the rank and the
     coordinator logs that it replaced the old holder.
Exit 77 without the binaries or torch, or under sanitizers.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, require, spawn, until, wait_exit, wait_port  # noqa: E402

COORD, WORKER, CLI = require(torch=True, bins=("STOKER_COORDINATOR_BIN", "STOKER_WORKER_BIN",
                                               "STOKER_CLI_BIN"))

RANK0 = """
import stoker, sys
loader = stoker.Loader(sys.argv[1], rank=0, world_size=3)
n = 0
for epoch in range(loader.epochs):
    for images, labels in loader:
        n += 1
print("rank 0 took", n)
import warnings
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    extra = sum(1 for _ in loader) + sum(1 for _ in loader)  # epochs 3 and 4
print("past the end: %d batches, %d warnings: %s"
      % (extra, len(ws), "; ".join(str(w.message) for w in ws)))
"""
RANK1 = """
import stoker, sys
with stoker.Loader(sys.argv[1], rank=1, world_size=3) as loader:
    n = 0
    for epoch in range(loader.epochs):
        it = iter(loader)
        for _ in range(len(loader)):
            next(it)
            n += 1
print("rank 1 took", n)
"""
RANK2 = RANK1.replace("rank=1", "rank=2").replace("rank 1", "rank 2").replace(
    "with stoker.Loader(sys.argv[1], rank=2, world_size=3) as loader:",
    "loader = stoker.Loader(sys.argv[1], rank=2, world_size=3)\nif True:")
RIVAL = """
import stoker, sys
try:
    L = stoker.Loader(sys.argv[1], rank=0, world_size=2, join_timeout_ms=int(sys.argv[2]))
    next(iter(L))
    print("took a batch of rank 0")
    L.close()
except stoker.StokerError as e:
    print("refused:", e)
    sys.exit(3)
"""
EARLY = """
import stoker, sys
loader = stoker.Loader(sys.argv[1], rank=0, world_size=1)
for i, (images, labels) in enumerate(loader):
    if i == 2:
        break
print("stopped early")
if len(sys.argv) > 2:
    raise RuntimeError("the training failed")
"""


def job(tmp, log, world, tag=""):
    """A coordinator (idle timeout 600 s) and one worker; (coord, worker, target)."""
    pf = os.path.join(tmp, "coord%d%s.port" % (world, tag))
    args = [COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--idle-timeout-s", "600"]
    for kv in ("source=synthetic", "num_samples=288", "height=16", "width=16",
               "batch_size=8", "world_size=%d" % world, "epochs=2", "seed=5"):
        args += ["--set", kv]
    c = spawn(args, log)
    target = "127.0.0.1:%d" % wait_port(pf, c)
    wpf = os.path.join(tmp, "w%d%s.port" % (world, tag))
    w = spawn([WORKER, "--coordinator", target, "--listen", "127.0.0.1:0", "--port-file",
               wpf, "--threads", "1"], log)
    wait_port(wpf, w)
    return c, w, target


def script(tmp, name, text):
    path = os.path.join(tmp, name + ".py")
    with open(path, "w") as f:
        f.write(text)
    return path


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def main():
    tmp = tempfile.mkdtemp(prefix="stoker-jobend-")
    dlog_path = os.path.join(tmp, "daemons.log")
    dlog = open(dlog_path, "w")
    try:
        # 1. three ranks, three ways of ending, no finish() anywhere
        c, w, target = job(tmp, dlog, 3)
        ranks = []
        for r, text in enumerate((RANK0, RANK1, RANK2)):
            out = open(os.path.join(tmp, "rank%d.log" % r), "w")
            ranks.append(spawn([sys.executable, script(tmp, "rank%d" % r, text), target], out))
        for r, p in enumerate(ranks):
            code = wait_exit(p, 120)
            out = read(os.path.join(tmp, "rank%d.log" % r))
            check(code == 0, "rank %d's script exits 0 (%s): %s" % (r, code, out[-800:]))
            check("rank %d took 24" % r in out, "rank %d took 2 epochs x 12 steps" % r)
        out = read(os.path.join(tmp, "rank0.log"))
        check("past the end: 0 batches, 1 warnings" in out and
              "the job has 2 epochs" in out,
              "loops past the last epoch get nothing, warned once: %s" % out[-800:])
        check(wait_exit(c, 60) == 0, "the coordinator exits 0 once the scripts ended")
        check(wait_exit(w, 60) == 0, "the worker exits 0")
        log = read(dlog_path)
        for r in range(3):
            check("rank %d finished" % r in log, "the coordinator logged rank %d finished" % r)
        check("every rank finished" in log, "the job ended because every rank finished")

        # 2. an early stop then a normal exit finishes the rank at exit
        c, w, target = job(tmp, dlog, 1)
        out = open(os.path.join(tmp, "early.log"), "w")
        early = script(tmp, "early", EARLY)
        p = spawn([sys.executable, early, target], out)
        check(wait_exit(p, 120) == 0, "the early-stop script exits 0")
        out = read(os.path.join(tmp, "early.log"))
        check("stopped early (at epoch 0 step 3 of 2 epochs)" in out and
              "finishing the rank" in out, "the exit says it finishes the rank: %s" % out)
        check(wait_exit(c, 60) == 0, "the coordinator exits 0 (rank 0 finished at exit)")
        check(wait_exit(w, 60) == 0, "the worker exits 0")
        check(read(dlog_path).count("every rank finished") == 2,
              "the second job ended: every rank finished")

        # 2b. an early stop that ends in an exception finishes nothing;
        # `stoker finish` ends the job
        c, w, target = job(tmp, dlog, 1, "crash")
        out = open(os.path.join(tmp, "early-crash.log"), "w")
        p = spawn([sys.executable, early, target, "crash"], out)
        check(wait_exit(p, 120) == 1, "the early-stop script that raises exits 1")
        check(c.poll() is None, "the coordinator still runs after a crash")
        r = subprocess.run([CLI, "status", "--coordinator", target, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        try:
            finished = json.loads(r.stdout).get("ranks_finished")
        except ValueError:
            finished = None
        check(finished == [], "status shows no rank finished: %s" % r.stdout[-500:])
        r = subprocess.run([CLI, "finish", "--coordinator", target, "--ranks", "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        check(r.returncode == 0 and "rank 0 finished (1/1)" in r.stdout,
              "stoker finish --ranks 0: %s" % r.stdout)
        check(wait_exit(c, 60) == 0, "the coordinator exits 0 after stoker finish")
        check(wait_exit(w, 60) == 0, "the worker exits 0 after stoker finish")
        r = subprocess.run([CLI, "finish", "--coordinator", target, "--ranks", "0-"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 2, "stoker finish refuses a bad --ranks list (exit 2)")

        # 3. one process per rank
        c, w, target = job(tmp, dlog, 2)
        import stoker
        A = stoker.Loader(target, rank=0, world_size=2, join_timeout_ms=30000)
        next(iter(A))
        until(lambda: A.stats()["coordinator_watching"], 30, "the holder's watch is open")
        rival = script(tmp, "rival", RIVAL)
        r = subprocess.run([sys.executable, rival, target, "3000"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        check(r.returncode == 3 and "rank 0 is held by client" in r.stdout,
              "a second process's join for rank 0 is refused, naming the holder: %s"
              % r.stdout[-600:])
        A.close()  # the holder goes (without finishing: it stopped early)
        r = subprocess.run([sys.executable, rival, target, "60000"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        check(r.returncode == 0 and "took a batch" in r.stdout,
              "once the holder is gone, a new process takes rank 0: %s" % r.stdout[-600:])
        check("replacing client" in read(dlog_path),
              "the coordinator logs that the new process replaced the old holder")
    finally:
        reap()
        dlog.close()
    if fails:
        print("FAILED: %d checks; logs in %s" % (len(fails), tmp))
        print(read(dlog_path)[-3000:])
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: every rank ended with its data; an early stop ended with stoker finish")
    return 0


if __name__ == "__main__":
    sys.exit(main())
