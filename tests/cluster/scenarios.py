#!/usr/bin/python3
"""scenarios.py - stoker jobs on a simulated multi-host cluster (netcluster.py).

    scenarios.py SCENARIO [--build DIR] [--bench [--step-ms MS]] [--keep]
    scenarios.py --list

Each scenario builds a cluster of network namespaces (hosts named as the
platform names them: algo-1.. on SageMaker), generates a small real JPEG
dataset that every host sees (the file system is shared, as an FSx/NFS
mount would be), starts `stoker-launch` on every host (the direct-daemons
smoke scenario starts the daemons itself), waits for every host with a
bound, and asserts: every batch equals the reference (stoker-train-loop
--verify, pytorch_train.py --verify) and the launchers' exit codes, and
prints how long each host took to exit beside the launcher's exit rules
(counted from the moment the training command ended on its host, written
by stamp.py; a bounded wait catches a hang):
  - training succeeds: every host exits 0 (how soon after training is printed);
  - training fails on a dnn host: that host exits with the command's code,
    every other host non-zero;
  - a data host that dies does not fail the job; one that starts late waits
    and then serves batches.
It prints the batches and bytes each data host served and the bytes that
crossed each link. Exit 0: passed; 1: failed (with every host's log tail);
77: skipped (no network namespaces here, with the reason).

The binaries come from the environment (set by tests/cluster/CMakeLists.txt):
STOKER_BIN_COORDINATOR, _WORKER, _CLI, _TRAIN_LOOP, _DATASET, STOKER_LAUNCH,
STOKER_EXAMPLES, STOKER_LIB and PYTHONPATH (the Python binding), and
STOKER_SANITIZED=1 for an ASan/UBSan build (smaller jobs; the PyTorch host
then runs the C loop, as python cannot load a sanitized libstoker). The
time limits asserted are the same in every build. By hand, `--build DIR`
fills the unset ones from a build tree and this source tree. `demo` is
not a test: it is what scripts/demo.sh --cluster runs.
"""
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import netcluster  # noqa: E402
import slurmcluster  # noqa: E402
import smplatform  # noqa: E402
from harness import check, fails, say_passes  # noqa: E402

SUCCESS_EXIT_S = 15.0  # launcher exit rule: training succeeded
FAILURE_EXIT_S = 30.0  # launcher exit rule: training failed on a dnn host
SANITIZED = os.environ.get("STOKER_SANITIZED") == "1"
say_passes("ok: ", "FAIL: ")  # every check printed


# variable -> path under a build tree (scenarios.py --build DIR)
BUILD_PATHS = {
    "STOKER_BIN_COORDINATOR": "server/stoker-coordinator",
    "STOKER_BIN_WORKER": "server/stoker-worker",
    "STOKER_BIN_CLI": "server/stoker",
    "STOKER_BIN_TRAIN_LOOP": "examples/stoker-train-loop",
    "STOKER_BIN_DATASET": "tools/stoker-dataset",
    "STOKER_LIB": "client/libstoker.so",
}
SOURCE_PATHS = {
    "STOKER_LAUNCH": "deploy/stoker-launch",
    "STOKER_SBATCH": "deploy/slurm/stoker.sbatch",
    "STOKER_EXAMPLES": "examples",
}


def env_from_build(build):
    """Fill the STOKER_* variables ctest sets from a build tree (unset ones
    only), for runs by hand and scripts/demo.sh."""
    src = os.path.dirname(os.path.dirname(HERE))
    for k, rel in BUILD_PATHS.items():
        os.environ.setdefault(k, os.path.join(os.path.abspath(build), rel))
    for k, rel in SOURCE_PATHS.items():
        os.environ.setdefault(k, os.path.join(src, rel))
    pp = os.path.join(src, "client", "python")
    if pp not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [pp] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def need_env(name):
    v = os.environ.get(name)
    if not v or not os.path.exists(v):
        print("FAIL: %s is not set to an existing path (%r); run through ctest or give "
              "--build DIR" % (name, v))
        sys.exit(1)
    return v


# ---- the job ----------------------------------------------------------------

class Job:
    """A small imagefolder job: real JPEG decode, RandomResizedCrop, flip.
    images: dataset size; the rest are job keys."""

    def __init__(self, images=800, batch_size=16, world_size=2, epochs=2, side=112,
                 dtype="uint8", name="cluster"):
        self.name = name
        self.images, self.batch_size, self.world_size = images, batch_size, world_size
        self.epochs, self.side, self.dtype = epochs, side, dtype

    def text(self):
        return ("name = %s\nsource = imagefolder\ndataset = imagefolder\npipeline = train\n"
                "height = %d\nwidth = %d\ndtype = %s\nlayout = nchw\nbatch_size = %d\n"
                "world_size = %d\nepochs = %d\nseed = 7\n" %
                (self.name, self.side, self.side, self.dtype, self.batch_size,
                 self.world_size, self.epochs))

    def steps_per_rank(self):
        return self.epochs * (self.images // (self.world_size * self.batch_size))

    def batch_bytes(self):
        elem = 4 if self.dtype == "float32" else 1
        return self.batch_size * 3 * self.side * self.side * elem


# ---- one run ------------------------------------------------------------------

class Run:
    """The cluster, the dataset and the bookkeeping of one scenario."""

    def __init__(self, name, data_hosts, dnn_hosts, job, subnet, rates=None, rate="1gbit",
                 keep=False):
        self.name, self.job, self.keep = name, job, keep
        self.data_hosts, self.dnn_hosts = list(data_hosts), list(dnn_hosts)
        self.bins = {
            "stoker-coordinator": need_env("STOKER_BIN_COORDINATOR"),
            "stoker-worker": need_env("STOKER_BIN_WORKER"),
            "stoker": need_env("STOKER_BIN_CLI"),
            "stoker-train-loop": need_env("STOKER_BIN_TRAIN_LOOP"),
            "stoker-dataset": need_env("STOKER_BIN_DATASET"),
        }
        self.launch = os.environ.get("STOKER_LAUNCH", "")
        self.work = tempfile.mkdtemp(prefix="stoker-cluster-%s-" % name)
        # one bin dir for the launcher's --bin-dir (the binaries live in
        # several build folders)
        self.bin_dir = os.path.join(self.work, "bin")
        os.makedirs(self.bin_dir)
        for n, p in self.bins.items():
            os.symlink(p, os.path.join(self.bin_dir, n))
        self.data = os.path.join(self.work, "data")
        # The hosts talk over 10.77.x addresses: beyond loopback, so every
        # process shares a bearer token (protected mode refuses them
        # otherwise), as a real deployment would.
        self.token_file = os.path.join(self.work, "token")
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (os.urandom(16).hex() + "\n").encode())
        os.close(fd)
        self.cluster = netcluster.Cluster(self.data_hosts + self.dnn_hosts, subnet,
                                          self.work, rate=rate, rates=rates)
        self.procs = {}  # host -> Popen (the launcher, or the main daemon)
        self.ended = {}  # host -> time.time() it exited
        self.t0 = None

    def __enter__(self):
        try:
            self.cluster.up()
        except Exception:
            shutil.rmtree(self.work, ignore_errors=True)
            raise
        print("== %s: hosts %s (data) + %s (dnn), work dir %s" %
              (self.name, ",".join(self.data_hosts), ",".join(self.dnn_hosts), self.work))
        print("   " + self.cluster.describe_links(), flush=True)
        return self

    def __exit__(self, *exc):
        self.cluster.down()
        if fails or exc[0] is not None:
            self.dump_logs()
        if fails or exc[0] is not None or self.keep:
            print("logs kept in %s" % self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)
        return False

    def dump_logs(self):
        for f in sorted(os.listdir(self.work)):
            if f.endswith(".log"):
                with open(os.path.join(self.work, f), errors="replace") as fh:
                    lines = fh.readlines()
                print("---- %s (last 25 of %d lines)" % (f, len(lines)))
                sys.stdout.write("".join(lines[-25:]))

    def env(self, extra=None):
        """A clean environment: no launcher or Slurm variables leak in."""
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "OMPI_", "STOKER_COORDINATOR", "STOKER_RESOURCE"))
             and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "NNODES",
                           "MASTER_ADDR", "MASTER_PORT")}
        e["PYTHONUNBUFFERED"] = "1"
        e["STOKER_TOKEN_FILE"] = self.token_file  # daemons and clients started directly
        e.update(extra or {})
        return e

    def make_dataset(self, sides=(96, 160)):
        """The job's JPEGs (longer side in `sides`; None: the generator's
        ImageNet-like default) and job file under the work folder."""
        argv = [self.bins["stoker-dataset"], "gen", "--out", self.data, "--count",
                str(self.job.images), "--classes", "10", "--layout", "imagefolder", "--seed", "3"]
        if sides:
            argv += ["--min-side", str(sides[0]), "--max-side", str(sides[1])]
        r = subprocess.run(argv,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise RuntimeError("stoker-dataset gen: %s" % r.stdout)
        self.job_file = os.path.join(self.work, "job.conf")
        with open(self.job_file, "w") as f:
            f.write(self.job.text())

    # ---- starting things ----
    def train_loop(self, step_ms=0, progress=False, verify=True):
        argv = [self.bins["stoker-train-loop"], "--step-ms", str(step_ms)]
        if verify:
            argv += ["--verify", "--data-root", self.data]
        if progress:
            argv.append("--progress")
        return argv

    def pytorch(self):
        """The PyTorch example over the whole job, every batch verified."""
        ex = os.path.join(need_env("STOKER_EXAMPLES"), "pytorch_train.py")
        return ["/usr/bin/python3", ex, "--steps", "0", "--verify", "--data-root", self.data]

    def start_launcher(self, host, backend_args, train=None, env=None, fail_after=None,
                       fail_code=42, stamp=True, auth=None):
        """stoker-launch on `host`; on dnn hosts the training command runs
        under stamp.py, which records when (and how) it ended. auth: the
        launcher's credential options (default --token-file, the shared
        token); with auth, no token reaches it through its environment."""
        if not self.launch or not os.path.exists(self.launch):
            check(False, "the launcher exists (STOKER_LAUNCH=%r)" % self.launch)
            raise SystemExit(1)
        argv = [netcluster.PYTHON, self.launch] + backend_args + [
            "--job", self.job_file, "--data-root", self.data, "--bin-dir", self.bin_dir,
            "--wait-coordinator-s", "60"] + (
                auth if auth is not None else ["--token-file", self.token_file]) + ["--"]
        if host in self.dnn_hosts:
            wrap = [netcluster.PYTHON, os.path.join(HERE, "stamp.py"), self.stamp_path(host)]
            if fail_after is not None:
                wrap += ["--fail-after", str(fail_after), "--fail-code", str(fail_code)]
            argv += wrap + ["--"] + (train or self.train_loop())
        else:
            argv += ["true"]  # data hosts never run it
        if self.t0 is None:
            self.t0 = time.time()
        e = self.env(env)
        if auth is not None:
            e.pop("STOKER_TOKEN_FILE", None)
        p = self.cluster.spawn(host, argv, "%s.log" % host, env=e)
        self.procs[host] = p
        return p

    def stamp_path(self, host):
        return os.path.join(self.work, "%s.stamp" % host)

    def stamp(self, host):
        """(exit code, time.time()) of the training command on host, or None."""
        try:
            with open(self.stamp_path(host)) as f:
                rc, t = f.read().split()
            return int(rc), float(t)
        except (OSError, ValueError):
            return None

    # ---- waiting ----
    def poll(self):
        for h, p in self.procs.items():
            if h not in self.ended and p.poll() is not None:
                self.ended[h] = time.time()

    def wait_all(self, timeout):
        """Wait (bounded) until every started process has exited; True when
        all did. Records each exit time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if len(self.ended) == len(self.procs):
                return True
            time.sleep(0.05)
        self.poll()
        left = sorted(set(self.procs) - set(self.ended))
        check(False, "every host exited within %g s (still running: %s)" % (timeout, left))
        return False

    def wait_for(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            self.poll()
            time.sleep(0.1)
        return check(False, "%s within %g s" % (what, timeout))

    def log(self, host):
        with open(os.path.join(self.work, "%s.log" % host), errors="replace") as f:
            return f.read()

    # ---- assertions ----
    def expect_exits(self, codes, limit, since):
        """codes: {host: expected code, or 'nonzero'}: each host's exit code
        is checked; how long after `since` each exited is printed beside the
        launcher's rule (`limit` s), not asserted: wait_all bounds a hang,
        and a loaded host must not fail a correct run."""
        for h, want in codes.items():
            rc = self.procs[h].returncode
            if want == "nonzero":
                check(rc not in (None, 0), "%s's launcher exited non-zero (%s)" % (h, rc))
            else:
                check(rc == want, "%s's launcher exited %s (want %s)" % (h, rc, want))
            if h in self.ended:
                dt = self.ended[h] - since
                print("note: %s exited %.1f s after training ended (the launcher's rule: "
                      "%g s)" % (h, dt, limit))

    def check_train_loop(self, host, steps=None, log=None):
        """stoker-train-loop's summary on host (in log NAME.log, default the
        host's): all steps, all verified. Returns its fields (dict) or None."""
        steps = self.job.steps_per_rank() if steps is None else steps
        m = re.search(r"summary rank (\d+): batches (\d+) .*?([\d.]+) batches/s .*?stall "
                      r"([\d.]+)%.*?reissued (\d+) .*?verify_failures (\d+)(.*)",
                      self.log(log or host))
        if not check(m is not None, "%s: stoker-train-loop printed its summary" % host):
            return None
        rank, batches, bps, stall, reissued, vf, tail = m.groups()
        check(int(batches) == steps and int(vf) == 0 and "not verified" not in tail,
              "%s (rank %s): %s of %d batches, every one equal to the reference "
              "(verify_failures %s)" % (host, rank, batches, steps, vf))
        return {"rank": int(rank), "batches": int(batches), "batches_per_s": float(bps),
                "stall": float(stall), "reissued": int(reissued)}

    def check_pytorch(self, host):
        text = self.log(host)
        m = re.search(r"verified (\d+) batches against the reference: (\d+) differ", text)
        steps = self.job.steps_per_rank()
        check(m is not None and int(m.group(1)) == steps and m.group(2) == "0",
              "%s: pytorch_train.py verified %s of %d batches, %s differ" %
              (host, m.group(1) if m else "?", steps, m.group(2) if m else "?"))
        check(re.search(r"^(\[rank \d+\] )?OK$", text, re.M) is not None,
              "%s: pytorch_train.py says OK (loss decreased, resume matched)" % host)
        m = re.search(r"input stall ([\d.]+)%", text)
        return float(m.group(1)) if m else None

    def served(self):
        """{data host: (batches built, bytes sent)} from each worker's exit
        line; a host without one (killed) maps to None."""
        out = {}
        for h in self.data_hosts:
            m = re.search(r"exiting \(code \d+\): (\d+) batches built, (\d+) bytes sent",
                          self.log(h))
            out[h] = (int(m.group(1)), int(m.group(2))) if m else None
        return out

    link_base = {}  # host -> (tx, rx) not to count (the bench's baseline)

    def report(self, duration=None):
        """Print which host served how much, and the bytes on each link."""
        served = self.served()
        total = sum(v[0] for v in served.values() if v) or 1
        print("== served (from each worker's exit line) and bytes per link "
              "(eth0 statistics):")
        for h in self.data_hosts + self.dnn_hosts:
            tx, rx = self.cluster.link_bytes(h)
            btx, brx = self.link_base.get(h, (0, 0))
            tx, rx = tx - btx, rx - brx
            s = served.get(h)
            what = ""
            if h in served:
                if s:
                    what = "%5d batches (%4.1f%%) %8.1f MB" % (s[0], 100.0 * s[0] / total,
                                                               s[1] / 1e6)
                    if duration:
                        what += "  %6.1f batches/s" % (s[0] / duration)
                else:
                    what = "(no exit line: killed)"
            if duration:
                what += "  link %5.1f MB/s out, %5.1f in" % (tx / 1e6 / duration,
                                                            rx / 1e6 / duration)
            print("   %-8s %-6s link %-8s tx %8.1f MB  rx %8.1f MB  %s" %
                  (h, "data" if h in self.data_hosts else "dnn", self.cluster.hosts[h].rate,
                   tx / 1e6, rx / 1e6, what))
        return served


# ---- scenarios ------------------------------------------------------------------

def sm_config(path, current, data, dnn):
    """A SageMaker resourceconfig.json for `current` (the fields the
    platform writes for a heterogeneous cluster)."""
    groups = [("data_group", "ml.c5.2xlarge", data), ("dnn_group", "ml.p4d.24xlarge", dnn)]
    cur = [g for g in groups if current in g[2]][0]
    cfg = {"current_host": current, "current_instance_type": cur[1],
           "current_group_name": cur[0], "hosts": sorted(data + dnn),
           "instance_groups": [{"instance_group_name": n, "instance_type": t,
                                "hosts": list(h)} for n, t, h in groups],
           "network_interface_name": "eth0"}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return path


def sagemaker_env(r, host):
    return {"STOKER_RESOURCE_CONFIG": sm_config(
        os.path.join(r.work, "%s.resourceconfig.json" % host), host, r.data_hosts,
        r.dnn_hosts)}


# raw TCP across one shaped link: the baseline the bench prints beside
# stoker's own rate (receiver: MB/s from its first byte to its last)
TCP_RECV = ("import socket, time\n"
            "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('0.0.0.0', 7999)); s.listen(1); s.settimeout(30)\n"
            "c, _ = s.accept(); c.settimeout(30); n = 0; t0 = None\n"
            "while True:\n"
            "    b = c.recv(1 << 20)\n"
            "    if not b: break\n"
            "    if t0 is None: t0 = time.monotonic()\n"
            "    n += len(b)\n"
            "print('raw_tcp_bytes %d seconds %.4f' % (n, time.monotonic() - t0))\n")
TCP_SEND = ("import socket, sys, time\n"
            "for i in range(100):\n"
            "    try: s = socket.create_connection((sys.argv[1], 7999), timeout=30); break\n"
            "    except OSError: time.sleep(0.05)\n"
            "buf = b'x' * (4 << 20)\n"
            "for i in range(int(sys.argv[2]) // len(buf)): s.sendall(buf)\n"
            "s.close()\n")


def raw_tcp(r, src, dst, nbytes=200 << 20):
    """MB/s of one plain TCP stream src -> dst over the shaped links."""
    rx = r.cluster.spawn(dst, [netcluster.PYTHON, "-c", TCP_RECV], "tcp-recv.log")
    tx = r.cluster.spawn(src, [netcluster.PYTHON, "-c", TCP_SEND, dst, str(nbytes)],
                         "tcp-send.log")
    try:
        tx.wait(timeout=60)
        rx.wait(timeout=30)
    except Exception:
        check(False, "raw TCP %s -> %s finished" % (src, dst))
        return None
    m = re.search(r"raw_tcp_bytes (\d+) seconds ([\d.]+)", r.log("tcp-recv"))
    if not check(m is not None and int(m.group(1)) > 0, "raw TCP %s -> %s measured" %
                 (src, dst)):
        return None
    return int(m.group(1)) / float(m.group(2)) / 1e6


def success_end(r):
    """The moment training ended on the last dnn host (stamp files)."""
    stamps = [r.stamp(h) for h in r.dnn_hosts]
    if not check(all(s is not None for s in stamps),
                 "every dnn host's training command ended (stamp written)"):
        return time.time()
    check(all(s[0] == 0 for s in stamps),
          "every training command exited 0 (%s)" % [s[0] for s in stamps])
    return max(s[1] for s in stamps)


def sc_smoke(args):
    """Direct daemons, no launcher: the coordinator on algo-3, a worker on
    algo-1 and algo-2, a training rank on algo-3 and algo-4; names resolve
    per host, batches cross the shaped links."""
    job = Job(epochs=2)
    with Run("smoke", ["algo-1", "algo-2"], ["algo-3", "algo-4"], job, subnet=31,
             keep=args.keep) as r:
        r.make_dataset()
        c = r.cluster
        res = c.run("algo-1", ["getent", "hosts", "algo-3"])
        check(res.returncode == 0 and res.stdout.split()[0] == c.hosts["algo-3"].addr,
              "algo-1 resolves algo-3 to %s (%s)" % (c.hosts["algo-3"].addr,
                                                     res.stdout.strip()))
        p = c.spawn("algo-4", [netcluster.PYTHON, "-c",
                               "import socket; print(socket.gethostname())"], "hostname.log")
        p.wait(timeout=20)
        check(r.log("hostname").strip() == "algo-4",
              "processes on algo-4 see the host name algo-4 (%r)" % r.log("hostname").strip())
        r.procs["algo-3"] = c.spawn(
            "algo-3", [r.bins["stoker-coordinator"], "--listen", "0.0.0.0:7070", "--job",
                       r.job_file, "--idle-timeout-s", "120"], "algo-3.log",
            env=r.env())
        for h in r.data_hosts:
            r.procs[h] = c.spawn(
                h, [r.bins["stoker-worker"], "--coordinator", "algo-3:7070", "--listen",
                    "0.0.0.0:7071", "--advertise", "%s:7071" % h, "--threads", "1",
                    "--data-root", r.data], "%s.log" % h, env=r.env())
        for rank, h in enumerate(r.dnn_hosts):
            name = "rank0" if h == "algo-3" else h  # algo-3.log is the coordinator's
            r.procs[name] = c.spawn(
                h, r.train_loop(step_ms=10) + ["--coordinator", "algo-3:7070", "--rank",
                                                str(rank), "--world-size", "2"],
                "%s.log" % name, env=r.env())
        r.wait_all(60)
        for name, p in r.procs.items():
            check(p.returncode == 0, "%s exited 0 (%s)" % (name, p.returncode))
        r.check_train_loop("algo-3", log="rank0")
        r.check_train_loop("algo-4")
        served = r.report()
        for h in r.data_hosts:
            tx, _ = c.link_bytes(h)
            check(served[h] is not None and served[h][0] > 0 and tx >= served[h][1],
                  "%s served batches across its link (%s batches, %.1f MB on eth0)" %
                  (h, served[h] and served[h][0], tx / 1e6))


def sc_sagemaker(args):
    """2 data + 2 dnn hosts, SageMaker backend: the C loop on algo-3, the
    PyTorch example on algo-4 (unless sanitized). --bench [--step-ms MS]:
    a bigger job, unverified C loops on both dnn hosts (a simulated step
    of MS, default 0): the figures of docs/benchmarks.md."""
    bench = args.bench
    if bench:
        job = Job(images=1600, epochs=12, side=160)
    else:
        job = Job(images=800, epochs=2 if SANITIZED else 4)
    with Run("sagemaker", ["algo-1", "algo-2"], ["algo-3", "algo-4"], job, subnet=32,
             keep=args.keep) as r:
        r.make_dataset()
        use_torch = not SANITIZED and not bench
        if bench:
            before = {h: r.cluster.link_bytes(h) for h in r.data_hosts + r.dnn_hosts}
            mbs = raw_tcp(r, "algo-1", "algo-3")
            if mbs:
                print("   baseline: one raw TCP stream algo-1 -> algo-3: %.1f MB/s (%.0f "
                      "Mbit/s)" % (mbs, mbs * 8), flush=True)
            r.link_base = {h: r.cluster.link_bytes(h) for h in before}
        for h in r.data_hosts + r.dnn_hosts:
            train = r.train_loop(step_ms=args.step_ms if bench else 20, verify=not bench,
                                 progress=(h == "algo-3"))
            if h == "algo-4" and use_torch:
                train = r.pytorch()
            r.start_launcher(h, ["--backend", "sagemaker"], train=train,
                             env=sagemaker_env(r, h))
        if not use_torch and not bench:
            print("note: sanitized build: algo-4 runs stoker-train-loop, not the PyTorch "
                  "example (python cannot load a sanitized libstoker)")
        r.wait_all(150)
        end = success_end(r)
        r.expect_exits({h: 0 for h in r.procs}, SUCCESS_EXIT_S, end)
        dur = end - r.t0
        stalls, window = {}, 0.0
        for h in r.dnn_hosts:
            if h == "algo-4" and use_torch:
                stalls[h] = r.check_pytorch(h)
            elif bench:
                m = re.search(r"summary rank (\d+): batches (\d+) .*? ([\d.]+) batches/s .*?"
                              r"stall ([\d.]+)%", r.log(h))
                check(m is not None and int(m.group(2)) == job.steps_per_rank(),
                      "%s consumed every batch" % h)
                if m:
                    stalls[h] = "%s%% (rank %s: %s batches/s)" % (m.group(4), m.group(1),
                                                                  m.group(3))
                    # the ranks' own clocks: from the join to the last batch
                    window = max(window, int(m.group(2)) / float(m.group(3)))
            else:
                s = r.check_train_loop(h)
                stalls[h] = s and s["stall"]
        served = r.report(duration=window or dur)
        for h in r.data_hosts:
            check(served[h] is not None and served[h][0] > 0, "%s served batches" % h)
        if bench:
            print("   (batches/s per data host over %.1f s, the longer rank's time from its "
                  "join to its last batch; simulated step %d ms)" % (window, args.step_ms))
        for h in r.dnn_hosts:
            v = stalls[h]
            print("   %s input stall %s" % (h, v if isinstance(v, str) else
                                             "?" if v is None else "%.1f%%" % v))
        print("job: %d images %dx%d %s, batch %d, 2 ranks x %d steps; %.1f s from launch to "
              "the end of training" % (job.images, job.side, job.side, job.dtype,
                                        job.batch_size, job.steps_per_rank(), dur))


def sc_data_kill(args):
    """A data host dies mid-epoch (everything in its namespace stopped for
    1 s, so what it was asked for hangs, then SIGKILLed): the job carries
    on on the other, every rank still verifies every step, every host that
    is left exits 0."""
    job = Job(images=800, epochs=3 if SANITIZED else 4)
    step_ms = 60
    with Run("data_kill", ["algo-1", "algo-2"], ["algo-3", "algo-4"], job, subnet=33,
             keep=args.keep) as r:
        r.make_dataset()
        for h in r.data_hosts + r.dnn_hosts:
            r.start_launcher(h, ["--backend", "sagemaker"],
                             train=r.train_loop(step_ms=step_ms, progress=True),
                             env=sagemaker_env(r, h))
        total = job.steps_per_rank()

        per = job.images // (job.world_size * job.batch_size)

        def where():  # the (epoch, step) each rank's progress line last said
            out = []
            for h in r.dnn_hosts:
                m = re.findall(r"rank \d+: epoch (\d+) step (\d+)", r.log(h))
                out.append((int(m[-1][0]), int(m[-1][1])) if m else (0, 0))
            return out

        # past a third of the job and inside an epoch (not at its boundary;
        # a progress line comes once a second, so ask for little more)
        r.wait_for(lambda: all(e * per + s >= total // 3 and 0 < s < per
                               for e, s in where()), 60,
                   "both ranks a third into the job, mid-epoch")
        check(all(r.stamp(h) is None for h in r.dnn_hosts), "training still runs at the kill")
        print("killing algo-1 with the ranks at (epoch, step) %s" % where(), flush=True)
        tx_before = r.cluster.link_bytes("algo-2")[0]
        tx_victim = r.cluster.link_bytes("algo-1")[0]
        check(tx_victim > job.batch_bytes(), "algo-1 had served batches before it died "
              "(%.1f MB)" % (tx_victim / 1e6))
        n = r.cluster.freeze_host("algo-1")
        time.sleep(1.0)  # the ranks keep asking; what algo-1 was asked hangs
        n = r.cluster.kill_host("algo-1")
        print("froze algo-1 for 1 s, then killed it (%d processes)" % n, flush=True)
        r.wait_all(120)
        end = success_end(r)
        r.expect_exits({"algo-2": 0, "algo-3": 0, "algo-4": 0}, SUCCESS_EXIT_S, end)
        check(r.procs["algo-1"].returncode == -9, "algo-1's launcher was killed (%s)" %
              r.procs["algo-1"].returncode)
        reissued = 0
        for h in r.dnn_hosts:
            s = r.check_train_loop(h)
            if s:
                reissued += s["reissued"]
                print("   %s: %d requests re-issued after the kill" % (h, s["reissued"]))
        # Not asserted: the client sends few requests to a worker it saw as
        # slow, so algo-1 may hold none at the kill (tests/integration's
        # test_worker_kill pins that case down on loopback).
        r.report(duration=end - r.t0)
        tx_after = r.cluster.link_bytes("algo-2")[0]
        check(tx_after - tx_before > job.batch_bytes(),
              "algo-2 served after the kill (%.1f MB more)" % ((tx_after - tx_before) / 1e6))


def sc_late_join(args):
    """A data host that starts 3 s before the coordinator's host waits for
    it; one whose launcher starts 10 s after the dnn hosts registers and
    then serves batches."""
    job = Job(images=800, epochs=6)
    step_ms = 110  # 150 steps x 110 ms: the job runs 6 s past the late start
    with Run("late_join", ["algo-1", "algo-2"], ["algo-3", "algo-4"], job, subnet=34,
             keep=args.keep) as r:
        r.make_dataset()
        r.start_launcher("algo-1", ["--backend", "sagemaker"], env=sagemaker_env(r, "algo-1"))
        t_dnn = time.monotonic() + 3
        while time.monotonic() < t_dnn:
            r.poll()
            time.sleep(0.1)
        check("algo-1" not in r.ended and "waiting for the coordinator" in r.log("algo-1"),
              "algo-1, started before any dnn host, waits for the coordinator")
        for h in ["algo-3", "algo-4"]:  # training starts without waiting for algo-2
            r.start_launcher(h, ["--backend", "sagemaker", "--wait-data-hosts-s", "0"],
                             train=r.train_loop(step_ms=step_ms, progress=True),
                             env=sagemaker_env(r, h))
        t_late = time.monotonic() + 10
        while time.monotonic() < t_late:
            r.poll()
            time.sleep(0.1)
        check(all(r.stamp(h) is None for h in r.dnn_hosts),
              "training still runs when algo-2 starts")
        r.start_launcher("algo-2", ["--backend", "sagemaker"], env=sagemaker_env(r, "algo-2"))
        print("started algo-2 10 s late", flush=True)
        r.wait_all(150)
        end = success_end(r)
        r.expect_exits({h: 0 for h in r.procs}, SUCCESS_EXIT_S, end)
        for h in r.dnn_hosts:
            r.check_train_loop(h)
        served = r.report(duration=end - r.t0)
        s = served.get("algo-2")
        check(s is not None and s[0] > 0, "the late host algo-2 served batches (%s)" %
              (s and s[0]))


def sc_train_fail(args):
    """The training command fails on algo-4 (killed mid-run, exit 42): algo-4
    exits 42, algo-3 and both data hosts non-zero."""
    job = Job(images=800, epochs=6)
    with Run("train_fail", ["algo-1", "algo-2"], ["algo-3", "algo-4"], job, subnet=35,
             keep=args.keep) as r:
        r.make_dataset()
        for h in r.data_hosts + r.dnn_hosts:
            r.start_launcher(h, ["--backend", "sagemaker"],
                             train=r.train_loop(step_ms=100, progress=True),
                             env=sagemaker_env(r, h),
                             fail_after=6 if h == "algo-4" else None, fail_code=42)
        r.wait_all(120)
        st = r.stamp("algo-4")
        if not check(st is not None and st[0] == 42, "algo-4's training command failed "
                     "with 42 (%s)" % (st and st[0])):
            return
        check(r.stamp("algo-3") is None or r.stamp("algo-3")[0] != 0,
              "algo-3's training did not complete (stopped by the failure)")
        # non-zero, and the codes stoker-launch --help documents: 4 on a dnn
        # host whose training was stopped, 5 (the worker's "job aborted")
        # on data hosts
        r.expect_exits({"algo-4": 42, "algo-3": 4, "algo-1": 5, "algo-2": 5}, FAILURE_EXIT_S,
                       st[1])
        r.report()


def sc_slow_link(args):
    """Three data hosts, algo-3 behind a link 4x slower than the others; one
    dnn host. The faster hosts must serve most batches. Links are scaled so
    the network, not this machine's 2 shared cores, is the limit: 200 Mbit/s
    and 50 Mbit/s, float32 batches (4x the bytes per decoded image)."""
    job = Job(images=800, world_size=1, epochs=4 if SANITIZED else 6, dtype="float32")
    rates = {"algo-1": "200mbit", "algo-2": "200mbit", "algo-3": "50mbit",
             "algo-4": "1gbit"}
    with Run("slow_link", ["algo-1", "algo-2", "algo-3"], ["algo-4"], job, subnet=36,
             rates=rates, keep=args.keep) as r:
        r.make_dataset()
        for h in r.data_hosts + r.dnn_hosts:
            r.start_launcher(h, ["--backend", "sagemaker"],
                             train=r.train_loop(step_ms=0, progress=True),
                             env=sagemaker_env(r, h))
        r.wait_all(150)
        end = success_end(r)
        r.expect_exits({h: 0 for h in r.procs}, SUCCESS_EXIT_S, end)
        r.check_train_loop("algo-4")
        served = r.report(duration=end - r.t0)
        if not check(all(served[h] for h in r.data_hosts), "every data host's exit line"):
            return
        tot = sum(served[h][0] for h in r.data_hosts)
        fast = served["algo-1"][0] + served["algo-2"][0]
        slow = served["algo-3"][0]
        print("split: fast hosts %d of %d batches (%.0f%%), slow host %d (%.0f%%)" %
              (fast, tot, 100.0 * fast / tot, slow, 100.0 * slow / tot))
        check(fast >= 0.7 * tot, "the two fast hosts served at least 70%% of the batches "
              "(%.0f%%; an even split would be 67%%, the link ratio predicts 89%%)" %
              (100.0 * fast / tot))
        # Under sanitizers the daemons' CPU, not the links, sets the pace and
        # the split comes nearer even (20.x% seen once): a looser bound there.
        most = 0.25 if SANITIZED else 0.2
        check(slow <= most * tot, "the slow host served at most %.0f%% of the batches (%.0f%%)"
              % (100 * most, 100.0 * slow / tot))


def sc_slurm(args):
    """The Slurm backend from a faked heterogeneous-job environment:
    component 0 = cpu-[1-2] (data), component 1 = gpu-[1-2] (training).
    The variables are those real Slurm 22.05 gives a task of a
    one-component step of a heterogeneous job (`srun --het-group=N`, as
    deploy/slurm/stoker.sbatch runs; the slurm_* scenarios run it under
    real Slurm): the job's node lists per component, the step's own node
    list, node and task ids counted within the step."""
    job = Job(images=800, epochs=2)
    data, dnn = ["cpu-1", "cpu-2"], ["gpu-1", "gpu-2"]
    with Run("slurm", data, dnn, job, subnet=37, keep=args.keep) as r:
        r.make_dataset()
        for i, h in enumerate(data + dnn):
            comp = 0 if h in data else 1
            env = {"SLURM_JOB_ID": str(4242 + comp), "SLURM_JOB_ID_HET_GROUP_0": "4242",
                   "SLURM_JOB_ID_HET_GROUP_1": "4243",
                   "SLURM_JOB_NODELIST": ["cpu-[1-2]", "gpu-[1-2]"][comp],
                   "SLURM_JOB_NODELIST_HET_GROUP_0": "cpu-[1-2]",
                   "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu-[1-2]",
                   "SLURM_HET_SIZE": "2", "SLURMD_NODENAME": h, "SLURM_NODEID": str(i % 2),
                   "SLURM_PROCID": str(i % 2), "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                   "SLURM_NNODES": "2", "SLURM_STEP_ID": str(comp)}
            r.start_launcher(h, ["--backend", "slurm", "--port", "7170"],
                             train=r.train_loop(step_ms=20), env=env)
        r.wait_all(120)
        end = success_end(r)
        r.expect_exits({h: 0 for h in r.procs}, SUCCESS_EXIT_S, end)
        ranks = set()
        for h in dnn:
            s = r.check_train_loop(h)
            if s:
                ranks.add(s["rank"])
        check(ranks == {0, 1}, "the launcher's RANK won over SLURM_PROCID (ranks %s)" %
              sorted(ranks))
        served = r.report(duration=end - r.t0)
        for h in data:
            check(served[h] is not None and served[h][0] > 0, "%s served batches" % h)


def sc_hosts(args):
    """The hosts backend: an explicit list, as an SSH/pdsh setup would give."""
    job = Job(images=800, world_size=1, epochs=2)
    data, dnn = ["node-a", "node-b"], ["node-c"]
    with Run("hosts", data, dnn, job, subnet=38, keep=args.keep) as r:
        r.make_dataset()
        for h in data + dnn:
            r.start_launcher(h, ["--backend", "hosts", "--data-hosts", ",".join(data),
                                 "--dnn-hosts", ",".join(dnn), "--current-host", h],
                             train=r.train_loop(step_ms=10))
        r.wait_all(120)
        end = success_end(r)
        r.expect_exits({h: 0 for h in r.procs}, SUCCESS_EXIT_S, end)
        r.check_train_loop("node-c")
        served = r.report(duration=end - r.t0)
        for h in data:
            check(served[h] is not None and served[h][0] > 0, "%s served batches" % h)


def host_holds(r, host, needles):
    """(programs seen, findings) for every process in host's namespace now:
    a finding names a process whose environment, command line or open
    files' paths hold one of needles (bytes)."""
    seen, found = set(), []
    for pid in netcluster.ns_pids(r.cluster.hosts[host].ns):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read()
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read()
            fds = []
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    fds.append(os.readlink("/proc/%d/fd/%s" % (pid, fd)).encode())
                except OSError:
                    pass
        except OSError:
            continue  # it exited meanwhile
        args = cmd.split(b"\0")
        # the program: past the wrappers (ip netns exec, unshare, python -c)
        prog = next((os.path.basename(a).decode(errors="replace") for a in args
                     if os.path.basename(a).startswith(b"stoker")), "?")
        seen.add(prog)
        for what, data in (("environment", env), ("command line", cmd),
                           ("open files", b"\n".join(fds))):
            for n in needles:
                if n in data:
                    found.append("%s pid %d: its %s holds %r" % (prog, pid, what, n))
    return seen, found


def sc_roles(args):
    """Role tokens: data hosts are given worker.token alone and never hold
    the client token; the job ends and every host exits 0."""
    job = Job(images=800, world_size=2, epochs=2)
    data, dnn = ["node-a", "node-b"], ["node-c", "node-d"]
    with Run("roles", data, dnn, job, subnet=39, keep=args.keep) as r:
        r.make_dataset()
        secrets = {n: os.urandom(16).hex() for n in ("worker", "client", "admin")}
        # what each host is given: the coordinator's host every token, the
        # other dnn host client.token, each data host worker.token
        given = {"node-c": ("worker", "client", "admin"), "node-d": ("client",),
                 "node-a": ("worker",), "node-b": ("worker",)}
        dirs = {}
        for h, names in given.items():
            dirs[h] = os.path.join(r.work, "tokens-" + h)
            os.mkdir(dirs[h], 0o700)
            for n in names:
                fd = os.open(os.path.join(dirs[h], n + ".token"),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, (secrets[n] + "\n").encode())
                os.close(fd)
        for h in data + dnn:
            r.start_launcher(h, ["--backend", "hosts", "--data-hosts", ",".join(data),
                                 "--dnn-hosts", ",".join(dnn), "--current-host", h],
                             train=r.train_loop(step_ms=10), auth=["--role-tokens", dirs[h]])
        # While the job runs, sample every process of each data host: none
        # may hold the client (or admin) token, its value or its file.
        needles = [secrets["client"].encode(), secrets["admin"].encode(), b"client.token",
                   b"admin.token"]
        seen, held = {h: set() for h in data}, []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r.poll()
            if all(h in r.ended for h in data) or len(r.ended) == len(r.procs):
                break
            for h in data:
                s, f = host_holds(r, h, needles)
                seen[h] |= s
                held += f
            time.sleep(0.2)
        r.wait_all(120)
        end = success_end(r)
        r.expect_exits({h: 0 for h in r.procs}, SUCCESS_EXIT_S, end)
        for h in dnn:
            r.check_train_loop(h)
        for h in data:
            check({"stoker-launch", "stoker-worker"} <= seen[h],
                  "%s: its launcher and worker were sampled while they ran (%s)" %
                  (h, ", ".join(sorted(seen[h]))))
            check(sorted(os.listdir(dirs[h])) == ["worker.token"],
                  "%s was given worker.token alone" % h)
            check("the coordinator is up" in r.log(h),
                  "%s asked the coordinator's state with the worker token" % h)
        check(not held, "no data host process held the client or admin token: %s" %
              ("; ".join(sorted(set(held))[:6]) or "none"))
        check(all(v not in r.log(h) for h in r.procs for v in secrets.values()),
              "no token in any host's log")
        r.report(duration=end - r.t0)


# ---- a real Slurm cluster ---------------------------------------------------------

class SlurmRun(Run):
    """A real Slurm cluster on the run's hosts (slurmcluster.py): data nodes
    cpu-1, cpu-2 (partition cpu), training node gpu-1 (partition gpu, 8
    counted GPUs), munged and slurmctld on one more host, ctl, which is no
    node. The job is deploy/slurm/stoker.sbatch as it ships, submitted
    with sbatch from ctl: component 0 = the data nodes, component 1 = gpu-1
    with PROCS_PER_HOST=2 training processes (ranks 0 and 1)."""

    DATA, DNN, CTL = ["cpu-1", "cpu-2"], ["gpu-1"], "ctl"

    def __init__(self, name, job, subnet, keep):
        super().__init__(name, self.DATA, self.DNN, job, subnet, keep=keep)
        # the same hosts plus the controller's (Run's own cluster is not up)
        self.cluster = netcluster.Cluster(self.data_hosts + self.dnn_hosts + [self.CTL],
                                          subnet, self.work)
        self.slurm = slurmcluster.Slurm(self.cluster, self.CTL,
                                        {"cpu": self.DATA, "gpu": self.DNN},
                                        gres={h: "gpu:8" for h in self.DNN})
        self.sbatch_file = need_env("STOKER_SBATCH")
        self.job_id = None

    def __enter__(self):
        super().__enter__()
        try:
            t = time.monotonic()
            self.slurm.start(timeout=60)
            print("   slurm: munged + slurmctld on %s, slurmd on %s (%.1f s to idle); "
                  "SLURM_CONF=%s" % (self.CTL, ",".join(self.slurm.nodes),
                                     time.monotonic() - t, self.slurm.conf), flush=True)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def dump_logs(self):
        super().dump_logs()
        if self.job_id:
            p = self.out_path()
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    lines = f.readlines()
                print("---- %s (last 60 of %d lines)" % (os.path.basename(p), len(lines)))
                sys.stdout.write("".join(lines[-60:]))
        print(self.slurm.log_tails(25))

    def out_path(self):
        return os.path.join(self.work, "stoker-%s.out" % self.job_id)

    def out(self):
        try:
            with open(self.out_path(), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def submit(self, step_ms=0, env=None, fail_after=None):
        """sbatch deploy/slurm/stoker.sbatch with the job's variables and
        the training command (stoker-train-loop --verify under stamp.py,
        one stamp per rank; fail_after: each crashes with 42 after that
        many seconds) as its arguments; returns the job id."""
        # STOKER_LAUNCH: the launcher with --bin-dir pinned to this build's
        # binaries (as an install would put them beside it), so an ASan tree
        # never runs another tree's daemons
        wrap = os.path.join(self.bin_dir, "stoker-launch")
        with open(wrap, "w") as f:
            f.write('#!/bin/sh\nexec %s %s --bin-dir %s "$@"\n' %
                    (netcluster.PYTHON, self.launch, self.bin_dir))
        os.chmod(wrap, 0o755)
        e = self.env({"JOB": self.job_file, "DATA_ROOT": self.data, "PROCS_PER_HOST": "2",
                      "PORT": "7180", "STOKER_LAUNCH": wrap,
                      "PATH": self.bin_dir + ":" + os.environ.get("PATH", "/usr/bin:/bin")})
        e.pop("STOKER_TOKEN_FILE")  # the script makes the job's token
        e.update(env or {})
        fail = ["--fail-after", str(fail_after), "--fail-code", "42"] if fail_after else []
        train = ["/bin/sh", "-c", 'py=$1 stamp=$2 path=$3; shift 3; '
                 'exec "$py" "$stamp" "$path.$RANK" "$@"', "sh", netcluster.PYTHON,
                 os.path.join(HERE, "stamp.py"), self.stamp_path("gpu-1")]
        train += fail + ["--"] + self.train_loop(step_ms=step_ms, progress=True)
        self.t0 = time.time()
        self.job_id = self.slurm.sbatch([self.sbatch_file] + train, self.slurm.env(e),
                                        cwd=self.work)
        print("submitted %s: job %s" % (os.path.basename(self.sbatch_file), self.job_id),
              flush=True)
        return self.job_id

    def rank_stamps(self):
        """[(exit code, time) or None] of the training processes, rank 0, 1."""
        out = []
        for rank in (0, 1):
            try:
                with open("%s.%d" % (self.stamp_path("gpu-1"), rank)) as f:
                    rc, t = f.read().split()
                out.append((int(rc), float(t)))
            except (OSError, ValueError):
                out.append(None)
        return out

    def progress(self):
        """{rank: epoch * steps per epoch + step} from the progress lines."""
        per = self.job.images // (self.job.world_size * self.job.batch_size)
        out = {}
        for m in re.finditer(r"rank (\d+): epoch (\d+) step (\d+)", self.out()):
            out[int(m.group(1))] = int(m.group(2)) * per + int(m.group(3))
        return out

    def wait_job(self, timeout):
        comps = self.slurm.wait_job(self.job_id, timeout)
        check(comps is not None, "job %s ended within %g s (states: %s)" %
              (self.job_id, timeout, self.slurm.states(self.job_id)))
        return comps or []

    def stoker_left(self):
        """{host: [program, ...]} of the job processes still running on
        each node (anything but slurmd: slurmstepd, stoker-*)."""
        return {h: sorted(self.slurm.node_programs(h).values())
                for h in self.data_hosts + self.dnn_hosts}

    def wait_nodes_clean(self, timeout):
        """Bounded wait until no stoker process (and no slurmstepd) runs
        on any node; checks it."""
        deadline = time.monotonic() + timeout
        left = self.stoker_left()
        while any(left.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self.stoker_left()
        check(not any("stoker" in p for v in left.values() for p in v),
              "no stoker process left on any node (%s)" %
              ("; ".join("%s: %s" % (h, ",".join(v)) for h, v in left.items() if v) or
               "none"))
        check(not any(left.values()), "no job process (slurmstepd, ...) left on any node")

    def check_ranks(self):
        """Both ranks' summaries in the job output: every step, every batch
        equal to the reference."""
        steps = self.job.steps_per_rank()
        text = self.out()
        ranks = {}
        for m in re.finditer(r"summary rank (\d+): batches (\d+) .*?reissued (\d+) "
                             r".*?verify_failures (\d+)(.*)", text):
            ranks[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                      "not verified" in m.group(5))
        check(sorted(ranks) == [0, 1], "both ranks printed their summary (%s)" % sorted(ranks))
        for rk, (b, reissued, vf, unverified) in sorted(ranks.items()):
            check(b == steps and vf == 0 and not unverified,
                  "rank %d: %d of %d batches, every one equal to the reference "
                  "(verify_failures %d; %d requests re-issued)" % (rk, b, steps, vf, reissued))

    def check_roles(self):
        """Each node's launcher found its role in the real SLURM_* variables."""
        text = self.out()
        for h in self.data_hosts:
            check(re.search(r"stoker-launch\[%s data\]: slurm backend: data hosts cpu-1,cpu-2; "
                            r"dnn hosts gpu-1; this host is a data host" % h, text) is not None,
                  "%s's launcher: a data host, from SLURM_JOB_NODELIST_HET_GROUP_0" % h)
        check(re.search(r"stoker-launch\[gpu-1 dnn coordinator\]: slurm backend: .*this host is "
                        r"dnn host 0/1, ranks 0,1 of 2", text) is not None,
              "gpu-1's launcher: the coordinator and ranks 0,1, from "
              "SLURM_JOB_NODELIST_HET_GROUP_1")

    def jobcomp(self, n, timeout=10):
        """This job's records in the job-completion log, once there are n
        (bounded wait: slurmctld writes them as each component ends)."""
        deadline = time.monotonic() + timeout
        while True:
            recs = [x for x in self.slurm.jobcomp_records()
                    if x.get("HetJobId") == str(self.job_id)]
            if len(recs) >= n or time.monotonic() >= deadline:
                return recs
            time.sleep(0.2)

    def check_completed(self, comps):
        """Every component COMPLETED with exit code 0:0 (scontrol), the same
        in the job-completion log with DerivedExitCode 0:0 (the highest
        exit code of the job's steps), and every task of every step exited
        0 (slurmd logs)."""
        check(len(comps) == 2 and all(c.get("JobState") == "COMPLETED" and
                                      c.get("ExitCode") == "0:0" for c in comps),
              "scontrol show job: both components COMPLETED, ExitCode 0:0 (%s)" %
              ["%s %s %s" % (c.get("JobId"), c.get("JobState"), c.get("ExitCode"))
               for c in comps])
        recs = self.jobcomp(2)
        check(len(recs) == 2 and all(x.get("JobState") == "COMPLETED" and
                                     x.get("ExitCode") == "0:0" and
                                     x.get("DerivedExitCode") == "0:0" for x in recs),
              "job-completion log: both components COMPLETED, ExitCode 0:0, DerivedExitCode "
              "0:0 (%s)" % ["%s %s %s/%s" % (x.get("JobId"), x.get("JobState"),
                                            x.get("ExitCode"), x.get("DerivedExitCode"))
                            for x in recs])
        tasks = self.slurm.task_exits(self.job_id)
        step_nodes = sorted(n for n, st, _, _ in tasks if not st.endswith(".batch"))
        check(step_nodes == sorted(self.data_hosts + self.dnn_hosts) and
              all(c == 0 for _, _, _, c in tasks),
              "every task of every step exited 0, one per node (%s)" %
              ", ".join("%s %s task %d: %d" % t for t in sorted(tasks)))
        return tasks

    def show_steps(self):
        steps = self.slurm.steps()
        print("squeue --steps: %s" % "; ".join(" ".join(x) for x in steps), flush=True)
        return steps

    def show_sacct(self):
        r = self.slurm.cmd(["sacct", "-j", str(self.job_id)])
        print("sacct -j %s: %s" % (self.job_id, (r.stdout + r.stderr).strip() or
                                   "(nothing)"))


def slurm_skip():
    why = slurmcluster.check_supported()
    if why:
        print("SKIP: %s" % why)
        sys.exit(netcluster.SKIP)


def sc_slurm_job(args):
    """Real Slurm: deploy/slurm/stoker.sbatch through sbatch, heterogeneous
    job over cpu-1,cpu-2 (data) and gpu-1 (2 ranks); it ends by itself,
    COMPLETED, every step's task exit 0, every batch verified."""
    slurm_skip()
    job = Job(images=800, epochs=2)
    with SlurmRun("slurm_job", job, subnet=41, keep=args.keep) as r:
        r.make_dataset()
        r.submit(step_ms=20)
        seen = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not r.slurm.ended(r.job_id):
            for st, nodes in r.slurm.steps():
                seen.add("%s on %s" % (st, nodes))
            time.sleep(0.3)
        comps = r.wait_job(150)
        end = r.rank_stamps()
        check(all(x is not None and x[0] == 0 for x in end),
              "both training processes exited 0 (%s)" % end)
        print("squeue --steps while it ran: %s" % ("; ".join(sorted(seen)) or "(none seen)"))
        check(any(x.endswith(" on cpu-[1-2]") and ".batch" not in x for x in seen) and
              any(x.endswith(" on gpu-1") for x in seen),
              "squeue showed a step on the data nodes and one on the training node")
        tasks = r.check_completed(comps)
        r.check_roles()
        r.check_ranks()
        r.show_sacct()
        served = {h: r.cluster.link_bytes(h)[0] for h in r.data_hosts}
        for h in r.data_hosts:
            check(served[h] > job.batch_bytes(), "%s served batches (%.1f MB sent)" %
                  (h, served[h] / 1e6))
        r.wait_nodes_clean(20)
        if all(x is not None for x in end):
            ends = [c.get("EndTime") for c in comps]
            print("job ended %s (scontrol EndTime), training at %s" %
                  (ends, [time.strftime("%H:%M:%S", time.localtime(x[1])) for x in end]))
        print("tasks: %s" % ", ".join("%s %s task %d exit %d" % t for t in sorted(tasks)))


def sc_slurm_cancel(args):
    """Real Slurm: scancel mid-job; the job ends CANCELLED and no stoker
    process (nor slurmstepd) is left on any node."""
    slurm_skip()
    job = Job(images=800, epochs=6)
    with SlurmRun("slurm_cancel", job, subnet=42, keep=args.keep) as r:
        r.make_dataset()
        r.submit(step_ms=100)
        if not r.wait_for(lambda: len(r.progress()) == 2 and min(r.progress().values()) >= 5,
                          90, "both ranks training (5 steps each)"):
            return
        running = r.stoker_left()
        print("running before scancel: %s" % "; ".join("%s: %s" % (h, ",".join(v))
                                                         for h, v in running.items()))
        for h, want in (("cpu-1", "stoker-worker"), ("cpu-2", "stoker-worker"),
                        ("gpu-1", "stoker-coordinator"), ("gpu-1", "stoker-train-loop")):
            check(want in running[h], "%s runs %s before scancel" % (h, want))
        r.show_steps()
        c = r.slurm.cmd(["scancel", str(r.job_id)])
        check(c.returncode == 0, "scancel %s (exit %d %s)" % (r.job_id, c.returncode,
                                                             c.stderr.strip()))
        t = time.monotonic()
        comps = r.wait_job(60)
        check(len(comps) == 2 and all(x.get("JobState") == "CANCELLED" for x in comps),
              "both components CANCELLED (%s)" % [x.get("JobState") for x in comps])
        r.wait_nodes_clean(30)
        print("the nodes were clean %.1f s after scancel (KillWait=5 s)" %
              (time.monotonic() - t))
        st = r.rank_stamps()
        check(all(x is None or x[0] != 0 for x in st),
              "training did not run to its end (%s)" % st)


def sc_slurm_data_kill(args):
    """Real Slurm: cpu-2 is drained and its stoker-worker SIGKILLed
    mid-epoch; the ranks still get every batch (verified), the job ends by
    itself, COMPLETED."""
    slurm_skip()
    job = Job(images=800, epochs=3 if SANITIZED else 4)
    with SlurmRun("slurm_data_kill", job, subnet=43, keep=args.keep) as r:
        r.make_dataset()
        r.submit(step_ms=60)
        total = job.steps_per_rank()
        per = job.images // (job.world_size * job.batch_size)
        if not r.wait_for(lambda: len(r.progress()) == 2 and
                          all(v >= total // 3 and 0 < v % per for v in r.progress().values()),
                          90, "both ranks a third into the job, mid-epoch"):
            return
        check(all(x is None for x in r.rank_stamps()), "training still runs at the kill")
        tx_victim = r.cluster.link_bytes("cpu-2")[0]
        check(tx_victim > job.batch_bytes(), "cpu-2 had served batches before the kill "
              "(%.1f MB)" % (tx_victim / 1e6))
        tx_before = r.cluster.link_bytes("cpu-1")[0]
        # what an administrator does with a failing node: drain it (its
        # running job carries on; nothing new is placed there) ...
        c = r.slurm.cmd(["scontrol", "update", "NodeName=cpu-2", "State=DRAIN",
                         "Reason=stoker test: data node failing"])
        check(c.returncode == 0, "scontrol update NodeName=cpu-2 State=DRAIN (%s)" %
              c.stderr.strip())
        # ... and the failure itself: its worker dies
        victims = [pid for pid, prog in r.slurm.node_programs("cpu-2").items()
                   if prog == "stoker-worker"]
        check(len(victims) == 1, "one stoker-worker on cpu-2 (%s)" % victims)
        for pid in victims:
            os.kill(pid, 9)
        print("drained cpu-2 and SIGKILLed its stoker-worker (pid %s) with the ranks at "
              "steps %s" % (victims, r.progress()), flush=True)
        comps = r.wait_job(150)
        state = r.slurm.cmd(["sinfo", "-h", "-n", "cpu-2", "-o", "%t"]).stdout.strip()
        check(state.startswith("drain"), "cpu-2 is drained after the job (sinfo: %s)" % state)
        st = r.rank_stamps()
        check(all(x is not None and x[0] == 0 for x in st),
              "both training processes exited 0 (%s)" % st)
        r.check_ranks()
        tx_after = r.cluster.link_bytes("cpu-1")[0]
        check(tx_after - tx_before > job.batch_bytes(),
              "cpu-1 served after the kill (%.1f MB more)" % ((tx_after - tx_before) / 1e6))
        # The job's exit code is the training step's: COMPLETED, 0:0; the
        # data step's task on cpu-2 shows the lost worker (the launcher exits
        # with its worker's 137), and so does component 0's DerivedExitCode.
        check(len(comps) == 2 and all(c.get("JobState") == "COMPLETED" and
                                      c.get("ExitCode") == "0:0" for c in comps),
              "scontrol show job: both components COMPLETED, ExitCode 0:0 (%s)" %
              ["%s %s %s" % (c.get("JobId"), c.get("JobState"), c.get("ExitCode"))
               for c in comps])
        tasks = r.slurm.task_exits(r.job_id)
        shown = ", ".join("%s %s task %d: %d" % t for t in sorted(tasks))
        check(sorted((n, c != 0) for n, st, _, c in tasks if not st.endswith(".batch")) ==
              [("cpu-1", False), ("cpu-2", True), ("gpu-1", False)] and
              all(c == 0 for n, st, _, c in tasks if st.endswith(".batch")),
              "cpu-2's data task exited non-zero, every other task 0 (%s)" % shown)
        recs = {x.get("HetJobOffset"): x for x in r.jobcomp(2)}
        d0 = recs.get("0", {}).get("DerivedExitCode")
        check(d0 not in (None, "0:0") and recs.get("1", {}).get("DerivedExitCode") == "0:0",
              "job-completion log: component 0's DerivedExitCode shows the data step's "
              "failure (%s), component 1's is 0:0" % d0)
        r.wait_nodes_clean(20)


def sc_slurm_train_fail(args):
    """Real Slurm: the training processes crash (exit 42) mid-job; the job
    ends FAILED with exit code 42 (the training step's), the data nodes'
    tasks exit 5 (job aborted), nothing is left on any node."""
    slurm_skip()
    job = Job(images=800, epochs=6)
    with SlurmRun("slurm_train_fail", job, subnet=45, keep=args.keep) as r:
        r.make_dataset()
        r.submit(step_ms=100, fail_after=4)
        comps = r.wait_job(120)
        st = r.rank_stamps()
        # each crashes after 4 s; the first to do so makes the launcher stop
        # the other (SIGTERM: 143) if it has not crashed yet itself
        codes = sorted(x[0] for x in st if x is not None)
        check(len(codes) == 2 and codes[0] == 42 and codes[1] in (42, 143),
              "a training process crashed with 42, the other crashed too or was stopped "
              "(%s)" % st)
        check(len(comps) == 2 and all(c.get("JobState") == "FAILED" and
                                      c.get("ExitCode") == "42:0" for c in comps),
              "scontrol show job: both components FAILED, ExitCode 42:0 (%s)" %
              ["%s %s %s" % (c.get("JobId"), c.get("JobState"), c.get("ExitCode"))
               for c in comps])
        tasks = r.slurm.task_exits(r.job_id)
        got = sorted((n, c) for n, st_, _, c in tasks if not st_.endswith(".batch"))
        check(got == [("cpu-1", 5), ("cpu-2", 5), ("gpu-1", 42)],
              "the training task exited 42, the data tasks 5 (the job was aborted): %s" %
              ", ".join("%s %s task %d: %d" % t for t in sorted(tasks)))
        r.wait_nodes_clean(20)


def sc_slurm_roles(args):
    """Real Slurm with role tokens: each node's own token files in a
    node-local folder (STOKER_ROLE_TOKENS); data nodes never hold the
    client or admin token; the job ends COMPLETED, every batch verified."""
    slurm_skip()
    job = Job(images=800, epochs=2)
    with SlurmRun("slurm_roles", job, subnet=44, keep=args.keep) as r:
        r.make_dataset()
        secrets = {n: os.urandom(16).hex() for n in ("worker", "client", "admin")}
        given = {"gpu-1": ("worker", "client", "admin"), "cpu-1": ("worker",),
                 "cpu-2": ("worker",)}
        for h, names in given.items():
            d = os.path.join(r.slurm.node_dir, h, "tokens")
            os.mkdir(d, 0o700)
            for n in names:
                fd = os.open(os.path.join(d, n + ".token"),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, (secrets[n] + "\n").encode())
                os.close(fd)
        r.submit(step_ms=20, env={"STOKER_ROLE_TOKENS": os.path.join(r.slurm.local_dir,
                                                                     "tokens")})
        needles = [secrets["client"].encode(), secrets["admin"].encode(), b"client.token",
                   b"admin.token"]
        seen, held = {h: set() for h in r.data_hosts}, []
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not r.slurm.ended(r.job_id):
            for h in r.data_hosts:
                sn, f = host_holds(r, h, needles)
                seen[h] |= sn
                held += f
            time.sleep(0.2)
        comps = r.wait_job(10)
        r.check_completed(comps)
        r.check_roles()
        r.check_ranks()
        for h in r.data_hosts:
            check({"stoker-launch", "stoker-worker"} <= seen[h],
                  "%s: its launcher and worker were sampled while they ran (%s)" %
                  (h, ", ".join(sorted(seen[h]))))
        check(not held, "no data node process held the client or admin token: %s" %
              ("; ".join(sorted(set(held))[:6]) or "none"))
        check(not [f for f in os.listdir(r.work) if f.startswith(".stoker-token")],
              "no shared token file was made in the submit folder")
        check(all(v not in r.out() for v in secrets.values()), "no token in the job output")
        r.wait_nodes_clean(20)


class Tail:
    """Prints the new lines of some logs that match a pattern (the demo's
    live view)."""

    def __init__(self, run, hosts, pattern):
        self.run, self.pat, self.pos = run, re.compile(pattern), {h: 0 for h in hosts}

    def pump(self):
        for h in self.pos:
            try:
                with open(os.path.join(self.run.work, "%s.log" % h), errors="replace") as f:
                    f.seek(self.pos[h])
                    chunk = f.read()
            except OSError:
                continue
            end = chunk.rfind("\n") + 1  # whole lines only
            self.pos[h] += len(chunk[:end].encode())
            for line in chunk[:end].splitlines():
                if self.pat.search(line):
                    print("   " + line, flush=True)


# ---- SageMaker, as the platform runs a training job (smplatform.py) ---------

def supports_option(binary, option):
    """Does `binary --help` list option?"""
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return re.search(r"(^|\s)%s(\s|=|$)" % re.escape(option), r.stdout + r.stderr,
                     re.M) is not None


@contextlib.contextmanager
def sm_job_run(name, subnet, args, epochs, step_ms, fail_after=None,
               channel_groups=("data_group",)):
    """The published heterogeneous shape, scaled down: data_group of 2 x
    ml.c5.18xlarge (algo-2, algo-3: the channel goes to them only),
    dnn_group of 1 x ml.p4d.24xlarge (algo-1, SM_NUM_GPUS=2: two ranks).
    deploy/sagemaker/entry.sh runs on every host with the platform's files
    and variables; job.conf says epochs = 5 and the stoker_epochs
    hyperparameter says `epochs`, which must win; the train channel goes
    to channel_groups.
    A context manager: (run, platform) while the cluster is up."""
    job = Job(images=800, world_size=2, epochs=epochs)
    job_text = job.text().replace("epochs = %d" % epochs, "epochs = 5").replace(
        "dataset = imagefolder", "dataset = train")
    with Run(name, ["algo-2", "algo-3"], ["algo-1"], job, subnet=subnet, keep=args.keep) as r:
        why = smplatform.supported()
        if why:
            print("SKIP: %s" % why)
            raise SystemExit(netcluster.SKIP)
        r.make_dataset()
        # the image: stoker-launch beside the binaries (deploy/sagemaker/
        # Dockerfile installs it in /opt/stoker/bin; /opt is the host's own
        # here, so this bin folder stands in for it, on PATH)
        shutil.copy(r.launch, os.path.join(r.bin_dir, "stoker-launch"))
        # the reference the ranks verify against, named as the channel (the
        # dnn hosts have no channel: hard links in the shared work dir)
        ref = os.path.join(r.work, "ref")
        shutil.copytree(r.data, os.path.join(ref, "train"), copy_function=os.link)
        loop = [r.bins["stoker-train-loop"], "--step-ms", str(step_ms), "--verify",
                "--data-root", ref, "--progress"]
        stamp = [netcluster.PYTHON, os.path.join(HERE, "stamp.py"),
                 os.path.join(r.work, "algo-1.rank{RANK}.stamp")]
        if fail_after is not None:
            stamp += ["--fail-after", str(fail_after), "--fail-code", "42"]
        sm = smplatform.Platform(
            r.work, [smplatform.Group("data_group", "ml.c5.18xlarge", ["algo-2", "algo-3"]),
                     smplatform.Group("dnn_group", "ml.p4d.24xlarge", ["algo-1"], gpus=2)],
            {"train": (r.data, list(channel_groups))},
            {"epochs": epochs, "lr": 0.1, "stoker_epochs": epochs},
            os.path.join(os.path.dirname(r.launch), "sagemaker"), job_text,
            stamp + ["--"] + loop)
        base = r.env({"PATH": r.bin_dir + os.pathsep + os.environ.get("PATH", ""),
                      # the token as a "secrets" channel would hold it
                      "STOKER_TOKEN_FILE": r.token_file})
        for h in sm.hosts:
            sm.prepare(h)
        if r.t0 is None:
            r.t0 = time.time()
        for h in ["algo-2", "algo-3", "algo-1"]:
            r.procs[h] = sm.start(r.cluster, h, base, "%s.log" % h)
        yield r, sm


def sm_report(r, sm):
    """Print the platform's verdict and every host's failure file."""
    codes = {h: r.procs[h].returncode for h in sm.hosts}
    status, reason = sm.verdict(codes, r.ended)
    print("== SageMaker's view: TrainingJobStatus %s; exit codes %s" %
          (status, "  ".join("%s=%s" % (h, codes[h]) for h in sm.hosts)))
    if reason:
        print("   FailureReason: %s" % reason.strip().replace("\n", "\n                  "))
    for h in sm.hosts:
        f = sm.failure(h)
        if f is not None:
            print("   %s: /opt/ml/output/failure: %s" % (h, f.strip()))
    return status, reason, codes


def sc_sm_job(args):
    """SageMaker as the platform runs it: entry.sh on every host with
    /opt/ml and the SM_* variables; every host exits 0 and the job ends,
    the stoker_ hyperparameter sets the epochs and the others reach
    train.py, the workers serve the channel's folder, the instance types
    reach the daemons (`stoker status --json` while the job runs: 2 x
    ml.c5.18xlarge workers, 1 x ml.p4d.24xlarge training)."""
    epochs = 2
    with sm_job_run("sm_job", 50, args, epochs=epochs, step_ms=50) as (r, sm):
        coord = [r.bins["stoker"], "status", "--coordinator", "algo-1:7070", "--json",
                 "--timeout-ms", "2000", "--token-file", r.token_file]
        typed = supports_option(r.bins["stoker-worker"], "--instance-type") and \
            supports_option(r.bins["stoker-coordinator"], "--accel-type")
        seen = {}

        def fleet():  # the fleet as stoker status reports it, once both registered
            res = r.cluster.run("algo-1", coord)
            try:
                st = json.loads(res.stdout) if res.returncode == 0 else {}
            except ValueError:
                st = {}
            ws = st.get("workers", [])
            if len(ws) == 2:
                seen.update(accel=(st.get("accel_type"), st.get("accel_hosts")),
                            data=st.get("data_type"),
                            workers=sorted(w.get("instance_type") for w in ws))
                return True
            return all(h in r.ended for h in sm.hosts)  # over: said below
        if typed:
            r.wait_for(fleet, 60, "stoker status lists both workers while the job runs")
            check(seen.get("workers") == ["ml.c5.18xlarge"] * 2 and
                  seen.get("accel") == ("ml.p4d.24xlarge", 1) and
                  seen.get("data") == "ml.c5.18xlarge",
                  "stoker status shows the instance types the launcher passed: workers %s, "
                  "training %s, data type %s" % (seen.get("workers"), seen.get("accel"),
                                                 seen.get("data")))
        else:
            print("note: this build's daemons take no instance types: only the launcher's "
                  "note is checked")
        r.wait_all(120)
        ends = [r.stamp("algo-1.rank%d" % k) for k in range(2)]
        check(all(e is not None and e[0] == 0 for e in ends),
              "both ranks' training exited 0 (%s)" % ends)
        end = max([e[1] for e in ends if e] or [time.time()])
        r.expect_exits({h: 0 for h in sm.hosts}, SUCCESS_EXIT_S, end)
        status, reason, codes = sm_report(r, sm)
        check(status == "Completed", "every host exited 0: the job is Completed (%s)" % status)
        for h in sm.hosts:
            check(sm.failure(h) is None, "%s wrote no failure file" % h)
        # every batch of the stoker_epochs epochs (not job.conf's 5), verified
        summaries = re.findall(r"summary rank (\d+): batches (\d+) .*?verify_failures (\d+)",
                               r.log("algo-1"))
        check(sorted(int(x[0]) for x in summaries) == [0, 1] and
              all(int(x[1]) == r.job.steps_per_rank() and x[2] == "0" for x in summaries),
              "ranks 0 and 1 each verified %d batches (%d epochs from the stoker_epochs "
              "hyperparameter; job.conf says 5): %s" % (r.job.steps_per_rank(), epochs,
                                                         summaries))
        for k in range(2):
            try:
                with open(sm.ml("algo-1", "model", "args.%d.json" % k)) as f:
                    got = json.load(f)
            except (OSError, ValueError) as e:
                got = str(e)
            check(got == ["--epochs", str(epochs), "--lr", "0.1"],
                  "train.py (rank %d) got its hyperparameters as arguments, no stoker_ one: "
                  "%s" % (k, got))
        log1 = r.log("algo-1")
        check("hyperparameters (/opt/ml/input/config/hyperparameters.json): --set epochs=%d"
              % epochs in log1, "the coordinator's host read stoker_epochs from "
              "/opt/ml/input/config/hyperparameters.json")
        served = r.report(duration=end - r.t0)
        for h in ("algo-2", "algo-3"):
            lg = r.log(h)
            check(re.search(r"started stoker-worker .*--data-root /opt/ml/input/data( |$)", lg,
                            re.M) is not None,
                  "%s's worker serves /opt/ml/input/data ($SM_CHANNEL_TRAIN's folder)" % h)
            check(served.get(h) is not None and served[h][0] > 0, "%s served batches" % h)
            check("--instance-type ml.c5.18xlarge" in lg or
                  "no --instance-type option" in lg,
                  "%s's worker is told its instance type ml.c5.18xlarge (or the log says "
                  "this stoker-worker cannot take it)" % h)
        check("--accel-type ml.p4d.24xlarge --accel-hosts 1 --data-type ml.c5.18xlarge" in log1
              or "no --accel-type option" in log1,
              "the coordinator is told 1 x ml.p4d.24xlarge (or the log says it cannot take "
              "it)")


def sc_sm_fail(args):
    """SageMaker, a host fails: rank 1's training command on algo-1 crashes
    (exit 42) mid-job: every host exits non-zero, each writes why to its
    /opt/ml/output/failure, and the job's FailureReason names the rank and
    the code."""
    with sm_job_run("sm_fail", 51, args, epochs=6, step_ms=100, fail_after=5) as (r, sm):
        r.wait_all(120)
        ends = [r.stamp("algo-1.rank%d" % k) for k in range(2)]
        check(any(e is not None and e[0] == 42 for e in ends),
              "a training command on algo-1 failed with 42 (%s)" % ends)
        end = min([e[1] for e in ends if e and e[0] == 42] or [time.time()])
        r.expect_exits({"algo-1": 42, "algo-2": 5, "algo-3": 5}, FAILURE_EXIT_S, end)
        status, reason, codes = sm_report(r, sm)
        check(status == "Failed", "the job is Failed (%s)" % status)
        check(re.search(r"training rank \d \(python3\) exited with code 42", reason)
              is not None, "its FailureReason names the rank and the code: %r" % reason)
        f1 = sm.failure("algo-1") or ""
        check("algo-1 (dnn coordinator host) exited 42" in f1,
              "algo-1's failure file says it exited 42: %r" % f1)
        for h in ("algo-2", "algo-3"):
            f = sm.failure(h) or ""
            check("%s (data host) exited 5" % h in f and "exited with code 42" in f,
                  "%s's failure file says the job was aborted and why: %r" % (h, f))
        r.report()


def sc_sm_channel(args):
    """SageMaker, a data host cannot serve: the channel was sent to the
    dnn group instead of the data group. Each data host says so in its
    failure file and ends the job (exit 2), the dnn host exits 4 saying
    why the job ended, within the failure limit; the FailureReason names
    the channel."""
    with sm_job_run("sm_channel", 52, args, epochs=2, step_ms=20,
                    channel_groups=("dnn_group",)) as (r, sm):
        r.wait_all(120)
        r.expect_exits({"algo-1": 4, "algo-2": 2, "algo-3": 2}, FAILURE_EXIT_S,
                       min(r.ended.values() or [time.time()]))
        status, reason, codes = sm_report(r, sm)
        check(status == "Failed", "the job is Failed (%s)" % status)
        check("dataset 'train' is not on this data host" in reason and
              "instance_groups" in reason,
              "its FailureReason names the channel and what to send: %r" % reason)
        f1 = sm.failure("algo-1") or ""
        check("algo-1 (dnn coordinator host) exited 4" in f1 and "cannot serve" in f1,
              "algo-1's failure file says the job ended because a data host cannot "
              "serve: %r" % f1)
        for h in ("algo-2", "algo-3"):
            f = sm.failure(h) or ""
            check("%s (data host) exited 2" % h in f and "channels here: none" in f,
                  "%s's failure file says the channel is missing: %r" % (h, f))


def sc_demo(args):
    """scripts/demo.sh --cluster: the demo job on 2 data + 2 dnn hosts
    (SageMaker backend), rank 0's progress live, who served what."""
    images = int(os.environ.get("DEMO_IMAGES", "1600"))
    epochs = int(os.environ.get("DEMO_EPOCHS", "2"))
    step_ms = int(os.environ.get("DEMO_STEP_MS", "5"))
    job = Job(images=images, batch_size=32, world_size=2, epochs=epochs, side=224, name="demo")
    with Run("demo", ["algo-1", "algo-2"], ["algo-3", "algo-4"], job, subnet=60,
             keep=True) as r:
        print("== generating %d JPEGs (ImageNet-like sizes), visible to every host" % images)
        r.make_dataset(sides=None)
        print("== job (%s):" % r.job_file)
        sys.stdout.write("".join("   " + line for line in open(r.job_file)))
        print("== stoker-launch --backend sagemaker on every host (a resourceconfig.json "
              "each); rank 0 on algo-3 shows progress, rank 1 on algo-4 verifies every "
              "batch:", flush=True)
        for h in r.data_hosts + r.dnn_hosts:
            train = r.train_loop(step_ms=step_ms, verify=(h == "algo-4"),
                                 progress=(h == "algo-3"))
            r.start_launcher(h, ["--backend", "sagemaker"], train=train,
                             env=sagemaker_env(r, h))
        tail = Tail(r, r.data_hosts + r.dnn_hosts,
                    r"this host is|^rank 0: |^summary|^input-bound|: exiting|exited with code")
        deadline = time.monotonic() + 600
        while len(r.ended) < len(r.procs) and time.monotonic() < deadline:
            tail.pump()
            r.poll()
            time.sleep(0.2)
        tail.pump()
        r.wait_all(1)
        end = success_end(r)
        served = r.report(duration=end - r.t0)
        check(all(served[h] for h in r.data_hosts), "every data host served batches")
        r.check_train_loop("algo-4")
        print("== exit status: %s" % "  ".join("%s=%s" % (h, r.procs[h].returncode)
                                              for h in r.data_hosts + r.dnn_hosts))
        r.expect_exits({h: 0 for h in r.procs}, SUCCESS_EXIT_S, end)


SCENARIOS = {
    "smoke": sc_smoke,
    "sagemaker": sc_sagemaker,
    "data_kill": sc_data_kill,
    "late_join": sc_late_join,
    "train_fail": sc_train_fail,
    "slow_link": sc_slow_link,
    "slurm": sc_slurm,
    "hosts": sc_hosts,
    "roles": sc_roles,
    "slurm_job": sc_slurm_job,
    "slurm_cancel": sc_slurm_cancel,
    "slurm_data_kill": sc_slurm_data_kill,
    "slurm_roles": sc_slurm_roles,
    "slurm_train_fail": sc_slurm_train_fail,
    "sm_job": sc_sm_job,
    "sm_fail": sc_sm_fail,
    "sm_channel": sc_sm_channel,
    "demo": sc_demo,  # not a ctest test: scripts/demo.sh --cluster
}


class Args:
    def __init__(self, argv):
        self.bench = "--bench" in argv
        self.keep = "--keep" in argv
        self.build = None
        self.step_ms = 0
        rest = [a for a in argv if a not in ("--bench", "--keep")]
        if "--step-ms" in rest:
            i = rest.index("--step-ms")
            self.step_ms = int(rest[i + 1]) if i + 1 < len(rest) and rest[i + 1].isdigit() \
                else -1
            del rest[i:i + 2]
        if "--build" in rest:
            i = rest.index("--build")
            self.build = rest[i + 1] if i + 1 < len(rest) else ""
            del rest[i:i + 2]
        self.name = rest[0] if len(rest) == 1 else None


def main(argv):
    if argv == ["--list"]:
        for n, f in SCENARIOS.items():
            print("%-11s %s" % (n, f.__doc__.split("\n")[0]))
        return 0
    a = Args(argv)
    if a.name not in SCENARIOS or a.step_ms < 0:
        print("usage: scenarios.py SCENARIO [--build DIR] [--bench [--step-ms MS]] [--keep] "
              "| --list\n"
              "scenarios: %s" % " ".join(SCENARIOS), file=sys.stderr)
        return 2
    if a.build is not None:
        if not os.path.isdir(a.build):
            print("scenarios.py: --build %r is not a directory" % a.build, file=sys.stderr)
            return 2
        env_from_build(a.build)
    why = netcluster.check_supported()
    if why:
        print("SKIP: cannot simulate a cluster here: %s" % why)
        return netcluster.SKIP
    t0 = time.monotonic()
    try:
        SCENARIOS[a.name](a)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        check(False, "scenario ran: %s: %s" % (type(e).__name__, e))
    print("%s: %s in %.1f s" % (a.name, "FAILED (%d)" % len(fails) if fails else "passed",
                                time.monotonic() - t0))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
