"""test_env.py - stoker.Loader's defaults from the environment, without
daemons and without torch (local mode): coordinator, rank and world size
from STOKER_COORDINATOR, RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_* in
that order; arguments win; each bad value is a clear error naming the
variable; bad arguments are ValueError. The library's own rules are tested
in C (tests/unit/client/test_client_env.c); this checks the binding passes
"not given" through and reports the values used."""
import os
import struct
import sys

if os.environ.get("STOKER_SANITIZED") == "1":
    print("SKIP: libstoker is built with sanitizers; preloading them into python is fragile")
    sys.exit(77)
import stoker
from stoker import _lib

JOB = ("source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n"
       "batch_size = 4\nworld_size = 4\nepochs = 1\nseed = 3\n")
VARS = ["STOKER_COORDINATOR", "RANK", "WORLD_SIZE", "LOCAL_RANK",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"]
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


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
print("FAILED: %d" % len(fails) if fails else "test_env: all checks passed")
sys.exit(1 if fails else 0)
