"""test_plan_cli.py - `stoker plan` as a user runs it (the real binary):

  - the simulated cluster's recorded figures (CPU quotas per simulated
    host: a 0.35-core accelerator host priced like a p4d.24xlarge, 0.45-core
    data hosts priced like a c5.18xlarge, 1,235 images per CPU-second, a
    25 ms step) in a user instance table: the cheapest is + 3 data hosts,
    the predictions are the recorded ones; the text names it with '*' and
    prints the SageMaker instance_groups and the Slurm hetjob header; --json
    says the same;
  - the shipped table: the TensorFlow example's homogeneous figures
    (ml.p4d.24xlarge, 192 ms/step) with + ml.c5.18xlarge hosts;
  - no step compute time: exit 1 and 'missing: ...', no count, no '*';
    a step time without the stall: missing the stall;
  - bad input: an instance-table line (file:line), an unknown type, a
    --rate for an unknown type, a bad job file: exit 2 with a message;
  - --help names every option and exit code.

  - --calibrate TYPE: the job's pipeline built on this host (stoker-worker
    --calibrate on a generated photo set) prices that type's data hosts;
    a missing dataset fails it with exit 1 and the worker's reason.

usage: test_plan_cli.py STOKER_BINARY STOKER_DATASET_BINARY
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, say_passes  # noqa: E402

CLI = sys.argv[1]
GEN = sys.argv[2]
say_passes()

SIM_TABLE = """# the simulated cluster: hosts are CPU quotas
sim.accel.p4d  0.35  1  sim  10  37.688  -
sim.data.c5    0.45  0  -    1   3.672   -
"""
JOB = """name = sim
source = imagefolder
dataset = photos
pipeline = train
height = 224
width = 224
batch_size = 32
world_size = 1
"""


def plan(*args):
    p = subprocess.run([CLI, "plan"] + list(args), capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory(prefix="stoker-plan-") as d:
    table = os.path.join(d, "sim.tsv")
    job = os.path.join(d, "job.conf")
    with open(table, "w") as f:
        f.write(SIM_TABLE)
    with open(job, "w") as f:
        f.write(JOB)
    sim = ["--job", job, "--instances", table, "--accel", "sim.accel.p4d",
           "--compute-ms", "25", "--images-per-cpu-s", "1235", "--spare-cores", "0.35",
           "--recv-cpu-s-per-gb", "1.3", "--data", "sim.data.c5", "--max-data-hosts", "5"]

    rc, out, err = plan(*sim)
    print(out)
    check(rc == 0, "simulated cluster: exit 0 (%d, %s)" % (rc, err.strip()))
    starred = [ln for ln in out.splitlines() if ln.startswith("*")]
    check(len(starred) == 1 and "+ 3 x sim.data.c5" in starred[0],
          "simulated cluster: the cheapest marked is + 3 data hosts")
    check(re.search(r"^\* .* 25\.0  compute ", out, re.M) is not None,
          "simulated cluster: + 3 binds on compute at 25.0 ms")
    check('InstanceGroup("data_group", "sim.data.c5", 3)' in out and
          'InstanceGroup("dnn_group", "sim.accel.p4d", 1)' in out,
          "the SageMaker instance_groups of the cheapest")
    check("#SBATCH hetjob" in out and "--nodes=3" in out and "--cpus-per-task=1 " in out,
          "the Slurm hetjob header (a 0.45-core host asks for 1 CPU)")

    rc, out, err = plan(*(sim + ["--json"]))
    check(rc == 0, "--json: exit 0")
    try:
        j = json.loads(out)
    except ValueError as e:
        j = None
        check(False, "--json: one JSON object (%s)" % e)
    if j:
        opts = j["options"]
        best = j["cheapest"]
        check(opts[best]["data_count"] == 3 and opts[best]["cheapest"],
              "--json: cheapest = + 3 data hosts")
        recorded = [74.1, 57.6, 28.8, 25.0]
        got = [o["step_ms"] for o in opts[:4]]
        check(all(abs(g - r) / r < 0.01 for g, r in zip(got, recorded)),
              "--json: predictions %s = the recorded %s" %
              (["%.1f" % g for g in got], recorded))
        measured = [78.0, 57.2, 31.1, 25.5]
        check(all(abs(g - m) / m < 0.15 for g, m in zip(got, measured)),
              "--json: within 15%% of the measured %s" % measured)
        check([o["binds"] for o in opts[:4]] ==
              ["data supply", "data supply", "data supply", "compute"],
              "--json: binding terms")
        o2 = opts[2]
        check(abs(o2["remote_images_per_s"] - 2 * 0.45 * 1235) < 0.5 and
              o2["local_images_per_s"] == 0 and o2["link_ms"] < o2["supply_ms"] and
              o2["receive_ms"] < o2["supply_ms"],
              "--json: + 2's data rate and its bounds (supply, link, receive)")
        check("hetjob" in j["slurm"] and "sim.data.c5" in j["sagemaker"],
              "--json: snippets")

    # the shipped table and the TensorFlow example's figures
    tf = os.path.join(d, "tf.conf")
    with open(tf, "w") as f:
        f.write(JOB.replace("batch_size = 32", "batch_size = 256")
                .replace("world_size = 1", "world_size = 8"))
    rc, out, err = plan("--job", tf, "--accel", "ml.p4d.24xlarge", "--step-ms", "192",
                        "--stall-pct", "74", "--images-per-cpu-s", "111",
                        "--spare-cores", "96", "--local-loading", "true",
                        "--data", "ml.c5.18xlarge", "--max-data-hosts", "2", "--samples",
                        "1281167")
    print(out)
    check(rc == 0, "shipped table, TF figures: exit 0 (%s)" % err.strip())
    row = [ln for ln in out.splitlines() if "+ 2 x ml.c5.18xlarge" in ln]
    m = re.search(r"ml\.c5\.18xlarge\s+([\d.]+)", row[0]) if row else None
    ms = float(m.group(1)) if m else 0
    check(row and abs(ms - 86) / 86 < 0.15,
          "1 x p4d + 2 x c5.18xlarge within 15%% of the published 86 ms (%.1f)" % ms)
    check(row and row[0].startswith("*") and "45.032" in row[0],
          "+ 2 x c5.18xlarge is the cheapest, $45.032/h")
    check("samples per epoch" in out and re.search(r" \d+\.\d\d +-\d", row[0] if row else ""),
          "$/epoch shown with --samples")

    # no step compute time: what is missing, never a count
    rc, out, err = plan("--job", job, "--instances", table, "--accel", "sim.accel.p4d",
                        "--images-per-cpu-s", "1235", "--data", "sim.data.c5")
    check(rc == 1, "no step time: exit 1 (%d)" % rc)
    check("missing: the step compute time" in out and not re.search(r"^\*", out, re.M),
          "no step time: 'missing: the step compute time', nothing marked")
    rc, out, err = plan("--job", job, "--instances", table, "--accel", "sim.accel.p4d",
                        "--step-ms", "78", "--images-per-cpu-s", "1235")
    check(rc == 1 and "missing: the stall" in out, "a step time without the stall: missing")
    rc, out, err = plan("--job", job, "--instances", table, "--accel", "sim.accel.p4d",
                        "--compute-ms", "25", "--spare-cores", "0.35", "--data", "sim.data.c5")
    check(rc == 1 and "images per CPU-second on sim.accel.p4d" in out and
          "images per CPU-second on sim.data.c5" in out,
          "no calibration: missing images per CPU-second")

    # bad input
    bad = os.path.join(d, "bad.tsv")
    with open(bad, "w") as f:
        f.write("# ok\nml.x 8 1 A100 10 3.5/hour -\n")
    rc, out, err = plan("--job", job, "--instances", bad, "--accel", "ml.p4d.24xlarge",
                        "--compute-ms", "25")
    check(rc == 2 and "%s:2: usd_per_hour" % bad in err,
          "a bad instance-table line: exit 2, file:line (%s)" % err.strip())
    rc, out, err = plan("--job", job, "--accel", "ml.nope", "--compute-ms", "25")
    check(rc == 2 and "ml.nope: no such instance type" in err, "unknown --accel: exit 2")
    rc, out, err = plan("--job", job, "--accel", "ml.c5.9xlarge", "--compute-ms", "25")
    check(rc == 2 and "no accelerators" in err, "a CPU type as --accel: exit 2")
    rc, out, err = plan("--job", job, "--accel", "ml.p4d.24xlarge", "--rate", "ml.nope=5")
    check(rc == 2 and "--rate ml.nope=5" in err, "--rate for an unknown type: exit 2")
    rc, out, err = plan("--job", job, "--accel", "ml.p4d.24xlarge", "--rate",
                        "ml.c5.9xlarge=fast")
    check(rc == 2 and "images per CPU-second > 0" in err, "--rate with no number: exit 2")
    badjob = os.path.join(d, "bad.conf")
    with open(badjob, "w") as f:
        f.write("batch_size = x\n")
    rc, out, err = plan("--job", badjob, "--accel", "ml.p4d.24xlarge")
    check(rc == 2 and "bad.conf:1" in err, "a bad job file: exit 2, file:line")
    rc, out, err = plan("--accel", "ml.p4d.24xlarge")
    check(rc == 2 and "--job FILE" in err, "no --job: exit 2")

    # --calibrate: the job's own pipeline on this host
    data = os.path.join(d, "data")
    g = subprocess.run([GEN, "gen", "--out", data, "--count", "64", "--layout",
                        "imagefolder"], capture_output=True, text=True, timeout=120)
    check(g.returncode == 0, "stoker-dataset gen (%s)" % g.stderr.strip())
    cjob = os.path.join(d, "calib.conf")
    with open(cjob, "w") as f:
        f.write(JOB.replace("dataset = photos", "dataset = imagefolder"))
    rc, out, err = plan("--job", cjob, "--accel", "ml.p3.2xlarge", "--compute-ms", "100",
                        "--calibrate", "ml.c5.9xlarge", "--calibrate-s", "1", "--data-root",
                        data, "--data", "ml.c5.9xlarge", "--max-data-hosts", "1")
    print(out, err)
    m = re.search(r"calibration on this host as ml\.c5\.9xlarge: images_per_cpu_s=([\d.]+)",
                  out)
    check(rc == 0 and m and float(m.group(1)) > 0, "--calibrate: exit 0, a rate printed")
    check(m and re.search(r"ml\.c5\.9xlarge %s\b" % re.escape(m.group(1).rstrip("0").rstrip(".")),
                          out) is not None,
          "--calibrate: the rate is the data type's figure")
    check(re.search(r"^\* 1 x ml\.p3\.2xlarge \+ 1 x ml\.c5\.9xlarge", out, re.M) is not None
          and "missing: the images per CPU-second on ml.p3.2xlarge" in out,
          "--calibrate: the calibrated type priced, the uncalibrated one missing")
    rc, out, err = plan("--job", cjob, "--accel", "ml.p3.2xlarge", "--compute-ms", "100",
                        "--calibrate", "ml.c5.9xlarge", "--calibrate-s", "1", "--data-root",
                        os.path.join(d, "nowhere"))
    check(rc == 1 and "cannot open the dataset" in err and "--calibrate" in err,
          "--calibrate without the dataset: exit 1 and why")
    rc, out, err = plan("--job", cjob, "--accel", "ml.p3.2xlarge", "--calibrate", "ml.nope")
    check(rc == 2 and "--calibrate ml.nope" in err, "--calibrate with an unknown type: exit 2")

    rc, out, err = plan("--help")
    names = ["job", "accel", "accel-count", "step-ms", "stall-pct", "compute-ms",
             "images-per-cpu-s", "rate", "data", "max-data-hosts", "spare-cores",
             "data-cores", "local-loading", "recv-cpu-s-per-gb", "batch-bytes", "samples",
             "instances", "calibrate", "calibrate-s", "data-root", "json"]
    check(rc == 0 and all("--" + n + " " in out for n in names) and "exit codes:" in out,
          "--help names every option and the exit codes")

sys.exit(1 if fails else 0)
