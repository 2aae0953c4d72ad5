"""test_env.py - defaults from the environment, without torch.

stoker.Loader in local mode: coordinator, rank and world size from
STOKER_COORDINATOR, RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_* in that
order; arguments win; each bad value is a clear error naming the variable;
bad arguments are ValueError. The library's own rules are tested in C
(tests/unit/client/test_client_env.c); this checks the binding passes "not
given" through and reports the values used. Then, as a launcher would run
it: a coordinator and a worker on loopback and two stoker-train-loop ranks
given nothing but environment variables (RANK/WORLD_SIZE for one,
SLURM_PROCID/SLURM_NTASKS for the other), which must verify every batch
and exit 0, the daemons after them."""
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, require  # noqa: E402

require()
import stoker
from stoker import _lib

JOB = ("source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n"
       "batch_size = 4\nworld_size = 4\nepochs = 1\nseed = 3\n")
VARS = ["STOKER_COORDINATOR", "RANK", "WORLD_SIZE", "LOCAL_RANK",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"]


def env(**kv):
    for v in VARS:
        os.environ.pop(v, None)
    os.environ.update({k: str(v) for k, v in kv.items()})


def opened(**kw):
    """(rank, world_size, rank in the saved state) of a local Loader."""
    L = stoker.Loader(job=JOB, **kw)
    try:
        spe = L.steps_per_epoch  # opens the client
        state = L.state_dict()["stoker_state"]
        rank, world = struct.unpack_from("<II", state, 16)
        check(spe == 64 // (4 * L.world_size), "steps per epoch %d" % spe)
        return L.rank, L.world_size, rank, world
    finally:
        L.close()


def error(want, **kw):
    """Opening fails with INVALID_ARGUMENT naming `want`."""
    try:
        opened(**kw)
    except stoker.StokerError as e:
        check(e.name == "INVALID_ARGUMENT" and want in str(e),
              "error names %s: %s" % (want, e))
        return
    check(False, "no error for %s (env %s)" % (want, {v: os.environ.get(v) for v in VARS
                                                      if v in os.environ}))


# precedence
env(RANK=3, WORLD_SIZE=4, OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4,
    SLURM_PROCID=2, SLURM_NTASKS=4)
check(opened() == (3, 4, 3, 4), "RANK/WORLD_SIZE first")
check(opened(rank=0) == (0, 4, 0, 4), "rank argument wins")
env(OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4, SLURM_PROCID=2, SLURM_NTASKS=4)
check(opened() == (1, 4, 1, 4), "then OMPI_COMM_WORLD_*")
env(SLURM_PROCID=2, SLURM_NTASKS=4)
check(opened() == (2, 4, 2, 4), "then SLURM_*")
env(RANK=2)
check(opened(world_size=4) == (2, 4, 2, 4), "RANK with an explicit world_size")
env(RANK="junk", WORLD_SIZE="junk")
check(opened(rank=1, world_size=4) == (1, 4, 1, 4), "both arguments: env not read")

# bad values name the variable
for bad in ("abc", "-1", "", "1.0", "99999999999"):
    env(RANK=bad, WORLD_SIZE=4)
    error("RANK")
env(RANK=4, WORLD_SIZE=4)
error("RANK")
env(RANK=0, WORLD_SIZE=0)
error("WORLD_SIZE")
env(RANK=0)
error("WORLD_SIZE")
env(SLURM_PROCID="x", SLURM_NTASKS=4)
error("SLURM_PROCID")
env(RANK=0, WORLD_SIZE=2)  # the job says 4
error("world_size")

# the coordinator: from the environment when not given
env()
try:
    stoker.Loader()
    check(False, "Loader() without coordinator, job or STOKER_COORDINATOR")
except ValueError as e:
    check("STOKER_COORDINATOR" in str(e), "ValueError names STOKER_COORDINATOR: %s" % e)
env(STOKER_COORDINATOR="", RANK=0, WORLD_SIZE=1)
error("STOKER_COORDINATOR")
env(STOKER_COORDINATOR="127.0.0.1:1", RANK=1, WORLD_SIZE=2)
L = stoker.Loader(join_timeout_ms=200)
try:
    L.steps_per_epoch
    check(False, "joined a coordinator that is not there")
except stoker.StokerError as e:
    check(e.name == "UNAVAILABLE" and "127.0.0.1:1" in str(e),
          "the coordinator came from STOKER_COORDINATOR: %s" % e)
    check((L.rank, L.world_size) == (1, 2), "rank/world from the environment")
L.close()

# bad arguments
for kw in (dict(rank=-1), dict(rank="1"), dict(world_size=0), dict(rank=True),
           dict(cuda_device=-1)):
    try:
        stoker.Loader(job=JOB, **kw)
        check(False, "accepted %r" % kw)
    except ValueError as e:
        check(list(kw)[0] in str(e), "ValueError names %s: %s" % (list(kw)[0], e))
check(_lib.RANK_FROM_ENV == 0xFFFFFFFF and _lib.CUDA_DEVICE_FROM_ENV == -1, "constants")
env()


def launched_job():
    """What a launcher does: a coordinator and a worker on loopback, then two
    stoker-train-loop ranks with no options but --verify, one given
    RANK/WORLD_SIZE, the other SLURM_PROCID/SLURM_NTASKS. Both must verify
    every batch and exit 0, then the daemons exit 0."""
    coord_bin, worker_bin = os.environ.get("STOKER_COORDINATOR_BIN"), \
        os.environ.get("STOKER_WORKER_BIN")
    loop_bin = os.environ.get("STOKER_TRAIN_LOOP_BIN")
    if not (coord_bin and worker_bin and loop_bin):
        print("SKIP (this part only): daemons or stoker-train-loop not built")
        return
    import subprocess
    import tempfile
    import time
    tmp = tempfile.mkdtemp(prefix="stoker-envtest-")
    procs = []
    log = open(os.path.join(tmp, "log"), "w")

    def port(path, proc):
        deadline = time.time() + 20
        while time.time() < deadline:
            if os.path.exists(path) and open(path).read().strip():
                return int(open(path).read())
            if proc.poll() is not None:
                raise RuntimeError("%s exited with %s" % (proc.args[0], proc.returncode))
            time.sleep(0.02)
        raise RuntimeError("no port file " + path)

    try:
        pf, wpf = os.path.join(tmp, "c.port"), os.path.join(tmp, "w.port")
        c = subprocess.Popen([coord_bin, "--listen", "127.0.0.1:0", "--port-file", pf,
                              "--idle-timeout-s", "60"] +
                             ["--set=%s" % kv for kv in
                              ("source=synthetic", "num_samples=256", "height=16",
                               "width=16", "batch_size=4", "world_size=2", "epochs=1")],
                             stdout=log, stderr=subprocess.STDOUT)
        procs.append(c)
        addr = "127.0.0.1:%d" % port(pf, c)
        w = subprocess.Popen([worker_bin, "--coordinator", addr, "--listen", "127.0.0.1:0",
                              "--port-file", wpf, "--threads", "1"],
                             stdout=log, stderr=subprocess.STDOUT)
        procs.append(w)
        port(wpf, w)
        base = {k: v for k, v in os.environ.items() if k not in VARS}
        ranks = []
        for extra in ({"RANK": "0", "WORLD_SIZE": "2"},
                      {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}):
            e = dict(base, STOKER_COORDINATOR=addr, **extra)
            ranks.append(subprocess.Popen([loop_bin, "--verify", "--join-timeout-ms",
                                           "15000"], env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
            procs.append(ranks[-1])
        ok = True
        for r, p in enumerate(ranks):
            try:
                out = p.communicate(timeout=60)[0]
            except subprocess.TimeoutExpired:
                p.kill()
                out = p.communicate()[0]
            ok &= check(p.returncode == 0, "rank %d (from the environment) exits 0: %s"
                        % (r, out))
            check(("rank %d/2:" % r) in out, "stoker-train-loop took rank %d/2 from the "
                  "environment: %s" % (r, out.splitlines()[:1]))
            check("verify_failures 0" in out, "rank %d verified every batch" % r)
        if ok:  # every rank finished: the coordinator ends the job
            codes = []
            for p in (w, c):
                try:
                    codes.append(p.wait(20))
                except subprocess.TimeoutExpired:
                    codes.append("still running after 20 s")
            check(codes == [0, 0], "worker and coordinator exit 0 (got %s)" % codes)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        log.close()
        if fails:  # keep the daemons' log for a look
            print("daemon log kept in", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


launched_job()
print("FAILED: %d" % len(fails) if fails else "test_env: all checks passed")
sys.exit(1 if fails else 0)
