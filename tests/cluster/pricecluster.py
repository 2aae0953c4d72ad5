#!/usr/bin/python3
"""pricecluster.py - the heterogeneous gain, shown on one machine.

    pricecluster.py [--build DIR] [--runs N] [--seconds S] [--shapes LIST]
                    [--photos N] [--photo-size WxH] [--dataset DIR] [--keep]
    pricecluster.py --test [--build DIR] [--keep]

Simulates the clusters `stoker plan` prices (docs/price-performance.md, "A
simulated cluster"): network namespaces as hosts (netcluster.py), links
shaped with tc, and a CPU quota per host (a cgroup per host: v1
cpu.cfs_quota_us, or v2 cpu.max; every process of the host in it).

  gpu-1   the "accelerator host": 0.35 core, a 10 Gbit/s link; runs the
          coordinator and `stoker-train-loop --step-ms 25` (a simulated
          accelerator step), priced like an ml.p4d.24xlarge
  cpu-N   data hosts: 0.45 core each, 1 Gbit/s links (250 Mbit/s in the
          link-bound shape), a stoker-worker each, priced like an
          ml.c5.18xlarge

Shapes (--shapes, comma-separated, in this order of runs):
  hom     homogeneous: a stoker-worker on gpu-1, on its own 0.35 core (as
          stoker-launch runs one on each training host of a homogeneous job)
  torch   homogeneous, the user's alternative: PyTorch's DataLoader with the
          same transforms on gpu-1's quota (torch_loader.py; skipped
          without torch)
  1,2,3   1, 2, 3 data hosts on 1 Gbit/s links
  3slow   3 data hosts on 250 Mbit/s links: the link binds

Real photos (scripts/photos.sh, 1,024 of about 576x432; --dataset DIR keeps
them for the next run), the job's `train` pipeline at 224x224 uint8
(decode, RandomResizedCrop, flip; the floats are made on the accelerator),
batch 32, one rank. --runs rounds; each round first calibrates:
`stoker-worker --calibrate` under a data host's quota (the pipeline
alone, images per CPU-second), then a calibration run: one data host
serving an unthrottled rank over a 1 Gbit/s link, whose `stoker status
--json` 30% and 80% in gives the worker's images per CPU-second as it
serves (building, gRPC, sending) and the rank's receiving cost (CPU-s
per GB); then runs every shape once (alternated runs), each on a fresh
cluster, capturing 40% in `stoker status` (text and --json) and `stoker
plan --coordinator` (with the fleet's instance types where the build
takes them). `stoker plan` (offline, with an instance table mapping the
simulated hosts to the types they are priced as) predicts every shape
from the calibration runs' two figures alone (their medians: a CPU-second
of this shared machine is not the same from minute to minute); the
prediction from the builder's figure alone is shown beside. The table
printed: measured ms/step (the median of the runs; each run's figure is
its steady state: the train loop's progress lines after the first two),
the plan's prediction and the error, $/step against homogeneous, the
binding term, the verdicts and purchase lines, the planner's cheapest
against the measured cheapest, and the gain of the best heterogeneous
shape beside the published 46% / 77%.

--test (ctest cluster_price): 2 shapes (hom, 1), one run each, a small
job, every batch verified against the reference (--verify: the train
loop also builds each batch itself, so its speed means nothing there);
checks only what cannot flake: every process exits 0, every batch
verified, the plan printed, stoker status answered. No speed is asserted.

Exit 0: done (--test: passed); 1: failed (host logs printed); 2: usage;
77: skipped (not root, no network namespaces, no cgroup cpu controller).
The binaries come from the environment ctest sets (tests/cluster/
CMakeLists.txt) or --build DIR.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import netcluster  # noqa: E402
import scenarios  # noqa: E402
from harness import check, fails  # noqa: E402

ACCEL, ACCEL_CORES, ACCEL_LINK = "gpu-1", 0.35, "10gbit"
DATA_CORES, DATA_LINK, SLOW_LINK = 0.45, "1gbit", "250mbit"
STEP_MS = 25
BATCH, SIDE = 32, 224
PORT_C, PORT_W = 7070, 7071
SUBNET = 41
# photos.sh's size: a pipeline of about 1,200 images per CPU-second served
# here, so + 2 data hosts stay short of the 25 ms step and + 3 reach it
PHOTO_SIZE = "576x432"
MIN_BURST = 256 << 10  # tbf keeps 64 KiB GSO packets whole (netcluster.Cluster)
# The types the simulated hosts are priced as: each a whole instance's
# on-demand $/h (deploy/instances.tsv), with the host's quota as its vCPU
# and its shaped link as its network.
ACCEL_TYPE, DATA_TYPE, SLOW_TYPE = "ml.p4d.24xlarge", "ml.c5.18xlarge", "ml.c5.18xlarge-250mbit"
PUBLISHED = "46% (TensorFlow ResNet-50, + 2 x ml.c5.18xlarge) / 77% (PyTorch, + 1 x ml.c5.9xlarge)"

SHAPES = {  # key -> (label, data hosts, their link, loader on gpu-1)
    "hom": ("homogeneous (a worker on the accelerator host)", 0, None, "stoker"),
    "torch": ("homogeneous, PyTorch DataLoader (1 worker process)", 0, None, "torch"),
    "1": ("+ 1 data host", 1, DATA_LINK, None),
    "2": ("+ 2 data hosts", 2, DATA_LINK, None),
    "3": ("+ 3 data hosts", 3, DATA_LINK, None),
    "3slow": ("+ 3 data hosts, 250 Mbit/s links", 3, SLOW_LINK, None),
}


def usage(msg=None):
    if msg:
        print("pricecluster.py: %s" % msg, file=sys.stderr)
    print("usage: pricecluster.py [--build DIR] [--runs N] [--seconds S] [--shapes LIST] "
          "[--photos N] [--photo-size WxH] [--dataset DIR] [--keep]\n"
          "       pricecluster.py --test [--build DIR] [--keep]\n"
          "shapes: %s" % ",".join(SHAPES), file=sys.stderr)
    return 2


class Opts:
    def __init__(self):
        self.build, self.test, self.keep = None, False, False
        self.runs, self.seconds, self.photos, self.dataset = 3, 8.0, 1024, None
        self.photo_size = PHOTO_SIZE
        self.shapes = list(SHAPES)


def parse(argv):
    o = Opts()
    shapes_given = False
    it = iter(argv)
    for a in it:
        if a in ("--test", "--keep"):
            setattr(o, a[2:], True)
            continue
        if a not in ("--build", "--runs", "--seconds", "--shapes", "--photos", "--dataset",
                     "--photo-size"):
            raise ValueError("unknown argument %r" % a)
        v = next(it, None)
        if v is None:
            raise ValueError("%s wants a value" % a)
        if a == "--build":
            o.build = v
        elif a == "--runs":
            o.runs = int(v)
            if not 1 <= o.runs <= 9:
                raise ValueError("--runs wants 1..9")
        elif a == "--seconds":
            o.seconds = float(v)
            if not 2 <= o.seconds <= 120:
                raise ValueError("--seconds wants 2..120")
        elif a == "--photos":
            o.photos = int(v)
            if not 64 <= o.photos <= 20000:
                raise ValueError("--photos wants 64..20000")
        elif a == "--dataset":
            o.dataset = v
        elif a == "--photo-size":
            if not re.fullmatch(r"[1-9]\d{1,3}x[1-9]\d{1,3}", v):
                raise ValueError("--photo-size wants WxH, e.g. 576x432")
            o.photo_size = v
        else:
            o.shapes = [s for s in v.split(",") if s]
            shapes_given = True
            bad = [s for s in o.shapes if s not in SHAPES]
            if bad or not o.shapes:
                raise ValueError("--shapes: unknown %s (known: %s)" % (bad, ",".join(SHAPES)))
    if o.test:
        o.runs, o.seconds, o.photos = 1, 3.0, 64
        if not shapes_given:
            o.shapes = ["hom", "1"]
    return o


def supports(binary, flag):
    """Whether `binary --help` (or `stoker status --help`) lists flag."""
    argv = binary + ["--help"]
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return ("--" + flag) in r.stdout


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError):
        return -1.0


# ---- the steady-state step time from progress lines ---------------------------

PROGRESS = re.compile(r"^rank \d+: epoch (\d+) step (\d+)\s+([\d.]+) batches/s.*?stall "
                      r"([\d.]+)%", re.M)


def steady_ms(text, skip=2):
    """(ms per step, stall %) over the progress lines after the first
    `skip` (warm-up), from the loop's own clock: each line covers the
    batches since the previous one at its rate. None when fewer than 2
    lines are left."""
    m = re.search(r"(\d+) steps/epoch", text)
    spe = int(m.group(1)) if m else 0
    lines = [(int(e) * spe + int(s), float(r), float(st)) for e, s, r, st in
             PROGRESS.findall(text)]
    if spe == 0 or len(lines) < skip + 2:
        return None
    t = n = stall = 0.0
    for (b0, _, _), (b1, rate, st) in zip(lines[skip:], lines[skip + 1:]):
        if rate <= 0 or b1 <= b0:
            continue
        dt = (b1 - b0) / rate
        t += dt
        n += b1 - b0
        stall += st * dt
    if n == 0:
        return None
    return 1e3 * t / n, stall / t


# ---- the bench ------------------------------------------------------------------------

class Bench:
    def __init__(self, o):
        self.o = o
        self.bins = {k: scenarios.need_env(v) for k, v in (
            ("coordinator", "STOKER_BIN_COORDINATOR"), ("worker", "STOKER_BIN_WORKER"),
            ("cli", "STOKER_BIN_CLI"), ("train", "STOKER_BIN_TRAIN_LOOP"),
            ("dataset", "STOKER_BIN_DATASET"))}
        self.work = tempfile.mkdtemp(prefix="stoker-price-")
        self.token = os.path.join(self.work, "token")
        fd = os.open(self.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (os.urandom(16).hex() + "\n").encode())
        os.close(fd)
        self.results = {}  # shape -> [run dict]
        self.cal_build, self.cal_serve = [], []  # one calibration per round
        self.rate = self.recv = None  # their medians, once calibrated
        self.loads = []
        # the live pricing flags, when this build has them
        self.f_worker_type = supports([self.bins["worker"]], "instance-type")
        self.f_coord_type = supports([self.bins["coordinator"]], "accel-type")
        self.f_status_inst = supports([self.bins["cli"], "status"], "instances") and \
            supports([self.bins["cli"], "status"], "spare-cores")
        self.f_status_rate = supports([self.bins["cli"], "status"], "rate")
        self.f_plan_live = supports([self.bins["cli"], "plan"], "coordinator")

    # ---- data, job, calibration, plan ----
    def dataset(self):
        o = self.o
        # the data root (stoker-worker --data-root) holds the job's dataset
        # folder, photos/ (ImageFolder: a folder per class)
        self.data = os.path.abspath(o.dataset or os.path.join(self.work, "data"))
        self.dsname = "photos"
        self.photos = os.path.join(self.data, self.dsname)
        marker = os.path.join(self.data, ".photos-%d-%s" % (o.photos, o.photo_size))
        if os.path.exists(marker):
            print("== photos: reusing %s (%d photos)" % (self.data, o.photos), flush=True)
            return
        have = all(subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True).stdout.endswith("install ok installed")
                   for p in ("plasma-workspace-wallpapers", "gnome-backgrounds")) \
            if shutil.which("dpkg-query") else False
        if o.test and not have:
            # a test installs nothing: generated JPEGs stand in (speed is not checked)
            print("note: the wallpaper packages are not installed: generated JPEGs "
                  "(stoker-dataset gen) instead of photos", flush=True)
            self.dsname = "imagefolder"  # gen writes DIR/imagefolder/classNNN/
            self.photos = os.path.join(self.data, self.dsname)
            r = subprocess.run([self.bins["dataset"], "gen", "--out", self.data, "--count",
                                str(o.photos), "--classes", "4", "--layout", "imagefolder",
                                "--seed", "3"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=300)
        else:
            print("== photos: scripts/photos.sh %s %d %s" % (self.photos, o.photos,
                                                            o.photo_size), flush=True)
            r = subprocess.run([os.path.join(SRC, "scripts", "photos.sh"), self.photos,
                                str(o.photos), o.photo_size], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=1800)
        if r.returncode != 0:
            raise RuntimeError("making the dataset: %s" % r.stdout[-2000:])
        print("   " + r.stdout.strip().splitlines()[-1], flush=True)
        open(marker, "w").close()

    def job_file(self, epochs, batch=BATCH):
        path = os.path.join(self.work, "job-%d.conf" % epochs)
        with open(path, "w") as f:
            f.write("name = price\nsource = imagefolder\ndataset = %s\npipeline = train\n"
                    "height = %d\nwidth = %d\ndtype = uint8\nlayout = nchw\n"
                    "batch_size = %d\nworld_size = 1\nepochs = %d\nseed = 7\n" %
                    (self.dsname, SIDE, SIDE, batch, epochs))
        return path

    def calibrate(self):
        """stoker-worker --calibrate under a data host's quota: images per
        CPU-second of the job's pipeline."""
        q = netcluster.CpuQuota("%s%d-calibrate" % (netcluster.CG_PREFIX, os.getpid()),
                                DATA_CORES, top=not self.o.test)
        try:
            argv = [netcluster.PYTHON, "-c", netcluster.CGROUP_EXEC, q.path,
                    self.bins["worker"], "--calibrate", self.job_file(1), "--data-root",
                    self.data, "--calibrate-s", "2" if self.o.test else "6"]
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=300)
        finally:
            q.remove()
        m = re.search(r"images_per_cpu_s=([\d.]+)", r.stdout)
        print("== calibration under a %.2f-core quota (%s):\n   %s" %
              (DATA_CORES, "stoker-worker --calibrate JOB --data-root DIR",
               r.stdout.strip()), flush=True)
        if r.returncode != 0 or not m:
            raise RuntimeError("stoker-worker --calibrate failed (%d)" % r.returncode)
        self.cal_build.append(float(m.group(1)))
        self.rate_build = statistics.median(self.cal_build)
        self.calibration = r.stdout.strip()

    def calibrate_serving(self, idx=0):
        """The calibration run: one data host (0.45 core, 1 Gbit/s) serving
        an unthrottled rank that takes batches as fast as they come (no
        step). `stoker status --json` 30% and 80% in gives the worker's
        batches per CPU-second as it serves (batches built over its process
        CPU time between the two: building, gRPC, sending) and the rank's
        receiving cost (CPU-s per GB): the figures the plan is made from."""
        o = self.o
        secs = 3.0 if o.test else 10.0
        guess = DATA_CORES * self.rate_build * 0.7 / BATCH  # batches/s, only sizes the run
        spe = o.photos // BATCH
        epochs = max(2, -(-int(guess * (secs + 3)) // spe))
        work = os.path.join(self.work, "calibration-%d" % idx)
        os.makedirs(work)
        env = self.env()
        job = self.job_file(epochs)
        hosts = [ACCEL, "cpu-1"]
        c = netcluster.Cluster(hosts, SUBNET, work, rates={ACCEL: ACCEL_LINK, "cpu-1": DATA_LINK},
                               cpu_quota={"cpu-1": DATA_CORES}, cpu_top=not o.test,
                               min_burst=MIN_BURST)
        coord = "%s:%d" % (ACCEL, PORT_C)
        procs, snaps = {}, []
        with c:
            procs["coordinator"] = c.spawn(ACCEL, [
                self.bins["coordinator"], "--listen", "0.0.0.0:%d" % PORT_C, "--job", job,
                "--idle-timeout-s", "120"], "coordinator.log", env=env)
            procs["worker"] = c.spawn("cpu-1", [
                self.bins["worker"], "--coordinator", coord, "--listen", "0.0.0.0:%d" % PORT_W,
                "--advertise", "cpu-1:%d" % PORT_W, "--threads", "1", "--data-root",
                self.data], "worker.log", env=env)
            procs["train"] = c.spawn(ACCEL, [
                self.bins["train"], "--coordinator", coord, "--rank", "0", "--world-size", "1",
                "--progress"], "train.log", env=env)
            steps = epochs * spe
            deadline = time.monotonic() + 300
            # two snapshots, 30% and 80% in: the worker's steady rate between them
            marks = [0.3, 0.8]
            while time.monotonic() < deadline and any(p.poll() is None
                                                      for p in procs.values()):
                if marks and procs["train"].poll() is None and \
                        self.progress_done(os.path.join(work, "train.log")) >= steps * marks[0]:
                    snaps.append(self.status(c, coord, work))
                    marks.pop(0)
                time.sleep(0.1)
        ok = all(p.returncode == 0 for p in procs.values())
        check(ok, "calibration run: every process exited 0 (%s)" %
              ", ".join("%s %s" % (n, p.returncode) for n, p in sorted(procs.items())))
        ws = [((st.get("json") or {}).get("workers") or [{}])[0] for st in snaps]
        bpc, recv = 0, None
        if len(ws) == 2:
            dcpu = (ws[1].get("cpu_seconds") or 0) - (ws[0].get("cpu_seconds") or 0)
            dbuilt = (ws[1].get("batches_built") or 0) - (ws[0].get("batches_built") or 0)
            bpc = dbuilt / dcpu if dcpu > 0 and dbuilt > 0 else 0
            recv = snaps[1].get("recv_cpu_s_per_gb")
        got = bpc > 0 and isinstance(recv, (int, float)) and recv > 0
        if not got and o.test:
            # The ctest's run is a few seconds long: on a slow build (ASan)
            # it can end before two heartbeats and a rank report reach the
            # coordinator. The test checks exits, batches and the printed
            # plan, never a figure: plan from the builder's rate and the
            # default receiving cost instead, and say so.
            print("note: the calibration run ended before stoker status had two worker "
                  "heartbeats and a rank report (batches per CPU-second %s, receiving "
                  "cost %s): planning from the builder's %.1f images per CPU-second and "
                  "0.5 CPU-s/GB" % (bpc, recv, self.cal_build[-1]), flush=True)
            bpc, recv = self.cal_build[-1] / BATCH, 0.5
        elif not check(got, "calibration run: stoker status gave the worker's batches per "
                       "CPU-second (%s) and the rank's receiving cost (%s CPU-s/GB)" %
                       (bpc, recv)):
            raise RuntimeError("the calibration run gave no figures")
        self.cal_serve.append((bpc * BATCH, recv))
        self.rate = statistics.median(r for r, _ in self.cal_serve)
        self.recv = statistics.median(c for _, c in self.cal_serve)
        print("== calibration run (a data host of %.2f core serving an unthrottled rank over "
              "1 Gbit/s; stoker status --json 30%% and 80%% in):\n   the worker: %.2f batches "
              "of %d "
              "per CPU-second = %.1f images per CPU-second as served (%.0f%% of the "
              "builder's %.1f); the rank: %.2f CPU-s per GB received" %
              (DATA_CORES, bpc, BATCH, bpc * BATCH, 100 * bpc * BATCH / self.cal_build[-1],
               self.cal_build[-1], recv), flush=True)
        if ok and not o.keep:
            shutil.rmtree(work, ignore_errors=True)

    def env(self):
        env = dict(os.environ, STOKER_TOKEN_FILE=self.token, PYTHONUNBUFFERED="1")
        for k in ("STOKER_COORDINATOR", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(k, None)
        return env

    @staticmethod
    def progress_done(path):
        """Batches the loop's progress lines say it has taken so far."""
        try:
            text = open(path, errors="replace").read()
        except OSError:
            return 0
        m = re.search(r"(\d+) steps/epoch", text)
        seen = PROGRESS.findall(text)
        return int(seen[-1][0]) * int(m.group(1)) + int(seen[-1][1]) if seen and m else 0

    def instances(self):
        self.inst = os.path.join(self.work, "instances.tsv")
        with open(self.inst, "w") as f:
            f.write("# the simulated hosts, priced as whole instances (pricecluster.py)\n"
                    "# name  vcpu  acc  accel_kind  gbit  usd_per_hour  flags\n"
                    "%s  %g  1  sim-25ms  10  37.688  -   # gpu-1: 0.35 core, 10 Gbit/s\n"
                    "%s  %g  0  -  1  3.672  -   # cpu-N: 0.45 core, 1 Gbit/s\n"
                    "%s  %g  0  -  0.25  3.672  -   # cpu-N behind 250 Mbit/s\n" %
                    (ACCEL_TYPE, ACCEL_CORES, DATA_TYPE, DATA_CORES, SLOW_TYPE, DATA_CORES))

    def plan_argv(self, rate, recv=None):
        a = ["plan", "--job", self.job_file(1), "--accel", ACCEL_TYPE, "--accel-count", "1",
             "--compute-ms", str(STEP_MS), "--images-per-cpu-s", "%.1f" % rate,
             "--spare-cores", str(ACCEL_CORES), "--data", "%s,%s" % (DATA_TYPE, SLOW_TYPE),
             "--max-data-hosts", "3", "--instances", self.inst]
        if recv is not None:
            a += ["--recv-cpu-s-per-gb", "%.2f" % recv]
        return a

    def plan_json_of(self, argv):
        rj = subprocess.run(argv + ["--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=60)
        j = json.loads(rj.stdout)
        pred = {}  # shape key -> option
        for opt in j["options"]:
            n, t = opt["data_count"], opt.get("data_type")
            for k, (_, dn, link, _) in SHAPES.items():
                if dn == n and (n == 0 or t == (SLOW_TYPE if link == SLOW_LINK else DATA_TYPE)):
                    if k != "torch":
                        pred.setdefault(k, opt)
        return j, pred

    def plan(self, show=True):
        """The plan from the calibration runs' two figures (the medians;
        printed when show), and the one from the builder's figure alone
        (its predictions shown beside)."""
        argv = [self.bins["cli"]] + self.plan_argv(self.rate, self.recv)
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        shown = ["stoker"] + self.plan_argv(self.rate, self.recv)
        if show:
            print("== the plan, from the calibration runs alone (the medians of %d):\n$ %s\n%s"
                  % (len(self.cal_serve), " ".join(shown).replace(self.work, "$WORK"),
                     r.stdout.rstrip()), flush=True)
            check(r.returncode == 0 and "cheapest $/step:" in r.stdout,
                  "stoker plan printed the plan (exit %d)" % r.returncode)
        self.plan_text = r.stdout
        self.plan_json, self.pred = self.plan_json_of(argv)
        ch = self.plan_json.get("cheapest")
        self.plan_cheapest = self.plan_json["options"][ch] if ch is not None else None
        _, self.pred_build = self.plan_json_of([self.bins["cli"]] +
                                               self.plan_argv(self.rate_build))

    # ---- one run ----
    def run(self, key, idx):
        label, ndata, link, loader = SHAPES[key]
        o = self.o
        pred = self.pred.get(key) or self.pred["hom"]
        guess_ms = pred.get("step_ms") or 100.0
        if key == "torch":
            guess_ms *= 2  # PIL is slower than stoker's decoder; only sizes the run
        if o.test:
            guess_ms += 80  # --verify builds each batch again on 0.35 core
        steps_wanted = int((o.seconds + 3.0) * 1e3 / guess_ms) + 4
        spe = o.photos // BATCH
        epochs = max(1, -(-steps_wanted // spe))
        steps = epochs * spe
        hosts = [ACCEL] + ["cpu-%d" % (i + 1) for i in range(ndata)]
        quota = {h: DATA_CORES for h in hosts[1:]}
        quota[ACCEL] = ACCEL_CORES
        rates = {h: link for h in hosts[1:]}
        rates[ACCEL] = ACCEL_LINK
        work = os.path.join(self.work, "%s-%d" % (key, idx))
        os.makedirs(work)
        env = self.env()
        job = self.job_file(epochs)
        self.loads.append(loadavg())
        res = {"key": key, "idx": idx, "steps": steps}
        # the bench: each host gets its quota even on a loaded machine (the
        # quotas add up to 1.7 cores of 2); --test needs no speed
        c = netcluster.Cluster(hosts, SUBNET, work, rates=rates, cpu_quota=quota,
                               cpu_top=not o.test, min_burst=MIN_BURST)
        procs = {}
        with c:
            if idx == 0 and key == self.o.shapes[0]:
                print("   " + c.describe_links())
                print("   " + c.describe_quotas(), flush=True)
            coord = "%s:%d" % (ACCEL, PORT_C)
            if loader != "torch":
                argv = [self.bins["coordinator"], "--listen", "0.0.0.0:%d" % PORT_C, "--job",
                        job, "--idle-timeout-s", "120"]
                if self.f_coord_type:  # the fleet as a launcher would tell it
                    argv += ["--accel-type", ACCEL_TYPE, "--accel-hosts", "1", "--data-type",
                             SLOW_TYPE if link == SLOW_LINK else DATA_TYPE]
                procs["coordinator"] = c.spawn(ACCEL, argv, "coordinator.log", env=env)
                workers = [ACCEL] if loader == "stoker" else hosts[1:]
                for h in workers:
                    argv = [self.bins["worker"], "--coordinator", coord, "--listen",
                            "0.0.0.0:%d" % PORT_W, "--advertise", "%s:%d" % (h, PORT_W),
                            "--threads", "1", "--data-root", self.data]
                    if self.f_worker_type:
                        argv += ["--instance-type", ACCEL_TYPE if h == ACCEL else
                                 (SLOW_TYPE if link == SLOW_LINK else DATA_TYPE)]
                    procs["worker-" + h] = c.spawn(h, argv, "worker-%s.log" % h, env=env)
                argv = [self.bins["train"], "--coordinator", coord, "--rank", "0",
                        "--world-size", "1", "--step-ms", str(STEP_MS), "--progress"]
                if o.test:
                    argv += ["--verify", "--data-root", self.data]
            else:
                argv = [netcluster.PYTHON, os.path.join(HERE, "torch_loader.py"), self.photos,
                        "--batch", str(BATCH), "--side", str(SIDE), "--steps", str(steps),
                        "--max-seconds", "%g" % (o.seconds + 4), "--step-ms", str(STEP_MS),
                        "--workers", "1"]
            procs["train"] = c.spawn(ACCEL, argv, "train.log", env=env)
            train_log = os.path.join(work, "train.log")
            # stoker status mid-run: after the warm-up, while the loop runs
            deadline = time.monotonic() + 600
            status_done = loader == "torch"
            while time.monotonic() < deadline:
                if all(p.poll() is not None for p in procs.values()):
                    break
                if not status_done and procs["train"].poll() is None:
                    # 40% in: the ranks' and workers' stats have been reported,
                    # and the job outlives the two probes
                    if self.progress_done(train_log) >= max(steps * 2 // 5, 1):
                        res.update(self.status(c, coord, work))
                        # a probe that lost the race with the job's end is no failure
                        res["coord_alive"] = procs["coordinator"].poll() is None
                        status_done = True
                time.sleep(0.1)
            for name, p in procs.items():
                if p.poll() is None:
                    check(False, "%s %d: %s ended within the bound" % (key, idx, name))
            res["cpu"] = {h: c.cpu_stat(h) for h in hosts}
        # down() killed and reaped anything left
        res["exits"] = {n: p.returncode for n, p in procs.items()}
        text = open(os.path.join(work, "train.log"), errors="replace").read()
        ok_exit = all(rc == 0 for rc in res["exits"].values())
        check(ok_exit, "%s run %d: every process exited 0 (%s)" %
              (key, idx + 1, ", ".join("%s %s" % kv for kv in sorted(res["exits"].items()))))
        m = re.search(r"summary rank \d+: batches (\d+) .*?crc_errors (\d+)\s+verify_failures "
                      r"(\d+)(.*?)\s+order_failures (\d+)", text)
        if check(m is not None, "%s run %d: the loop printed its summary" % (key, idx + 1)):
            b, crc, vf, tail, of = m.groups()
            verified = "not verified" not in tail
            what = ("every batch equal to the reference (--verify)" if verified else
                    "crc32c checked, in order (not --verify: %s)" %
                    ("shapes and dtype checked" if loader == "torch" else
                     "the reference build would load the accelerator host"))
            # torch_loader stops at --max-seconds: fewer batches, by design
            want = (0 < int(b) <= steps) if loader == "torch" else int(b) == steps
            check(want and crc == "0" and vf == "0" and of == "0" and
                  (verified or not o.test),
                  "%s run %d: %s of %d batches, %s" % (key, idx + 1, b, steps, what))
        if loader != "torch":
            if "status_rc" not in res:
                print("note: %s run %d: the job ended before stoker status could ask" %
                      (key, idx + 1))
            elif res["status_rc"] != 0 and not res.get("coord_alive", True):
                print("note: %s run %d: the job ended while stoker status asked" %
                      (key, idx + 1))
            else:
                check(res.get("status_rc") == 0,
                      "%s run %d: stoker status answered mid-run" % (key, idx + 1))
        sm = steady_ms(text, skip=1 if o.test else 2)
        res["ms"], res["stall"] = sm if sm else (None, None)
        m = re.search(r"receiving rank \d+: [\d.]+ CPU-s .*?, ([\d.]+) CPU-s per GB", text)
        res["recv_loop"] = float(m.group(1)) if m else None
        res["ok"] = ok_exit
        if fails or o.keep:
            res["work"] = work
        else:
            shutil.rmtree(work, ignore_errors=True)
        print("   %-6s run %d: %s ms/step, stall %s, verdict: %s%s" %
              (key, idx + 1, "%.1f" % res["ms"] if res["ms"] else "?",
               "%.0f%%" % res["stall"] if res["stall"] is not None else "?",
               res.get("verdict", "-"),
               "\n                 purchase: %s" % res["purchase"] if res.get("purchase")
               else ""), flush=True)
        if fails and not o.test:
            self.dump(work)
        return res

    def status(self, c, coord, work):
        """stoker status, text and --json, from inside the accelerator
        host's namespace (not under its quota: an operator's probe)."""
        base = [self.bins["cli"], "status", "--coordinator", coord, "--token-file", self.token]
        if self.f_status_inst:  # priced with the simulated types; gpu-1 spares its quota
            base += ["--instances", self.inst, "--spare-cores", str(ACCEL_CORES)]
        # what a data host serves, from the calibration run (as the offline
        # plan): the rate a type no worker runs yet is priced at
        rates = []
        if self.f_status_rate and self.rate:
            rates = ["--rate", "%s=%.1f" % (DATA_TYPE, self.rate),
                     "--rate", "%s=%.1f" % (SLOW_TYPE, self.rate)]
        base += rates
        out = {}
        r = c.run(ACCEL, base, timeout=30)
        with open(os.path.join(work, "status.txt"), "w") as f:
            f.write(r.stdout + r.stderr)
        out["status_rc"] = r.returncode
        out["status_text"] = r.stdout
        m = re.search(r"^verdict\s+(.*(?:\n {10,}\S.*)*)", r.stdout, re.M)
        out["verdict"] = " ".join(m.group(1).split()) if m else "(no verdict line)"
        m = re.search(r"^purchase\s+(.*(?:\n {10,}\S.*)*)", r.stdout, re.M)
        out["purchase"] = " ".join(m.group(1).split()) if m else None
        rj = c.run(ACCEL, base + ["--json"], timeout=30)
        with open(os.path.join(work, "status.json"), "w") as f:
            f.write(rj.stdout + rj.stderr)
        try:
            j = json.loads(rj.stdout)
            ranks = j.get("ranks") or [{}]
            out["recv_cpu_s_per_gb"] = ranks[0].get("recv_cpu_s_per_gb")
            out["status_step_ms"] = ranks[0].get("step_ms")
            out["verdict_json"] = j.get("verdict")
            out["purchase_json"] = j.get("purchase")
            out["json"] = j
        except ValueError:
            out["status_rc"] = out["status_rc"] or 1
        if self.f_plan_live:  # the same figures as a whole table
            rp = c.run(ACCEL, [self.bins["cli"], "plan", "--coordinator", coord, "--token-file",
                               self.token, "--instances", self.inst, "--spare-cores",
                               str(ACCEL_CORES)] + rates, timeout=30)
            with open(os.path.join(work, "plan-live.txt"), "w") as f:
                f.write(rp.stdout + rp.stderr)
            m = re.search(r"^purchase: (.*)", rp.stdout, re.M)
            out["live_purchase"] = m.group(1) if m else "(exit %d: %s)" % (
                rp.returncode, (rp.stdout + rp.stderr).strip().splitlines()[-1:])
        return out

    def dump(self, work):
        for f in sorted(os.listdir(work)):
            if f.endswith(".log"):
                with open(os.path.join(work, f), errors="replace") as fh:
                    lines = fh.readlines()
                print("---- %s (last 20 of %d lines)" % (f, len(lines)))
                sys.stdout.write("".join(lines[-20:]))

    # ---- the whole bench ----
    def main(self):
        o = self.o
        t0 = time.monotonic()
        print("== pricecluster: %s; %d run(s) per shape, ~%g s of steady state each; "
              "load %.2f" % (cpu_model(), o.runs, o.seconds, loadavg()), flush=True)
        self.dataset()
        self.instances()
        shapes = list(o.shapes)
        if "torch" in shapes:
            r = subprocess.run([netcluster.PYTHON, "-c", "import torch, torchvision"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r.returncode != 0:
                print("note: no torch/torchvision in %s: the PyTorch shape is left out" %
                      netcluster.PYTHON)
                shapes.remove("torch")
        # each round: a calibration, then every shape once; the plan is made
        # from the calibrations' medians (a first one sizes the runs)
        for i in range(o.runs):
            print("== round %d of %d: the calibration, then every shape" % (i + 1, o.runs),
                  flush=True)
            self.calibrate()
            self.calibrate_serving(i)
            if i == 0:
                self.plan(show=False)
            for k in shapes:
                self.results.setdefault(k, []).append(self.run(k, i))
        self.plan()
        self.report(shapes, time.monotonic() - t0)

    def report(self, shapes, secs):
        o = self.o
        med = {}
        for k in shapes:
            ms = [r["ms"] for r in self.results[k] if r["ms"]]
            med[k] = statistics.median(ms) if ms else None
        price = {k: 37.688 + 3.672 * SHAPES[k][1] for k in shapes}
        usd = {k: price[k] * med[k] / 3.6e6 for k in shapes if med[k]}
        hom = usd.get("hom")
        print("\n== results (%s; %d run(s) per shape, the median; load average %.1f..%.1f "
              "over the runs%s)" % (cpu_model(), o.runs, min(self.loads), max(self.loads),
                                    ": a busy machine" if max(self.loads) > 3 else ""))
        print("%-50s %9s %9s %7s %-11s %8s %9s %9s  %s" % (
            "shape", "measured", "predicted", "error", "binds", "$/h", "$/step", "builder",
            "runs (ms)"))
        print("%-50s %9s %9s %7s %-11s %8s %9s %9s" % ("", "ms/step", "ms/step", "", "", "",
                                                      "vs hom.", "only"))
        for k in shapes:
            p = self.pred.get(k) if k != "torch" else None
            pb = self.pred_build.get(k) if k != "torch" else None
            m = med[k]
            err = "%+.1f%%" % (100 * (m - p["step_ms"]) / p["step_ms"]) if m and p else "-"
            vs = "%+.1f%%" % (100 * (usd[k] / hom - 1)) if hom and k in usd and k != "hom" \
                else "-"
            runs = " ".join("%.1f" % r["ms"] if r["ms"] else "?" for r in self.results[k])
            print("%-50s %9s %9s %7s %-11s %8.3f %9s %9s  %s" % (
                SHAPES[k][0], "%.1f" % m if m else "?", "%.1f" % p["step_ms"] if p else "-",
                err, p["binds"] if p else "-", price[k], vs,
                "%.1f" % pb["step_ms"] if pb else "-", runs))
        print("(predicted: `stoker plan` from the calibration runs' two figures; builder "
              "only: from stoker-worker --calibrate's %.1f images per CPU-second and the "
              "default receiving cost)" % self.rate_build)
        print("\nstoker status mid-run (the last run of each shape): verdict, and the "
              "accelerator host's receiving cost (RECV-CPU)")
        for k in shapes:
            r = self.results[k][-1]
            if k == "torch":
                continue
            rc = r.get("recv_cpu_s_per_gb")
            print("  %-8s %s\n%s           receiving: %s CPU-s/GB (status); %s CPU-s/GB over "
                  "the whole run (the loop's summary)" %
                  (k, r.get("verdict", "(not captured)"),
                   "           purchase: %s\n" % r["purchase"] if r.get("purchase") else "",
                   "%.2f" % rc if isinstance(rc, (int, float)) else "-",
                   "%.2f" % r["recv_loop"] if r.get("recv_loop") else "-"))
        if not self.f_status_inst:
            print("  (this build's stoker status takes no --instances: its verdict counts "
                  "cores, not instance types)")
        print("\nstoker plan --coordinator (the last run of each shape, 40% in): its "
              "purchase")
        for k in shapes:
            if k != "torch":
                print("  %-8s %s" % (k, self.results[k][-1].get("live_purchase") or "-"))
        het = [k for k in shapes if SHAPES[k][1] > 0 and k in usd]
        measured_best = min(usd, key=usd.get) if usd else None
        pc = self.plan_cheapest
        pc_key = None
        if pc:
            for k, opt in self.pred.items():
                if opt is pc:
                    pc_key = k
        print("\nthe planner's cheapest: %s (%s)" % (
            pc["shape"] if pc else "none", "shape %s" % pc_key if pc_key else
            "not a measured shape"))
        print("the measured cheapest: %s" % (SHAPES[measured_best][0] if measured_best
                                             else "none"))
        if o.test:
            print("(--test: the loop verified every batch against a reference it built "
                  "itself on the same quota: these speeds mean nothing)")
        if pc_key and measured_best:
            print("planner's cheapest = measured cheapest: %s" %
                  ("yes" if pc_key == measured_best else "NO"))
        if het and hom:
            best = min(het, key=usd.get)
            print("gain of the best heterogeneous shape (%s) over homogeneous: %.0f%% less "
                  "per step (published: %s)" % (SHAPES[best][0], 100 * (1 - usd[best] / hom),
                                                PUBLISHED))
            if "torch" in usd:
                print("   over the PyTorch DataLoader on the same quota: %.0f%% less per step"
                      % (100 * (1 - usd[best] / usd["torch"])))
        print("\nthrottling per host (cgroup cpu.stat of the last run of each shape: "
              "periods throttled / periods)")
        for k in shapes:
            cpu = self.results[k][-1].get("cpu", {})
            print("  %-8s %s" % (k, "  ".join(
                "%s %d/%d" % (h, s.get("nr_throttled", 0), s.get("nr_periods", 0))
                for h, s in sorted(cpu.items()))))
        print("calibration (the median of %d runs): %.1f images per CPU-second as served "
              "(runs: %s), %.2f CPU-s/GB received (%s); the builder alone %.1f (%s)" % (
                  len(self.cal_serve), self.rate,
                  " ".join("%.0f" % r for r, _ in self.cal_serve), self.recv,
                  " ".join("%.2f" % c for _, c in self.cal_serve), self.rate_build,
                  " ".join("%.0f" % r for r in self.cal_build)))
        print("pricecluster: %s in %.0f s" % ("FAILED (%d)" % len(fails) if fails else "done",
                                             secs))


def cpu_model():
    try:
        r = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True, timeout=10)
        m = re.search(r"Model name:\s*(.*)", r.stdout)
        n = os.cpu_count()
        return "%s, %d CPUs" % (m.group(1).strip() if m else "?", n)
    except (OSError, subprocess.SubprocessError):
        return "?"


def main(argv):
    if any(a in ("--help", "-h") for a in argv):
        print(__doc__.strip())
        usage()
        return 0
    try:
        o = parse(argv)
    except ValueError as e:
        return usage(str(e))
    if o.build is not None:
        if not os.path.isdir(o.build):
            return usage("--build %r is not a directory" % o.build)
        scenarios.env_from_build(o.build)
    why = netcluster.check_supported() or netcluster.cpu_quota_supported()
    if why:
        print("SKIP: cannot simulate the priced cluster here: %s" % why)
        return netcluster.SKIP
    if os.environ.get("STOKER_SANITIZED") == "1" and not o.test:
        print("pricecluster.py: a sanitized build measures the sanitizers; use a release "
              "build", file=sys.stderr)
        return 2
    b = Bench(o)
    try:
        b.main()
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
        check(False, "the bench ran: %s: %s" % (type(e).__name__, e))
    finally:
        if fails or o.keep:
            print("work folder kept: %s" % b.work)
        else:
            shutil.rmtree(b.work, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
