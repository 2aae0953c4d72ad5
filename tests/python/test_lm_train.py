"""test_lm_train.py - examples/lm_train.py end to end through real daemons:
the example writes its corpus, `stoker-dataset tokens` turns it into a
Megatron .bin/.idx pair, a coordinator (examples/lm_job.txt) and a worker
serve it, and the example trains its tiny GPT for 200 steps over the
network; it exits non-zero unless the loss went down. Every process is
reaped; skipped (77) without torch or in sanitizer builds."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import reap, require, spawn, wait_port  # noqa: E402

require(torch=True)

EX = os.environ["STOKER_EXAMPLES"]
COORD, WORKER = os.environ["STOKER_COORDINATOR_BIN"], os.environ["STOKER_WORKER_BIN"]
DATASET = os.environ["STOKER_DATASET_BIN"]
PY = sys.executable


def main():
    d = tempfile.mkdtemp(prefix="stoker-lm-test.")
    rc = 1
    try:
        subprocess.run([PY, f"{EX}/lm_train.py", "--write-corpus", f"{d}/corpus.txt"],
                       check=True, timeout=60)
        os.mkdir(f"{d}/data")
        subprocess.run([DATASET, "tokens", "--in", f"{d}/corpus.txt", "--out",
                        f"{d}/data/lm", "--eod", "0"], check=True, timeout=60)
        c = spawn([COORD, "--job", f"{EX}/lm_job.txt", "--listen", "127.0.0.1:0",
                   "--port-file", f"{d}/cport", "--idle-timeout-s", "120"], f"{d}/coord.log")
        port = wait_port(f"{d}/cport", c, timeout=30)
        w = spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--data-root", f"{d}/data",
                   "--threads", "1"], f"{d}/worker.log")
        r = subprocess.run([PY, f"{EX}/lm_train.py", "--coordinator", f"127.0.0.1:{port}",
                            "--threads", "1"], timeout=300)
        rc = r.returncode
        # the example finished rank 0 of 1: the job ends, both daemons exit 0
        for name, p in (("coordinator", c), ("worker", w)):
            try:
                code = p.wait(30)
            except subprocess.TimeoutExpired:
                code = "still running after 30 s"
            if code != 0:
                print("FAIL: %s exit %s" % (name, code))
                rc = rc or 1
    finally:
        reap(term_s=0)
        if rc:
            for f in ("coord.log", "worker.log"):
                if os.path.exists(f"{d}/{f}"):
                    print("----", f)
                    print("".join(open(f"{d}/{f}").readlines()[-20:]))
        else:
            shutil.rmtree(d, ignore_errors=True)
    print("test_lm_train:", "passed" if rc == 0 else "FAILED")
    return rc


sys.exit(main())
