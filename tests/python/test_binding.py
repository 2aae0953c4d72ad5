"""test_binding.py - the Python binding against real daemons on loopback.

Spawns stoker-coordinator and two stoker-workers (always reaped), then:
  - ranks 0 and 1 (two Loaders) iterate an epoch: every batch in order,
    equal to the reference (stk_build_reference through the library),
    tensors are views of the slot memory (data_ptr == slot pointer);
  - state_dict / load_state_dict resumes exactly at the next step;
  - examples/pytorch_train.py runs a bounded number of steps (loss
    decreases, resume check) against the same job.
Binaries come from $STOKER_COORDINATOR_BIN / $STOKER_WORKER_BIN (ctest sets
them); exit 77 when they, or torch, are missing, or under sanitizers.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, require, spawn, until, wait_port  # noqa: E402

COORD, WORKER = require(torch=True, bins=("STOKER_COORDINATOR_BIN", "STOKER_WORKER_BIN"))
import stoker  # noqa: E402
import torch  # noqa: E402

JOB = {"name": "pytest", "source": "synthetic", "num_samples": "1024", "height": "32",
       "width": "32", "batch_size": "8", "world_size": "2", "epochs": "3",
       "num_classes": "10", "seed": "11"}


def epoch_check(loaders, spe):
    """Both ranks, one epoch, interleaved."""
    its = [iter(L) for L in loaders]
    counts = [0, 0]
    for step in range(spe):
        for r, it in enumerate(its):
            images, labels, b = next(it)
            L = loaders[r]
            check(b.step == step, "rank %d step %d got %d" % (r, step, b.step))
            check(images.data_ptr() == b.pointers[0], "rank %d image is a slot view" % r)
            check(labels.data_ptr() == b.pointers[1], "rank %d label is a slot view" % r)
            check(L.payload() == L.reference(b.epoch, b.step),
                  "rank %d epoch %d step %d equals the reference" % (r, b.epoch, b.step))
            counts[r] += 1
    for r, it in enumerate(its):
        check(next(it, None) is None, "rank %d: epoch ends after %d steps" % (r, spe))
    return counts


def main():
    tmp = tempfile.mkdtemp(prefix="stoker-pytest-")
    log = open(os.path.join(tmp, "daemons.log"), "w")
    try:
        pf = os.path.join(tmp, "coord.port")
        args = [COORD, "--listen", "127.0.0.1:0", "--port-file", pf,
                "--idle-timeout-s", "60"]
        for k, v in JOB.items():
            args += ["--set", "%s=%s" % (k, v)]
        c = spawn(args, log)
        cport = wait_port(pf, c)
        coord = "127.0.0.1:%d" % cport
        workers = []
        for i in range(2):
            wpf = os.path.join(tmp, "w%d.port" % i)
            w = spawn([WORKER, "--coordinator", coord, "--listen", "127.0.0.1:0",
                       "--port-file", wpf, "--threads", "1"], log)
            wait_port(wpf, w)
            workers.append(w)
        loaders = [stoker.Loader(coord, rank=r, world_size=2, prefetch=4, slots=3,
                                 with_meta=True, join_timeout_ms=15000) for r in range(2)]
        spe = loaders[0].steps_per_epoch
        check(spe == 1024 // 16, "steps per epoch %d" % spe)
        counts = epoch_check(loaders, spe)
        check(counts == [spe, spe], "counts %s" % counts)
        s = loaders[0].stats()
        check(s["batches"] == spe and s["workers_alive"] >= 1, "stats %s" % s)
        print("epoch 0 ok for both ranks; rank 0 stats: batches %d stall %.1f%% workers %s"
              % (s["batches"], 100 * s["stall_fraction"],
                 [(w["address"], w["batches"]) for w in s["workers"]]), flush=True)

        # resume: rank 1, epoch 1 after 3 steps
        L = loaders[1]
        it = iter(L)
        for _ in range(3):
            next(it)
        sd = L.state_dict()
        _, _, b = next(it)
        want = (b.epoch, b.step, b.index.clone())
        for L in loaders:
            L.close()
        R = stoker.Loader(coord, rank=1, world_size=2, with_meta=True, join_timeout_ms=15000)
        R.load_state_dict(sd)
        _, _, b = next(iter(R))
        check((b.epoch, b.step) == want[:2] and torch.equal(b.index, want[2]),
              "resume gives epoch %d step %d (want %d %d)" % (b.epoch, b.step, *want[:2]))
        R.close()

        # the PyTorch example, bounded
        ex = os.path.join(os.environ.get("STOKER_EXAMPLES", "examples"), "pytorch_train.py")
        r = subprocess.run([sys.executable, ex, "--coordinator", coord, "--rank", "0",
                            "--world-size", "2", "--steps", "80", "--no-finish",
                            "--join-timeout-ms", "15000"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=90,
                           text=True)
        print(r.stdout[-1500:], flush=True)
        check(r.returncode == 0, "pytorch_train.py exit %d" % r.returncode)
        # rank 0 ends the job: rank 1's next() fails saying the job ended
        A = stoker.Loader(coord, rank=0, world_size=2, join_timeout_ms=15000)
        B = stoker.Loader(coord, rank=1, world_size=2, prefetch=2, join_timeout_ms=5000)
        itb = iter(B)
        next(itb)
        # B's watch stream must be open, else the end of the job cannot
        # reach it and its next() can only time out (a condition, not a sleep)
        until(lambda: B.stats()["coordinator_watching"], 20, "rank 1 watches the coordinator")
        A.finish(shutdown_job=True)
        # B stands still until the workers are gone (else a fast B could
        # legitimately finish its whole job during the drain); then only
        # what it had buffered (prefetch + slots) comes before the error.
        for w in workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                check(False, "worker exits after shutdown_job")
        t0 = time.time()
        err, n, slow = None, 0, []
        try:
            while time.time() < t0 + 10:
                t1 = time.time()
                if next(itb, None) is None:
                    itb = iter(B)
                n += 1
                if time.time() - t1 > 0.5:
                    slow.append(round(time.time() - t1, 2))
        except stoker.StokerError as e:
            err = e
        check(err is not None and "job ended" in str(err) and n <= 6,
              "after shutdown_job, rank 1 gets 'job ended' (got %r after %.1f s, %d "
              "batches, slow next() calls %s, stats %s)"
              % (err, time.time() - t0, n, slow, B.stats()))
        A.close()
        B.close()
        check(c.wait(10) == 0, "coordinator exits 0 after shutdown_job")
    except Exception as e:  # a crash of the harness is a failure, not a skip
        check(False, "exception: %r" % (e,))
    finally:
        reap()
        log.close()
        if fails:
            with open(os.path.join(tmp, "daemons.log")) as f:
                print("---- daemon log tail ----\n" + f.read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (0 if fails else 1, 1 if fails else 0))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
