"""test_user_error.py - an exception in a python op reaches the Python
Loader, against a real coordinator and worker on loopback.

A job whose chain runs stk_test_ops:raise_some (tests/data/pyops: it
raises ValueError on the samples whose image sum is even, about half),
bad_samples left at its default: the worker finds the first exception,
the coordinator fails the job (exit 4, the worker exits 5), and the
script iterating `for images, labels in loader` gets StokerError (a
RuntimeError) whose text carries the exception's type and message, its
traceback and the sample's path and index; the script exits non-zero
and no Python runner is left. The job (200 epochs, a 20 ms step) lasts
far longer than the heartbeat (1 s) that carries the error.
Exit 77 without the binaries, torch or numpy, or under sanitizers.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, require, spawn, until, wait_exit, wait_port  # noqa: E402

COORD, WORKER, DATASET = require(torch=True, bins=("STOKER_COORDINATOR_BIN",
                                                   "STOKER_WORKER_BIN", "STOKER_DATASET_BIN"))
PYOPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pyops")

RANK = """
import stoker, sys, time
loader = stoker.Loader(sys.argv[1], rank=0, world_size=1)
n = 0
try:
    for epoch in range(loader.epochs):
        for images, labels in loader:
            n += 1
            time.sleep(0.02)
except RuntimeError as e:
    print("raised %s after %d batches: %s" % (type(e).__name__, n, e))
    sys.exit(3)
print("no error after %d batches" % n)
"""


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def runners():
    """Processes whose command line names the op (its Python runners)."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    n += b"stk_test_ops:raise_some" in f.read()
            except OSError:
                pass
    return n


def main():
    if subprocess.run(["/usr/bin/python3", "-c", "import numpy"],
                      capture_output=True).returncode != 0:
        print("SKIP: /usr/bin/python3 with numpy is needed for python ops")
        return 77
    tmp = tempfile.mkdtemp(prefix="stoker-usererr-")
    root = os.path.join(tmp, "data")
    dlog_path = os.path.join(tmp, "daemons.log")
    dlog = open(dlog_path, "w")
    try:
        r = subprocess.run([DATASET, "gen", "--out", root, "--count", "40", "--classes", "2",
                            "--layout", "imagefolder", "--min-side", "40", "--max-side", "90"],
                           capture_output=True, timeout=120)
        if not check(r.returncode == 0, "stoker-dataset gen"):
            return 1
        pf = os.path.join(tmp, "coord.port")
        args = [COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--idle-timeout-s", "60"]
        for kv in ("source=imagefolder", "dataset=imagefolder",
                   "pipeline=resize(16, 16) | python(stk_test_ops:raise_some) | to(uint8, nhwc)",
                   "batch_size=4", "world_size=1", "epochs=200"):
            args += ["--set", kv]
        c = spawn(args, dlog)
        target = "127.0.0.1:%d" % wait_port(pf, c)
        w = spawn([WORKER, "--coordinator", target, "--listen", "127.0.0.1:0", "--threads",
                   "1", "--data-root", root, "--python-path", PYOPS], dlog)
        path = os.path.join(tmp, "rank.py")
        with open(path, "w") as f:
            f.write(RANK)
        out_path = os.path.join(tmp, "rank.log")
        p = spawn([sys.executable, path, target], out_path)
        code = wait_exit(p, 120)
        out = read(out_path)
        check(code == 3, "the script's loop raised (exit %r): %s" % (code, out[-3000:]))
        check("raised StokerError" in out, "the Loader raises StokerError (a RuntimeError)")
        for want in ("the job failed: a python or plugin op failed on a sample",
                     "python op stk_test_ops:raise_some raised ValueError: unlucky sample",
                     "Traceback (most recent call last)", "in raise_some",
                     'raise ValueError("unlucky sample %d" % v)',
                     "bad_samples = fail is the default"):
            check(want in out, "the exception's text has %r" % want)
        check(re.search(r"class\S*\.jpg \(index \d+\)", out), "it names the sample")
        check(wait_exit(c, 60) == 4, "the coordinator exits 4 (the job failed)")
        check(wait_exit(w, 60) == 5, "the worker exits 5 (the job was aborted)")
        until(lambda: runners() == 0, 30, "no python runner left")
    finally:
        reap()
        dlog.close()
    if fails:
        print("FAILED: %d checks; logs in %s" % (len(fails), tmp))
        print(read(dlog_path)[-3000:])
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: the python op's exception reached the Loader with its traceback")
    return 0


if __name__ == "__main__":
    sys.exit(main())
