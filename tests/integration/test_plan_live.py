"""test_plan_live.py - `stoker plan --coordinator` and the purchase line of
`stoker status` on a running job (real coordinator, worker and training
loop on loopback, a generated JPEG set, the train pipeline):

  - the coordinator told the training hosts' type (--accel-type,
    --accel-hosts, --data-type) and the worker its own (--instance-type):
    `stoker status` shows them (the hosts line, the TYPE column, --json's
    accel_type / instance_type) and a priced purchase line; `stoker plan
    --coordinator` prints the table with the running shape marked '>', the
    purchase and the snippets, exit 0; --json has "now", "purchase" and
    "cheapest";
  - nothing told (a plain job): the purchase says what is missing, never a
    count; `stoker plan --coordinator` exits 1 with the same;
  - stoker-train-loop tells its simulated step (stk_client_set_step_ms):
    the rank's STEP is exactly it;
  - bad input: a worker's --instance-type with a space, a coordinator's
    --accel-type with a control character, `stoker plan --coordinator`
    with no coordinator there: a message and exit 2 / 1.

Asserts what the code guarantees (keys, markers, exit codes), never a
speed: the figures depend on the machine.

usage: test_plan_live.py BIN_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, say_passes, spawn, until, wait_port  # noqa: E402

B = sys.argv[1]
COORD = os.path.join(B, "server", "stoker-coordinator")
WORKER = os.path.join(B, "server", "stoker-worker")
CLI = os.path.join(B, "server", "stoker")
LOOP = os.path.join(B, "examples", "stoker-train-loop")
GEN = os.path.join(B, "tools", "stoker-dataset")
say_passes()

JOB = """name = live
source = imagefolder
dataset = imagefolder
pipeline = train
height = 96
width = 96
dtype = uint8
layout = nchw
batch_size = 8
world_size = 1
epochs = 1000
seed = 1
"""


def cli(*args, timeout=60):
    p = subprocess.run([CLI] + list(args), capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def status_json(addr):
    rc, out, _ = cli("status", "--coordinator", addr, "--json")
    try:
        return json.loads(out) if rc == 0 else None
    except ValueError:
        return None


def stepped(addr):
    """True once a rank reported a step time and the worker a rate."""
    s = status_json(addr)
    return bool(s and s["ranks"] and s["ranks"][0]["step_ms"] > 0 and s["workers"]
                and s["workers"][0]["batches_per_cpu_s"] > 0)


def job(d, name, coord_args, worker_args):
    """Start a coordinator, one worker and a paced training loop; returns
    the coordinator's address once a step time is reported."""
    cport = os.path.join(d, name + ".cport")
    c = spawn([COORD, "--listen", "127.0.0.1:0", "--port-file", cport, "--job",
               os.path.join(d, "job.conf"), "--idle-timeout-s", "120"] + coord_args,
              os.path.join(d, name + ".coord.log"))
    addr = "127.0.0.1:%d" % wait_port(cport, c)
    w = spawn([WORKER, "--coordinator", addr, "--threads", "1", "--data-root", d,
               "--stats-interval-s", "1"] + worker_args, os.path.join(d, name + ".worker.log"))
    spawn([LOOP, "--coordinator", addr, "--rank", "0", "--world-size", "1", "--step-ms",
           "10", "--data-root", d], os.path.join(d, name + ".loop.log"))
    until(lambda: stepped(addr) or w.poll() is not None, 60,
          "%s: a rank reported its step and the worker its rate" % name)
    return addr


try:
    with tempfile.TemporaryDirectory(prefix="stoker-plan-live-") as d:
        subprocess.run([GEN, "gen", "--out", os.path.join(d, "imagefolder"), "--count", "120",
                        "--classes", "4", "--layout", "imagefolder"], check=True,
                       capture_output=True, timeout=120)
        with open(os.path.join(d, "job.conf"), "w") as f:
            f.write(JOB)

        # bad input first: refused at once, with the option named
        for prog, args in ((WORKER, ["--coordinator", "127.0.0.1:1",
                                     "--instance-type", "ml c5"]),
                           (COORD, ["--job", os.path.join(d, "job.conf"),
                                    "--accel-type", "ml.p4d\x1b[2J"])):
            p = subprocess.run([prog] + args, capture_output=True, text=True, timeout=30)
            check(p.returncode == 2 and "is not an instance type name" in p.stderr,
                  "%s refuses a bad type name (exit %d: %s)"
                  % (os.path.basename(prog), p.returncode, p.stderr.strip()[:200]))
        rc, out, err = cli("status", "--rate", "ml.c5.xlarge=fast")
        check(rc == 2 and "--rate ml.c5.xlarge=fast: want TYPE=N" in err,
              "status --rate without a figure: exit 2 (%d: %s)" % (rc, err.strip()[:200]))
        rc, out, err = cli("plan", "--coordinator", "127.0.0.1:1", "--timeout-ms", "500")
        check(rc == 1 and "stoker plan: 127.0.0.1:1" in err,
              "plan --coordinator with no coordinator there: exit 1 (%d: %s)"
              % (rc, err.strip()[:200]))

        # the fleet told: priced
        addr = job(d, "typed", ["--accel-type", "ml.p3.2xlarge", "--accel-hosts", "1",
                                "--data-type", "ml.c5.9xlarge"],
                   ["--instance-type", "ml.c5.4xlarge"])
        rc, out, err = cli("status", "--coordinator", addr)
        check(rc == 0 and "hosts            training: 1 x ml.p3.2xlarge; data hosts "
              "priced as ml.c5.9xlarge" in out, "status: the hosts line")
        check(" ml.c5.4xlarge " in out, "status: the worker's TYPE")
        line = [x for x in out.splitlines() if x.startswith("purchase ")]
        check(len(line) == 1 and "missing" not in line[0]
              and any(w in line[0] for w in ("keep ", "add ", "remove ", "change to ")),
              "status: a priced purchase line (%s)" % (line[:1],))
        s = status_json(addr)
        check(s is not None and abs(s["ranks"][0]["step_ms"] - 10) < 1e-6,
              "the loop's told step (stk_client_set_step_ms) is the rank's step: %r"
              % (s and s["ranks"][0]["step_ms"],))
        check(s is not None and s["accel_type"] == "ml.p3.2xlarge" and s["accel_hosts"] == 1
              and s["workers"][0]["instance_type"] == "ml.c5.4xlarge"
              and s["purchase"]["priced"]
              and s["purchase"]["now"] == "1 x ml.p3.2xlarge + 1 x ml.c5.4xlarge",
              "status --json: the fleet and the purchase (%s)"
              % (s and s.get("purchase"),))
        rc, out, err = cli("plan", "--coordinator", addr)
        check(rc == 0, "plan --coordinator: exit 0 (%d: %s)" % (rc, err.strip()[:300]))
        check("\n >1 x ml.p3.2xlarge + 1 x ml.c5.4xlarge" in out
              or "\n*>1 x ml.p3.2xlarge + 1 x ml.c5.4xlarge" in out,
              "plan --coordinator: the running shape marked '>'")
        check("+ 1 x ml.c5.9xlarge" in out, "plan: the coordinator's --data-type priced")
        rc, out, err = cli("plan", "--coordinator", addr, "--rate", "ml.c5.9xlarge=777")
        check(rc == 0 and "ml.c5.9xlarge's images per CPU-second as given (777)" in out,
              "plan --coordinator --rate: the given rate priced, said (%d)" % rc)
        check("\npurchase: " in out and "\nSageMaker:\n" in out,
              "plan: the purchase and the snippets")
        rc, out, err = cli("plan", "--coordinator", addr, "--json")
        try:
            pj = json.loads(out)
        except ValueError:
            pj = None
        check(rc == 0 and pj is not None and isinstance(pj["now"], int)
              and pj["options"][pj["now"]]["now"] and pj["purchase"]
              and isinstance(pj["cheapest"], int),
              "plan --coordinator --json: now, purchase, cheapest")
        cli("abort", "--coordinator", addr)
        reap()

        # nothing told: what is missing, never a count
        addr = job(d, "plain", [], [])
        rc, out, err = cli("status", "--coordinator", addr)
        line = [x for x in out.splitlines() if x.startswith("purchase ")]
        check(len(line) == 1 and "missing: the training hosts' instance type" in line[0],
              "status with no types: the purchase says what is missing (%s)" % (line[:1],))
        rc, out, err = cli("plan", "--coordinator", addr)
        check(rc == 1 and "missing: the training hosts' instance type" in out,
              "plan --coordinator with no types: exit 1, what is missing (%d)" % rc)
        cli("abort", "--coordinator", addr)
finally:
    reap()

sys.exit(1 if fails else 0)
