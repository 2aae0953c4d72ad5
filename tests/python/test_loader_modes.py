"""test_loader_modes.py - the Loader's PyTorch-side modes without daemons
(local, in-process batches): as_dict (the names the batch header carries),
copy=True (owned tensors that stay valid while later batches are taken, as
a prefetching wrapper needs), set_epoch/len/epoch as with DistributedSampler,
and device="xla" against a small fake torch_xla package that records what
MpDeviceLoader was given (torch_xla itself cannot be installed here)."""
import os
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, require  # noqa: E402

require(torch=True)
import torch  # noqa: E402
import stoker

JOB = ("source = synthetic\nnum_samples = 96\nheight = 8\nwidth = 8\n"
       "batch_size = 4\nworld_size = 2\nepochs = 3\nseed = 11\nnum_classes = 10\n")


def reference_indices(rank):
    """[(epoch, step, index tensor clone)] of the whole job for `rank`."""
    out = []
    with stoker.Loader(job=JOB, rank=rank, world_size=2, with_meta=True) as L:
        for _ in range(L.epochs):
            for _, _, b in L:
                out.append((b.epoch, b.step, b.index.clone()))
    return out


REF = reference_indices(0)
SPE = 12
check(len(REF) == 3 * SPE, "reference has %d batches" % len(REF))

# ---- as_dict: every tensor by its header name -----------------------------
with stoker.Loader(job=JOB, rank=0, world_size=2, as_dict=True) as L:
    d = next(iter(L))
    check(isinstance(d, dict), "as_dict yields a dict")
    check(list(d) == ["image", "label", "mask", "index"], "dict keys %s" % list(d))
    check(d["image"].shape == (4, 3, 8, 8), "image shape %s" % (tuple(d["image"].shape),))
    check(torch.equal(d["index"], REF[0][2]), "dict index == reference step 0")
    check(torch.equal(d["label"], d["index"] % 10), "dict label = index mod classes")
    check(d["image"].data_ptr() == L.batch.pointers[0], "as_dict alone stays zero-copy")
try:
    stoker.Loader(job=JOB, as_dict=True, with_meta=True)
    check(False, "as_dict with with_meta is refused")
except ValueError:
    pass

# ---- copy=True: owned tensors survive later steps -------------------------
with stoker.Loader(job=JOB, rank=0, world_size=2, copy=True, with_meta=True) as L:
    kept = []
    for i, (images, labels, b) in enumerate(L):
        check(images.data_ptr() != b.pointers[0], "copy=True: image is not the slot")
        kept.append((images, b.index))
    # every slot has been reused several times since: the copies must hold
    for i, (images, index) in enumerate(kept):
        check(torch.equal(index, REF[i][2]), "copy=True step %d index intact" % i)
    with stoker.Loader(job=JOB, rank=0, world_size=2) as V:
        for i, (images, _) in enumerate(V):
            check(torch.equal(images, kept[i][0]), "copy=True step %d image intact" % i)

# ---- len / epoch / set_epoch ----------------------------------------------
with stoker.Loader(job=JOB, rank=0, world_size=2, with_meta=True) as L:
    check(len(L) == SPE, "len() == steps per epoch (%d)" % len(L))
    check(L.epoch == 0, "a fresh loader is at epoch 0")
    seen = []
    for epoch in range(L.epochs):
        L.set_epoch(epoch)  # the usual loop: a no-op each time
        for _, _, b in L:
            seen.append((b.epoch, b.step))
    check(seen == [(e, s) for e in range(3) for s in range(SPE)],
          "set_epoch(e) in the usual loop changes nothing")

    # skip ahead and rewind
    L.set_epoch(2)
    got = [(b.epoch, b.step, b.index.clone()) for _, _, b in L]
    check([(e, s) for e, s, _ in got] == [(2, s) for s in range(SPE)],
          "set_epoch(2) after the end restarts at epoch 2")
    check(all(torch.equal(x[2], r[2]) for x, r in zip(got, REF[2 * SPE:])),
          "set_epoch(2) yields the reference batches of epoch 2")
    L.set_epoch(0)
    _, _, b = next(iter(L))
    check((b.epoch, b.step) == (0, 0) and torch.equal(b.index, REF[0][2]),
          "set_epoch(0) rewinds to epoch 0 step 0")
    try:
        L.set_epoch(3)
        next(iter(L))
        check(False, "set_epoch past the job's epochs is refused")
    except ValueError:
        pass

# mid-epoch resume: set_epoch(current) continues, never replays
with stoker.Loader(job=JOB, rank=0, world_size=2, with_meta=True) as A:
    it = iter(A)
    for _ in range(5):
        next(it)
    sd = A.state_dict()
with stoker.Loader(job=JOB, rank=0, world_size=2, with_meta=True, state=sd["stoker_state"]) as B:
    check(B.epoch == 0, "resumed loader reports epoch 0")
    B.set_epoch(0)
    steps = [b.step for _, _, b in B]
    check(steps == list(range(5, SPE)), "set_epoch(current) after resume continues at step 5")

# ---- device="xla" against a fake torch_xla --------------------------------
FAKE = {
    "torch_xla/__init__.py": "",
    "torch_xla/core/__init__.py": "",
    "torch_xla/core/xla_model.py": """
        DEVICE = "fake-xla:0"
        marks = []
        def xla_device():
            return DEVICE
        def mark_step():
            marks.append(1)
        """,
    "torch_xla/distributed/__init__.py": "",
    "torch_xla/distributed/parallel_loader.py": """
        # Records what it was given and, like the real one, takes batches
        # ahead of the consumer in a background thread (8 ahead).
        import queue, threading
        made = []
        class MpDeviceLoader:
            def __init__(self, loader, device, **kw):
                self.loader, self.device, self.kw = loader, device, kw
                self.seen = []
                made.append(self)
            def __len__(self):
                return len(self.loader)
            def __iter__(self):
                q = queue.Queue(maxsize=8)
                def fill():
                    for b in self.loader:
                        q.put(b)
                    q.put(None)
                t = threading.Thread(target=fill, daemon=True)
                t.start()
                # let the producer run ahead before the first batch is used
                while not q.full() and t.is_alive():
                    t.join(0.01)
                while True:
                    b = q.get()
                    if b is None:
                        return
                    self.seen.append(b)
                    yield b
        """,
}
with tempfile.TemporaryDirectory() as d:
    saved_path = list(sys.path)
    try:
        # first: without torch_xla on the path, a clear error
        try:
            stoker.Loader(job=JOB, device="xla")
            check(False, "device='xla' without torch_xla is refused")
        except ImportError as e:
            check("torch_xla" in str(e), "the error names torch_xla: %s" % e)
        for rel, text in FAKE.items():
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(textwrap.dedent(text))
        sys.path.insert(0, d)
        import torch_xla.distributed.parallel_loader as pl
        L = stoker.Loader(job=JOB, rank=0, world_size=2, device="xla", as_dict=True)
        check(L.copy, "device='xla' implies copy=True")
        got = [b for b in L]
        check(len(pl.made) == 1 and pl.made[0].device == "fake-xla:0",
              "MpDeviceLoader made once on xm.xla_device()")
        check(len(pl.made[0]) == SPE, "MpDeviceLoader sees len() == steps per epoch")
        check(len(got) == SPE, "one epoch through the adapter: %d batches" % len(got))
        shapes = {tuple(b["image"].shape) for b in got}
        check(shapes == {(4, 3, 8, 8)}, "static shapes through the adapter: %s" % shapes)
        for i, b in enumerate(got):  # prefetched 8 ahead: owned tensors must hold
            check(torch.equal(b["index"], REF[i][2]), "xla step %d index intact" % i)
        L.close()
    finally:
        sys.path[:] = saved_path
        for m in [m for m in sys.modules if m == "torch_xla" or m.startswith("torch_xla.")]:
            del sys.modules[m]

if fails:
    print("%d failure(s)" % len(fails))
    sys.exit(1)
print("test_loader_modes: as_dict, copy, len/epoch/set_epoch and the xla adapter ok")
