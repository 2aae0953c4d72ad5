"""stk_test_ops.py - Python ops for the tests of the `python(...)` chain op
(tests/unit/augment/test_aug_pyop.c) and its benchmark (tools/bench/).

Each function takes the image (uint8 HxWx3, a view of shared memory), a
seeded numpy Generator and the op's extra arguments, and returns a uint8
array. The faulty ones misbehave on purpose: raise_some raises on some
samples, bad_result returns a wrong shape or dtype, crash and hang fail a
given number of times (counted in a marker file) and then behave as noise.
Used by tests/unit/augment/test_aug_pyop.c, tests/integration/
test_e2e_pyop.c and `stoker-bench augment --pyop`
(tools/bench/bench_recipes.c).
"""
import os
import signal
import time

import numpy as np


def invert(img, rng):
    return 255 - img


def noise(img, rng, amp=20):
    """Uniform integer noise in [-amp, amp], then an inversion with
    probability 1/2, both drawn from rng."""
    n = rng.integers(-amp, amp + 1, size=img.shape)
    out = np.clip(img.astype(np.int16) + n, 0, 255).astype(np.uint8)
    if rng.random() < 0.5:
        out = 255 - out
    return out


def shrink(img, rng):
    """Every other pixel of every other row: python(..., size=H/2:W/2)."""
    return np.ascontiguousarray(img[::2, ::2])


def raise_some(img, rng, k=2):
    # the whole image's sum, not one pixel: which samples raise stays a
    # pure function of the sample and does not hinge on one decoded level
    v = int(img.sum(dtype="int64"))
    if v % k == 0:
        raise ValueError("unlucky sample %d" % v)
    return img.copy()


def shrink_shm_some(img, rng, k=2):
    """A hostile op: truncates the shared memory it got the image in
    (descriptor 4). The worker's memfd is sealed against shrinking, so
    this raises PermissionError (a bad sample) instead of making the
    worker's next access to its mapping fault. Which samples: as
    raise_some (the image's sum mod k)."""
    if int(img.sum(dtype="int64")) % k == 0:
        os.ftruncate(4, 0)
    return img.copy()


def bad_result(img, rng, k=3):
    v = int(img[0, 0, 0]) % k
    if v == 0:
        return img[:-1]
    if v == 1:
        return img.astype(np.float32)
    return img.copy()


def _fail_now(marker, times):
    """1 while the marker file counts fewer than `times` failures (and
    counts this one)."""
    try:
        with open(marker) as f:
            done = int(f.read() or 0)
    except FileNotFoundError:
        done = 0
    if done >= int(times):
        return 0
    with open(marker, "w") as f:
        f.write(str(done + 1))
    return 1


def _parent_is(name):
    """1 when this runner's parent process is called name (its comm)."""
    try:
        with open("/proc/%d/comm" % os.getppid()) as f:
            return f.read().strip() == name
    except OSError:
        return 0


def crash(img, rng, marker, times=1, how="exit", only=None):
    """Fails `times` times in all (counted in marker): exits (how=exit) or
    kills itself (how=kill); with only=NAME, only in runners of a process
    called NAME (e.g. stoker-worker, not a rank's reference builds)."""
    if (only is None or _parent_is(only)) and _fail_now(marker, times):
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    return noise(img, rng)


def hang(img, rng, marker, times=1):
    if _fail_now(marker, times):
        time.sleep(3600)
    return noise(img, rng)
