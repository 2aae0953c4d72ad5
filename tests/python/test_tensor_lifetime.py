"""test_tensor_lifetime.py - a zero-copy tensor stays what it is, in
process (local mode: batches built in-process, no daemons), so it also
runs under AddressSanitizer (the sanitizer build runs it with the runtime
preloaded, see CMakeLists.txt):

  1. the usual loop (nothing kept): every batch is a zero-copy view of its
     slot, and nothing is said about copies;
  2. a loop that keeps every batch of a 32-batch epoch: each kept tensor
     equals its clone at the end of the epoch, after close() and garbage
     collection, and after an in-place add_(1) (it writes the kept memory,
     never a slot reused for later batches); the first slots-2 batches are
     zero-copy, the rest copies, said once on stderr;
  3. after the kept tensors die the library frees the last slots (ASan
     reports any use after free or leak of the C side).
"""
import gc
import io
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, require  # noqa: E402

require(torch=True)
import stoker  # noqa: E402
import torch  # noqa: E402

JOB = ("source = synthetic\nnum_samples = 128\nheight = 8\nwidth = 8\n"
       "batch_size = 4\nworld_size = 1\nepochs = 2\nseed = 3\nnum_classes = 10\n")


class Stderr:
    """What the loader writes to sys.stderr while in the with block."""

    def __enter__(self):
        self.buf, self.old = io.StringIO(), sys.stderr
        sys.stderr = self.buf
        return self

    def __exit__(self, *exc):
        sys.stderr = self.old

    def text(self):
        return self.buf.getvalue()


def usual_loop():
    L = stoker.Loader(job=JOB, rank=0, world_size=1, with_meta=True)
    n = views = 0
    with Stderr() as err:
        for images, labels, b in L:
            views += images.data_ptr() == b.pointers[0] and labels.data_ptr() == b.pointers[1]
            n += 1
    check(n == 32 and views == 32, "usual loop: %d of %d batches zero-copy" % (views, n))
    check("copies" not in err.text(), "usual loop: nothing said about copies: %r" % err.text())
    L.close()


def keep_every_batch():
    L = stoker.Loader(job=JOB, rank=0, world_size=1, with_meta=True)
    kept, zero_copy = [], 0
    with Stderr() as err:
        for images, labels, b in L:
            zero_copy += images.data_ptr() == b.pointers[0]
            kept.append((images, labels, images.clone(), labels.clone(), b.step))
    check(len(kept) == 32, "an epoch of 32 batches (%d)" % len(kept))
    check(zero_copy == L.slots - 2, "the first slots-2 = %d batches are zero-copy (%d)" %
          (L.slots - 2, zero_copy))
    check(err.text().count("come as copies") == 1, "the copies are said once: %r" % err.text())

    def same(when, add=0):
        bad = [s for x, y, cx, cy, s in kept
               if not (torch.equal(x, (cx + add).to(cx.dtype)) and torch.equal(y, cy + add))]
        check(not bad, "kept tensors equal their clones %s (steps that differ: %s)" %
              (when, bad[:8]))

    same("at the end of the epoch")
    # the next epoch runs through the ring while the first one's tensors live
    with Stderr():
        m = sum(1 for _ in L)
    check(m == 32, "the second epoch still runs (%d batches)" % m)
    same("after the next epoch went through the ring")
    L.close()
    del L
    gc.collect()
    same("after close() and garbage collection")
    for x, y, cx, cy, s in kept:
        x.add_(1)
        y.add_(1)
    same("after an in-place add_(1)", add=1)
    kept.clear()
    gc.collect()


def main():
    usual_loop()
    keep_every_batch()
    if fails:
        print("FAILED: %d checks" % len(fails))
        return 1
    print("PASS: kept tensors stay what they are")
    return 0


if __name__ == "__main__":
    sys.exit(main())
