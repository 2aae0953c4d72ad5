"""slurmcluster.py - a real Slurm cluster on the simulated hosts of netcluster.py.

Owns: one munged (on the controller's host, its own key, socket, pid, log
and seed files), one slurmctld on the controller's host, one slurmd per
node host (`slurmd -N NODE`, NodeAddr = the host's namespace address), all
started in the foreground with Cluster.spawn, so the Cluster's cleanup
(try/finally, atexit, signals) kills and reaps every one of them. Every
file they use is generated under one folder of the test's work folder:
slurm.conf (SLURM_CONF points at it), gres.conf with stand-in GPU device
nodes, cgroup.conf, an empty plugstack.conf, the munge key, the controller's state, a spool folder and pid file per
node, the daemons' logs, the job-completion log. Nothing global is read or
changed (not /etc/slurm, not /etc/munge, not the system munged), so two
runs never collide.

Client commands (sbatch, squeue, scontrol, scancel, sacct) run inside a
host's namespace (the controller's by default), where the controller's
address is reachable; Slurm.cmd() sets SLURM_CONF for them.

Node-local folders: slurmd on node N runs with NODE_DIR/N bind-mounted
over LOCAL_DIR in its own mount namespace (the one `ip netns exec` makes;
mounts there never reach the root namespace), so every job step on N sees
LOCAL_DIR with N's files only, as a node's local disk would.

Not thread-safe. Every wait is bounded. Requires the Debian packages
slurmctld, slurmd, slurm-client and munge; check_supported() says what is
missing (callers exit 77). Python 3 standard library only.
"""
import os
import re
import shutil
import stat
import subprocess
import time

import netcluster

# the programs this module runs; check_supported() looks for each
PROGRAMS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol",
            "scancel", "sinfo")

CTLD_PORT = 6817  # each daemon is alone in its namespace: the default ports
SLURMD_PORT = 6818


def _which(p):
    """p's path on PATH or in /usr/sbin, /sbin (where the daemons are), or None."""
    return shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def check_supported():
    """None when the Slurm and munge programs are installed, else a
    sentence saying which are missing (callers print it and exit 77)."""
    missing = [p for p in PROGRAMS if _which(p) is None]
    if missing:
        return ("Slurm programs not found: %s (install the Debian packages slurmctld, slurmd, "
                "slurm-client and munge; scripts/install-deps.sh)" % ", ".join(missing))
    return None


class SlurmError(RuntimeError):
    """A daemon did not come up, or a command failed: the message says
    which and holds the tail of its log."""


class Slurm:
    """Slurm on a netcluster.Cluster (start() once the Cluster is up).

        s = Slurm(cluster, "ctl", {"cpu": ["cpu-1", "cpu-2"], "gpu": ["gpu-1"]},
                  gres={"gpu-1": "gpu:8"})
        s.start()
        job = s.sbatch(["script.sh"], env=..., cwd=...)
        s.wait_job(job, 120)

    ctl_host: the cluster host running munged and slurmctld (not a node);
    partitions: {name: [node host, ...]} (each node in one partition);
    gres: {node: "gpu:N"} (counted GPUs; their device files are stand-in
    character devices, and task/none binds nothing); cpus: CPUs each node declares (config_overrides: the
    declaration wins over what slurmd detects). Files go to
    cluster.workdir/slurm. Raises SlurmError when a daemon does not come up
    within its bound (the Cluster's cleanup then reaps the rest)."""

    def __init__(self, cluster, ctl_host, partitions, gres=None, cpus=2):
        self.c = cluster
        self.ctl = ctl_host
        self.partitions = {p: list(n) for p, n in partitions.items()}
        self.nodes = [n for ns in self.partitions.values() for n in ns]
        for h in [ctl_host] + self.nodes:
            if h not in cluster.hosts:
                raise ValueError("%s is not a host of the cluster" % h)
        if ctl_host in self.nodes:
            raise ValueError("the controller's host %s must not be a node" % ctl_host)
        self.gres = dict(gres or {})
        self.cpus = cpus
        # munged wants its socket folder (and every folder above it)
        # searchable by everyone; the key stays mode 0400
        os.chmod(cluster.workdir, 0o711)
        self.dir = os.path.join(cluster.workdir, "slurm")
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.socket = os.path.join(self.dir, "munge", "munge.socket")
        self.jobcomp = os.path.join(self.dir, "jobcomp.txt")
        self.local_dir = os.path.join(cluster.workdir, "local")  # the node-local path
        self.node_dir = os.path.join(self.dir, "node")  # node_dir/N: what N sees there
        self.cluster_name = re.sub(r"[^a-z0-9]", "", cluster.tag.lower())[-30:] or "stoker"
        self.daemons = {}  # label -> Popen
        # slurmd's log level (slurm.conf SlurmdDebug): at "verbose" each
        # task's exit code is logged (task_exits())
        self.slurmd_debug = "verbose"

    # ---- files -------------------------------------------------------------
    def _write(self, name, text, mode=0o644):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def config_text(self):
        """slurm.conf: the smallest configuration that runs a heterogeneous
        job here (no cgroups, no accounting database)."""
        d = self.dir
        ctl = self.c.hosts[self.ctl]
        lines = [
            "# generated by tests/cluster/slurmcluster.py for one test run",
            "ClusterName=%s" % self.cluster_name,
            "SlurmctldHost=%s(%s)" % (self.ctl, ctl.addr),
            "SlurmctldPort=%d" % CTLD_PORT,
            "SlurmdPort=%d" % SLURMD_PORT,
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.socket,
            "SlurmUser=root",
            "SlurmdUser=root",
            "StateSaveLocation=%s/state" % d,
            "SlurmdSpoolDir=%s/spool/%%n" % d,
            "SlurmctldPidFile=%s/slurmctld.pid" % d,
            "SlurmdPidFile=%s/slurmd-%%n.pid" % d,
            "SlurmctldLogFile=%s/slurmctld.log" % d,
            "SlurmdLogFile=%s/slurmd-%%n.log" % d,
            "SlurmctldDebug=info",
            "SlurmdDebug=%s" % self.slurmd_debug,
            "PlugStackConfig=%s/plugstack.conf" % d,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "GresTypes=gpu",
            "SchedulerType=sched/backfill",
            # heterogeneous jobs are started by the backfill scheduler only:
            # a pass every second, not every 30
            "SchedulerParameters=bf_interval=1",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt",
            "JobCompLoc=%s" % self.jobcomp,
            "MailProg=/bin/true",
            "KillWait=5",
            "InactiveLimit=0",
            "MinJobAge=600",
            "MessageTimeout=10",
            "SlurmdTimeout=60",
            "SlurmctldTimeout=60",
        ]
        for p, nodes in self.partitions.items():
            for n in nodes:
                h = self.c.hosts[n]
                extra = " Gres=%s" % self.gres[n] if n in self.gres else ""
                lines.append("NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%d RealMemory=1000 "
                             "State=UNKNOWN%s" % (n, h.addr, n, self.cpus, extra))
        for p, nodes in self.partitions.items():
            lines.append("PartitionName=%s Nodes=%s MaxTime=INFINITE State=UP" %
                         (p, ",".join(nodes)))
        return "\n".join(lines) + "\n"

    def gres_text(self):
        """gres.conf: slurmd drops a GPU without a device file, so each
        counted GPU is a character device node in DIR/dev (the same
        device numbers as /dev/null; task/none binds nothing, so no job
        ever opens them through Slurm)."""
        lines = ["# generated: stand-in GPU device files"]
        for n, g in self.gres.items():
            name, _, count = g.partition(":")
            count = int(count or "1")
            files = []
            for i in range(count):
                path = os.path.join(self.dir, "dev", "%s-%s%d" % (n, name, i))
                if not os.path.exists(path):
                    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
                files.append(path)
            lines.append("NodeName=%s Name=%s File=%s" % (n, name, ",".join(files)))
        return "\n".join(lines) + "\n"

    # ---- lifecycle ---------------------------------------------------------
    def start(self, timeout=60):
        """Write the files, start munged, slurmctld and every slurmd, and
        wait (bounded by `timeout` in all) until every node is idle."""
        deadline = time.monotonic() + timeout
        os.makedirs(os.path.join(self.dir, "munge"), mode=0o755, exist_ok=True)
        os.makedirs(os.path.join(self.dir, "state"), mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(self.dir, "dev"), mode=0o755, exist_ok=True)
        for n in self.nodes:
            os.makedirs(os.path.join(self.dir, "spool", n), mode=0o755, exist_ok=True)
            os.makedirs(os.path.join(self.node_dir, n), mode=0o755, exist_ok=True)
        os.makedirs(self.local_dir, mode=0o755, exist_ok=True)
        key = os.path.join(self.dir, "munge", "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.write(fd, os.urandom(1024))
        os.close(fd)
        self._write("slurm.conf", self.config_text())
        self._write("gres.conf", self.gres_text())
        self._write("plugstack.conf", "# no SPANK plugins\n")
        # slurmd loads a cgroup plugin even with proctrack/linuxproc and
        # task/none; naming it skips the autodetection, which fails inside a
        # network namespace (`ip netns exec` mounts a fresh /sys without
        # /sys/fs/cgroup). Nothing here creates a cgroup.
        self._write("cgroup.conf", "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")

        m = os.path.join(self.dir, "munge")
        self._spawn(self.ctl, "munged", [_which("munged"), "--foreground", "--force",
                                        "--socket=" + self.socket, "--key-file=" + key,
                                        "--pid-file=%s/munged.pid" % m,
                                        "--log-file=%s/munged.log" % m,
                                        "--seed-file=%s/munged.seed" % m])
        self._wait(lambda: self._munge_ok(), deadline, "munged answers on %s" % self.socket,
                   "munge/munged.log")
        self._spawn(self.ctl, "slurmctld", [_which("slurmctld"), "-D", "-i", "-f", self.conf])
        self._wait(lambda: self.cmd(["scontrol", "ping"]).returncode == 0, deadline,
                   "slurmctld answers (scontrol ping)", "slurmctld.log")
        for n in self.nodes:
            # node_dir/n over local_dir for this slurmd and its job steps
            self._spawn(n, "slurmd-" + n,
                        ["/bin/sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"',
                         "sh", os.path.join(self.node_dir, n), self.local_dir,
                         _which("slurmd"), "-D", "-N", n, "-f", self.conf])
        self._wait(lambda: self.idle_nodes() >= set(self.nodes), deadline,
                   "every node idle (%s)" % ",".join(self.nodes), "slurmctld.log")

    def _spawn(self, host, label, argv):
        env = self.env()
        p = self.c.spawn(host, argv, "slurm-%s.log" % label, env=env, label=label)
        self.daemons[label] = p
        return p

    def _munge_ok(self):
        r = subprocess.run([_which("munge"), "-S", self.socket, "-n"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10)
        return r.returncode == 0

    def _wait(self, cond, deadline, what, log):
        while time.monotonic() < deadline:
            dead = [k for k, p in self.daemons.items() if p.poll() is not None]
            if dead:
                raise SlurmError("%s exited (%s) while waiting until %s:\n%s" %
                                 (", ".join(dead), ",".join(str(self.daemons[k].returncode)
                                                           for k in dead), what,
                                  self.log_tails()))
            if cond():
                return
            time.sleep(0.2)
        raise SlurmError("not within the bound: %s\n%s" % (what, self.log_tails()))

    def log_tails(self, lines=15):
        """The last lines of every daemon log (for failure messages)."""
        out = []
        for root, _, files in os.walk(self.dir):
            for f in sorted(files):
                if f.endswith(".log"):
                    with open(os.path.join(root, f), errors="replace") as fh:
                        t = fh.readlines()[-lines:]
                    out.append("---- %s\n%s" % (os.path.relpath(os.path.join(root, f),
                                                              self.dir), "".join(t)))
        for f in sorted(os.listdir(self.c.workdir)):
            if f.startswith("slurm-") and f.endswith(".log"):
                with open(os.path.join(self.c.workdir, f), errors="replace") as fh:
                    t = fh.readlines()[-lines:]
                if t:
                    out.append("---- %s\n%s" % (f, "".join(t)))
        return "\n".join(out)

    # ---- commands ----------------------------------------------------------
    def env(self, extra=None):
        """The environment of Slurm programs: this cluster's slurm.conf, no
        SLURM_* variable from outside."""
        e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        e["SLURM_CONF"] = self.conf
        e["PATH"] = e.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
        e.update(extra or {})
        return e

    def cmd(self, argv, host=None, env=None, timeout=20, cwd=None):
        """Run a Slurm client command on `host` (default the controller's);
        returns the CompletedProcess (text). env: the whole environment
        (default self.env())."""
        h = self.c.hosts[host or self.ctl]
        return subprocess.run(["ip", "netns", "exec", h.ns, "unshare", "--uts",
                               netcluster.PYTHON, "-c", netcluster.HOSTNAME_EXEC, h.name] +
                              list(argv),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, env=env or self.env(), cwd=cwd)

    def idle_nodes(self):
        r = self.cmd(["sinfo", "-h", "-N", "-o", "%N %t"])
        return set(line.split()[0] for line in r.stdout.splitlines()
                   if len(line.split()) == 2 and line.split()[1] == "idle")

    def sbatch(self, argv, env, cwd):
        """sbatch ARGV (script and its arguments) with environment env
        (exported to the job: --export=ALL) from folder cwd; returns the
        job id. Raises SlurmError when sbatch refuses it."""
        r = self.cmd(["sbatch", "--parsable"] + list(argv), env=env, cwd=cwd)
        if r.returncode != 0:
            raise SlurmError("sbatch %s: exit %d: %s" % (" ".join(argv), r.returncode,
                                                        r.stderr.strip()))
        return r.stdout.strip().split(";")[0]

    def show_job(self, job):
        """scontrol show job JOB -o -> [{field: value}] one dict per
        component of a heterogeneous job (one for a plain job); [] when
        the controller no longer knows it."""
        r = self.cmd(["scontrol", "-o", "show", "job", str(job)])
        if r.returncode != 0:
            return []
        out = []
        for line in r.stdout.splitlines():
            d = {}
            for m in re.finditer(r"(\w+)=(\S*)", line):
                d.setdefault(m.group(1), m.group(2))
            if d:
                out.append(d)
        return out

    def states(self, job):
        return [c.get("JobState") for c in self.show_job(job)]

    DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED")

    def ended(self, job):
        """The components (show_job) when every one is in a final state
        now, else None."""
        comps = self.show_job(job)
        if comps and all(c.get("JobState") in self.DONE for c in comps):
            return comps
        return None

    def wait_job(self, job, timeout):
        """Wait (bounded) until every component of job is in a final state;
        returns the components (show_job) or None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            comps = self.ended(job)
            if comps or time.monotonic() >= deadline:
                return comps
            time.sleep(0.5)

    def steps(self):
        """squeue --steps now (this cluster runs the test's jobs alone):
        [(step id, node list)]; a heterogeneous job's component N shows as
        JOB+N.STEP."""
        r = self.cmd(["squeue", "-h", "--steps", "-o", "%i %N"])
        return [tuple(line.split(None, 1)) for line in r.stdout.splitlines() if line.strip()]

    def jobcomp_records(self):
        """The job-completion log (jobcomp/filetxt): one dict per finished
        job (component), fields as Slurm writes them."""
        try:
            with open(self.jobcomp) as f:
                text = f.read()
        except OSError:
            return []
        return [dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))
                for line in text.splitlines() if line.strip()]

    def task_exits(self, job):
        """[(node, step, task, exit code)] from the slurmd logs: each task of
        job (its component ids: JOB+OFFSET share the het job's first id,
        and a component's own id N logs as [N.STEP]) that ended, as
        slurmstepd logged it ("task T (PID) exited with exit code C")."""
        ids = set(c.get("JobId") for c in self.show_job(job)) or {str(job)}
        out = []
        for n in self.nodes:
            try:
                with open(os.path.join(self.dir, "slurmd-%s.log" % n), errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            for m in re.finditer(r"\[(\d+)\.(\w+)\] task (\d+) \(\d+\) exited with exit code "
                                 r"(\d+)", text):
                if m.group(1) in ids:
                    out.append((n, "%s.%s" % (m.group(1), m.group(2)), int(m.group(3)),
                                int(m.group(4))))
            for m in re.finditer(r"\[(\d+)\.(\w+)\] task (\d+) \(\d+\) exited\. Killed by "
                                 r"signal (\d+)", text):
                if m.group(1) in ids:
                    out.append((n, "%s.%s" % (m.group(1), m.group(2)), int(m.group(3)),
                                128 + int(m.group(4))))
        return out

    def node_programs(self, node):
        """{pid: program name} of every process in node's namespace now
        but slurmd itself (job steps: slurmstepd and what it started)."""
        out = {}
        for pid in netcluster.ns_pids(self.c.hosts[node].ns):
            if pid == self.daemons["slurmd-" + node].pid:
                continue
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    args = [a for a in f.read().split(b"\0") if a]
            except OSError:
                continue  # it exited meanwhile
            names = [os.path.basename(a).decode(errors="replace") for a in args]
            # the program: past an interpreter and its options (python3
            # stoker-launch -> stoker-launch, bash slurm_script -> slurm_script)
            rest = names[1:] if names and re.fullmatch(r"(python3?(\.\d+)?|sh|bash)",
                                                       names[0]) else names
            prog = next((x for x in rest if not x.startswith("-")), names[0] if names else "?")
            out[pid] = prog
        return out
