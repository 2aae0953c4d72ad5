"""netcluster.py - a simulated multi-host cluster in Linux network namespaces.

Owns: one network namespace per simulated host plus one holding the bridge
that joins them, a veth pair per host (its eth0 inside the host, its port on
the bridge), per-host name resolution (/etc/netns/NS/hosts, which
`ip netns exec` bind-mounts over /etc/hosts), per-host host names (a UTS
namespace per process), and traffic shaping on both ends of every link with
tc (tbf for the rate; netem for the delay where the kernel has sch_netem).
It starts processes inside a host, kills everything in a host, reads the
bytes that crossed each link, and tears it all down. Optionally a CPU quota
per host (Cluster(..., cpu_quota={host: cores})): a cgroup per host
(v1 cpu.cfs_quota_us, or v2 cpu.max), every process of the host in it.

Must not: touch the root namespace's interfaces (every veth is created inside
the namespaces), leave anything behind (cleanup runs from try/finally, atexit
and SIGTERM/SIGINT/SIGHUP; namespaces left by a run that was SIGKILLed are
swept by the next run, as are CPU cgroups), or wait without a bound.

Requires root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 (ip, tc) and
unshare; Cluster.check_supported() says why not, and callers exit 77.
Python 3 standard library only.
"""
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

PREFIX = "stkc"  # namespace names: stkc<pid>-<n>-<host>, stkc<pid>-<n>-br
SKIP = 77
# the interpreter for helper processes: Debian's, as the tests require
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# Runs argv with the host's name set in a fresh UTS namespace; used as
# `ip netns exec NS unshare --uts python3 -c HOSTNAME_EXEC HOST ARGV...`.
HOSTNAME_EXEC = ("import os, socket, sys; socket.sethostname(sys.argv[1]); "
                 "os.execvp(sys.argv[2], sys.argv[2:])")

# Joins a cgroup (argv[1] its folder: its cgroup.procs takes this pid),
# then runs argv[2:], so that and every child it makes run under the
# host's CPU quota: `python3 -c CGROUP_EXEC CGDIR ip netns exec ...`. It
# comes first: `ip netns exec` mounts a /sys of its own, without the
# cgroup hierarchy.
CGROUP_EXEC = ("import os, sys\n"
               "with open(os.path.join(sys.argv[1], 'cgroup.procs'), 'w') as f:\n"
               "    f.write(str(os.getpid()))\n"
               "os.execvp(sys.argv[2], sys.argv[2:])")
# On a host with a quota, HOSTNAME_EXEC's place (after `ip netns exec`):
# mounts the cpu cgroup hierarchy back where `ip netns exec`'s own /sys
# hid it (in the mount namespace it made for this process alone), so the
# process reads its quota as on a real host (stoker-worker's cores);
# `python3 -c HOSTCG_EXEC VERSION MOUNT OPTIONS HOST ARGV...`. A mount
# that fails is said on stderr; the quota applies all the same.
HOSTCG_EXEC = (
    "import os, socket, subprocess, sys\n"
    "v, mnt, opts, host = sys.argv[1:5]\n"
    "def m(*a):\n"
    "    r = subprocess.run(['mount'] + list(a), stdout=subprocess.PIPE,\n"
    "                       stderr=subprocess.STDOUT, text=True)\n"
    "    if r.returncode:\n"
    "        raise OSError(r.stdout.strip())\n"
    "try:\n"
    "    if mnt != '/sys/fs/cgroup':\n"
    "        m('-t', 'tmpfs', '-o', 'mode=755', 'cgroup', '/sys/fs/cgroup')\n"
    "        os.makedirs(mnt, exist_ok=True)\n"
    "    if v == '1':\n"
    "        m('-t', 'cgroup', '-o', opts, 'cgroup', mnt)\n"
    "    else:\n"
    "        m('-t', 'cgroup2', 'cgroup2', mnt)\n"
    "except OSError as e:\n"
    "    print('netcluster: the host cannot see its cgroup (%s): %s' % (mnt, e),\n"
    "          file=sys.stderr)\n"
    "socket.sethostname(host); os.execvp(sys.argv[5], sys.argv[5:])")
CG_PREFIX = "stoker-"  # cgroup names: stoker-<pid>-<n>-<host>
CFS_PERIOD_US = 100000


def _run(argv, check=True, timeout=20):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode,
                                                r.stderr.strip()))
    return r


def _rate_bits(rate):
    """'1gbit' / '250mbit' / '500kbit' -> bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g)?bit", rate)
    if not m:
        raise ValueError("rate %r: want e.g. 1gbit, 250mbit" % rate)
    return float(m.group(1)) * {None: 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def check_supported():
    """None when namespaces, veth, a bridge and tbf can be used here, else
    a sentence saying why not (callers print it and exit 77)."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return "'%s' not found (install iproute2 / util-linux)" % tool
    probe = "%s%d-probe" % (PREFIX, os.getpid())
    try:
        r = _run(["ip", "netns", "add", probe], check=False)
        if r.returncode != 0:
            return "'ip netns add' is not permitted here: %s" % r.stderr.strip()
        try:
            r = _run(["ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name",
                      "pb"], check=False)
            if r.returncode != 0:
                return "cannot create a veth pair: %s" % r.stderr.strip()
            r = _run(["ip", "-n", probe, "link", "add", "pbr0", "type", "bridge"], check=False)
            if r.returncode != 0:
                return "cannot create a bridge: %s" % r.stderr.strip()
            r = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "pa", "root",
                      "tbf", "rate", "1gbit", "burst", "256kb", "latency", "50ms"],
                     check=False)
            if r.returncode != 0:
                return "tc cannot shape a link (tbf): %s" % r.stderr.strip()
            r = _run(["ip", "netns", "exec", probe, "unshare", "--uts", "true"], check=False)
            if r.returncode != 0:
                return "cannot create a UTS namespace: %s" % r.stderr.strip()
            try:  # per-host /etc/hosts live in /etc/netns/NAME/
                os.makedirs("/etc/netns/" + probe, exist_ok=True)
            except OSError as e:
                return "cannot create /etc/netns/%s (per-host name resolution): %s" % (probe,
                                                                                      e)
        finally:
            _run(["ip", "netns", "del", probe], check=False)
            shutil.rmtree("/etc/netns/" + probe, ignore_errors=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "cannot run ip: %s" % e
    return None


def _netem_available(ns, dev):
    r = _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "handle",
              "1:", "netem", "delay", "1ms"], check=False)
    if r.returncode == 0:
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
             check=False)
        return True
    return False


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ns_pids(ns):
    r = _run(["ip", "netns", "pids", ns], check=False)
    if r.returncode != 0:
        return []
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def ns_pids(ns):
    """The pids of every process in network namespace ns now (empty when
    it is gone)."""
    return _ns_pids(ns)


def _kill_ns(ns, timeout=10.0):
    """SIGKILL every process in namespace ns until none is left (bounded).
    Returns the pids that survived (none, normally)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _ns_pids(ns)
        if not pids or time.monotonic() > deadline:
            return pids
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _delete_ns(ns):
    left = _kill_ns(ns)
    if left:
        print("netcluster: processes %s in %s survived SIGKILL" % (left, ns), file=sys.stderr)
    _run(["ip", "netns", "del", ns], check=False)
    shutil.rmtree("/etc/netns/" + ns, ignore_errors=True)


def sweep_stale():
    """Delete namespaces (and /etc/netns dirs) left by earlier runs whose
    process is gone (e.g. a test killed with SIGKILL at its ctest timeout)."""
    r = _run(["ip", "netns", "list"], check=False)
    names = set(line.split()[0] for line in r.stdout.splitlines() if line.strip())
    if os.path.isdir("/etc/netns"):
        names |= set(os.listdir("/etc/netns"))
    for ns in sorted(names):
        m = re.match(r"%s(\d+)-" % PREFIX, ns)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            _delete_ns(ns)


# ---- CPU quotas (cgroups) ------------------------------------------------------

def cpu_cgroup_root():
    """(version, folder) of the hierarchy that holds the cpu controller:
    (1, e.g. /sys/fs/cgroup/cpu) for cgroup v1, (2, the cgroup2 mount)
    where that offers 'cpu', else (None, a sentence saying why not)."""
    v2 = None
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError as e:
        return None, "cannot read /proc/self/mounts: %s" % e
    for m in mounts:
        if len(m) < 4:
            continue
        if m[2] == "cgroup" and "cpu" in m[3].split(","):
            return 1, m[1]
        if m[2] == "cgroup2" and v2 is None:
            try:
                with open(os.path.join(m[1], "cgroup.controllers")) as f:
                    if "cpu" in f.read().split():
                        v2 = m[1]
            except OSError:
                pass
    if v2:
        return 2, v2
    return None, "no cgroup cpu controller mounted (v1 'cpu' or v2 with 'cpu')"


def _cgroup_opts(mnt):
    """The controllers of the v1 hierarchy mounted at mnt ("cpu",
    "cpu,cpuacct"), from its mount options."""
    known = {"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls", "blkio",
             "perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc"}
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                m = line.split()
                if len(m) >= 4 and m[1] == mnt and m[2] == "cgroup":
                    return ",".join(o for o in m[3].split(",") if o in known) or "cpu"
    except OSError:
        pass
    return "cpu"


class CpuQuota:
    """One cgroup with a CPU quota: `cores` cores per 100 ms period (v1
    cpu.cfs_period_us / cpu.cfs_quota_us, v2 cpu.max). Processes join it by
    writing their pid to its cgroup.procs (CGROUP_EXEC does, before exec;
    children inherit). remove() kills what is left in it and deletes it.
    top: also the highest scheduling weight (v1 cpu.shares 262144, v2
    cpu.weight 10000), so the cgroup gets its quota even while other
    processes load the machine (as long as the quotas add up to less than
    its cores). Raises OSError when the cgroup cannot be made (nothing is
    left)."""

    def __init__(self, name, cores, top=False):
        self.version, root = cpu_cgroup_root()
        if self.version is None:
            raise OSError(root)
        self.cores = cores
        self.root = root
        self.path = os.path.join(root, name)
        self.opts = _cgroup_opts(root) if self.version == 1 else ""
        if self.version == 2:  # the children of the root may use 'cpu'
            try:
                with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
            except OSError:
                pass  # already on, or refused: writing cpu.max below says
        os.mkdir(self.path)
        try:
            quota = max(1000, int(round(cores * CFS_PERIOD_US)))
            if self.version == 1:
                self._write("cpu.cfs_period_us", CFS_PERIOD_US)
                self._write("cpu.cfs_quota_us", quota)
                if top:
                    self._write("cpu.shares", 262144)
            else:
                self._write("cpu.max", "%d %d" % (quota, CFS_PERIOD_US))
                if top:
                    self._write("cpu.weight", 10000)
            self.top = top
        except OSError:
            self.remove()
            raise

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def pids(self):
        """The pids in the cgroup now (empty once it is gone)."""
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    def stat(self):
        """cpu.stat as {name: int}: v1 nr_periods, nr_throttled,
        throttled_time (ns); v2 usage_usec, nr_throttled, throttled_usec."""
        out = {}
        try:
            with open(os.path.join(self.path, "cpu.stat")) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if v.strip().isdigit():
                        out[k] = int(v)
        except OSError:
            pass
        return out

    def describe(self):
        if self.version == 1:
            return "cgroup v1 %s: cpu.cfs_quota_us %d per cpu.cfs_period_us %d%s" % (
                self.path, int(round(self.cores * CFS_PERIOD_US)), CFS_PERIOD_US,
                ", cpu.shares 262144" if self.top else "")
        return "cgroup v2 %s: cpu.max %d %d%s" % (
            self.path, int(round(self.cores * CFS_PERIOD_US)), CFS_PERIOD_US,
            ", cpu.weight 10000" if self.top else "")

    def remove(self, timeout=10.0):
        """SIGKILL what is left in the cgroup, then rmdir it once its
        processes are reaped (bounded retry). True when it is gone. Never
        raises."""
        deadline = time.monotonic() + timeout
        while os.path.isdir(self.path):
            for p in self.pids():
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.rmdir(self.path)
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    print("netcluster: cannot remove the cgroup %s (processes %s)" %
                          (self.path, self.pids()), file=sys.stderr)
                    return False
                time.sleep(0.05)
        return True


def cpu_quota_supported():
    """None when a CPU quota can be put on a host here, else a sentence
    saying why not (callers print it and exit 77)."""
    if os.geteuid() != 0:
        return "not root: CPU quotas need write access to the cgroup hierarchy"
    version, root = cpu_cgroup_root()
    if version is None:
        return root
    try:
        q = CpuQuota("%s%d-probe" % (CG_PREFIX, os.getpid()), 0.5)
    except OSError as e:
        return "cannot create a cgroup with a CPU quota under %s: %s" % (root, e)
    q.remove()
    return None


def sweep_stale_cgroups():
    """Delete CPU cgroups (stoker-<pid>-...) left by earlier runs whose
    process is gone; their processes are killed first."""
    version, root = cpu_cgroup_root()
    if version is None:
        return
    try:
        names = os.listdir(root)
    except OSError:
        return
    for n in sorted(names):
        m = re.match(r"%s(\d+)-" % CG_PREFIX, n)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))) \
                and os.path.isdir(os.path.join(root, n)):
            q = CpuQuota.__new__(CpuQuota)
            q.version, q.path, q.cores = version, os.path.join(root, n), 0
            q.remove()


class Host:
    def __init__(self, name, ns, addr, rate):
        self.name, self.ns, self.addr, self.rate = name, ns, addr, rate
        self.procs = []  # (label, Popen, log path)
        self.quota = None  # CpuQuota when the host has a CPU quota


class Cluster:
    """One simulated cluster. Use as a context manager:

        with Cluster(["algo-1", "algo-2"], subnet=11, workdir=d) as c:
            p = c.spawn("algo-1", ["stoker-worker", ...], log="w1.log")

    hosts: host names (each resolves on every host, as on SageMaker);
    subnet: 1..254, the third octet of 10.77.SUBNET.0/24 (one per scenario,
    so concurrent runs never share addresses even were they to share a
    bridge); rate: every link's rate (tc syntax); rates: {host: rate}
    overrides; delay_ms: one-way delay per link end where netem exists;
    cpu_quota: {host: cores} puts every process spawned on those hosts in
    a cgroup of its own with that CPU quota (cpu_quota_supported() says
    whether it can); cpu_top: those cgroups also get the highest
    scheduling weight (CpuQuota top); min_burst: the smallest tbf bucket
    in bytes (default 64 KiB; a bucket smaller than a GSO packet, 64 KiB
    plus headers, makes tbf cut every such packet into MTU-sized ones,
    which costs both ends CPU per byte: 256 KiB keeps them whole). Not
    thread-safe. Raises RuntimeError when a setup command fails (the
    cluster is then already torn down)."""

    _count = 0

    def __init__(self, hosts, subnet, workdir, rate="1gbit", rates=None, delay_ms=0.2,
                 cpu_quota=None, cpu_top=False, min_burst=65536):
        if not 1 <= subnet <= 254:
            raise ValueError("subnet must be 1..254")
        self.workdir = workdir
        Cluster._count += 1  # several clusters in one process get distinct names
        self.tag = "%s%d-%d" % (PREFIX, os.getpid(), Cluster._count)
        self.bridge_ns = self.tag + "-br"
        self.delay_ms = delay_ms
        self.hosts = {}
        self.order = list(hosts)
        self.netem = None
        self._up = False
        rates = rates or {}
        self.cpu_quota = dict(cpu_quota or {})
        self.cpu_top = cpu_top
        self.min_burst = min_burst
        for h in self.cpu_quota:
            if h not in hosts or not self.cpu_quota[h] > 0:
                raise ValueError("cpu_quota: %r is not a host with cores > 0" % h)
        for i, h in enumerate(hosts):
            if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", h):
                raise ValueError("host name %r: lower-case letters, digits, '-'" % h)
            self.hosts[h] = Host(h, "%s-%s" % (self.tag, h), "10.77.%d.%d" % (subnet, 11 + i),
                                 rates.get(h, rate))

    # ---- lifecycle ----------------------------------------------------------
    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self):
        sweep_stale()
        if self.cpu_quota:
            sweep_stale_cgroups()
        _install_handlers(self)
        self._up = True
        try:
            self._build()
        except BaseException:
            self.down()
            raise

    def _build(self):
        br = self.bridge_ns
        _run(["ip", "netns", "add", br])
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        hosts_file = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        hosts_file += "".join("%s\t%s\n" % (h.addr, h.name) for h in self.hosts.values())
        for i, h in enumerate(self.hosts.values()):
            _run(["ip", "netns", "add", h.ns])
            os.makedirs("/etc/netns/" + h.ns, exist_ok=True)
            with open("/etc/netns/%s/hosts" % h.ns, "w") as f:
                f.write(hosts_file)
            with open("/etc/netns/%s/hostname" % h.ns, "w") as f:
                f.write(h.name + "\n")
            port = "p%d" % i  # the host's port on the bridge
            _run(["ip", "-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                  "netns", h.ns])
            _run(["ip", "-n", br, "link", "set", port, "master", "br0", "up"])
            _run(["ip", "-n", h.ns, "addr", "add", h.addr + "/24", "dev", "eth0"])
            _run(["ip", "-n", h.ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", h.ns, "link", "set", "lo", "up"])
            h.port = port
            self._shape(h.ns, "eth0", h.rate)  # host -> bridge
            self._shape(br, port, h.rate)  # bridge -> host
        for name, cores in self.cpu_quota.items():
            self.hosts[name].quota = CpuQuota("%s%s" % (CG_PREFIX, self.tag[len(PREFIX):]) +
                                              "-" + name, cores, top=self.cpu_top)

    def _shape(self, ns, dev, rate):
        bits = _rate_bits(rate)
        # tbf needs a bucket of at least one timer tick's worth of bytes
        # (and one full GSO packet); 2 ms of traffic, at least 64 KiB.
        burst = max(self.min_burst, int(bits / 8 * 0.002))
        if self.netem is None:
            self.netem = self.delay_ms > 0 and _netem_available(ns, dev)
        tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev]
        if self.netem:
            _run(tc + ["root", "handle", "1:", "netem", "delay", "%gms" % self.delay_ms])
            _run(tc + ["parent", "1:1", "handle", "10:", "tbf", "rate", rate, "burst",
                       str(burst), "latency", "50ms"])
        else:
            _run(tc + ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "50ms"])

    def describe_links(self):
        """One line: the rates and whether the delay is applied."""
        rates = ", ".join("%s %s" % (h.name, h.rate) for h in self.hosts.values())
        if self.netem:
            delay = "delay %g ms each way per link end (netem)" % self.delay_ms
        else:
            delay = "no delay (this kernel has no sch_netem; rate shaping only)"
        return "links (tbf, both directions): %s; %s" % (rates, delay)

    def down(self):
        """Kill every process of every host, delete the namespaces and the
        /etc/netns dirs. Idempotent; never raises."""
        if not self._up:
            return
        self._up = False
        for h in self.hosts.values():
            for _, p, _ in h.procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            try:
                _delete_ns(h.ns)
            except Exception as e:  # keep tearing down the rest
                print("netcluster: deleting %s: %s" % (h.ns, e), file=sys.stderr)
            for _, p, _ in h.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        try:
            _delete_ns(self.bridge_ns)
        except Exception as e:
            print("netcluster: deleting %s: %s" % (self.bridge_ns, e), file=sys.stderr)
        for h in self.hosts.values():  # after their processes are reaped above
            if h.quota is not None:
                h.quota.remove()
                h.quota = None
        _uninstall_handlers(self)

    # ---- processes ----------------------------------------------------------
    def spawn(self, host, argv, log, env=None, label=None):
        """Start argv on `host` (its netns, its /etc/hosts, its host name),
        stdout and stderr to workdir/log. Returns the Popen (its own process
        group). On a host with a CPU quota it joins the host's cgroup
        before exec (CGROUP_EXEC), and so does everything it starts. The
        caller waits for it with wait()/poll() or lets down() kill it."""
        h = self.hosts[host]
        path = os.path.join(self.workdir, log)
        if h.quota is not None:
            q = h.quota
            join = [PYTHON, "-c", CGROUP_EXEC, q.path]
            inner = [PYTHON, "-c", HOSTCG_EXEC, str(q.version), q.root, q.opts or "-", h.name]
        else:
            join, inner = [], [PYTHON, "-c", HOSTNAME_EXEC, h.name]
        out = open(path, "w")
        try:
            p = subprocess.Popen(
                join + ["ip", "netns", "exec", h.ns, "unshare", "--uts"] + inner + list(argv),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)
        finally:
            out.close()
        p.started = time.monotonic()
        p.log = path
        h.procs.append((label or argv[0], p, path))
        return p

    def kill_host(self, host):
        """SIGKILL everything running in `host` (a machine that dies).
        Returns the number of processes that were killed."""
        h = self.hosts[host]
        n = len(_ns_pids(h.ns))
        left = _kill_ns(h.ns)
        if left:
            raise RuntimeError("processes %s in %s survived SIGKILL" % (left, h.ns))
        return n

    def freeze_host(self, host):
        """SIGSTOP everything running in `host` (a machine that hangs: its
        connections stay open, nothing it was asked for arrives). Returns
        the number of processes stopped; kill_host() ends them."""
        pids = _ns_pids(self.hosts[host].ns)
        for p in pids:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return len(pids)

    def run(self, host, argv, timeout=20):
        """Run a short command on `host` and return CompletedProcess."""
        h = self.hosts[host]
        return _run(["ip", "netns", "exec", h.ns] + list(argv), check=False, timeout=timeout)

    # ---- measurements -------------------------------------------------------
    def cpu_stat(self, host):
        """The host's cgroup cpu.stat ({} without a quota): CpuQuota.stat."""
        q = self.hosts[host].quota
        return q.stat() if q is not None else {}

    def describe_quotas(self):
        """One line: each host's CPU quota and how it is set ('' if none)."""
        qs = [h for h in self.hosts.values() if h.quota is not None]
        if not qs:
            return ""
        return "cpu quotas: " + "; ".join("%s %.2f core (%s)" % (h.name, h.quota.cores,
                                                                h.quota.describe())
                                          for h in qs)

    def link_bytes(self, host):
        """(tx, rx) bytes of host's eth0 since the cluster was built, as its
        statistics say (tx = what the host sent into the network)."""
        h = self.hosts[host]
        r = _run(["ip", "-n", h.ns, "-s", "-j", "link", "show", "eth0"])
        s = json.loads(r.stdout)[0]["stats64"]
        return s["tx"]["bytes"], s["rx"]["bytes"]


# ---- cleanup on signals and at exit ------------------------------------------
_live = []
_old = {}


def _on_signal(signum, frame):
    for c in list(_live):
        c.down()
    # die of the same signal, so the exit status says what happened
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _at_exit():
    for c in list(_live):
        c.down()


def _install_handlers(c):
    if not _live and not _old:
        atexit.register(_at_exit)
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            _old[s] = signal.signal(s, _on_signal)
    _live.append(c)


def _uninstall_handlers(c):
    if c in _live:
        _live.remove(c)
