"""test_local.py - the Python binding without daemons (local, in-process
batches): one epoch per `for`, END_OF_DATA ends iteration for good, zero
copy (tensor data_ptr is the slot pointer), payload == reference, resume via
state_dict/load_state_dict (also elastic: another world_size), bfloat16
conversion, stats(), the working_set arguments."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, require  # noqa: E402

require(torch=True)
import torch  # noqa: E402
import stoker

JOB = ("source = synthetic\nnum_samples = 96\nheight = 16\nwidth = 16\n"
       "batch_size = 4\nworld_size = 2\nepochs = 2\nseed = 5\nnum_classes = 10\n")


L = stoker.Loader(job=JOB, rank=1, world_size=2, slots=4, with_meta=True)
spe = L.steps_per_epoch
check(spe == 12, "steps_per_epoch %d" % spe)
j = L.job
check((j["source"], j["dtype"], j["layout"], j["drop_last"], j["batch_size"]) ==
      ("synthetic", "uint8", "nchw", True, 4), "Loader.job names its enums: %s" % j)
for epoch in range(2):
    n = 0
    for images, labels, b in L:
        check(b.epoch == epoch and b.step == n, "order %d/%d" % (b.epoch, b.step))
        check(images.data_ptr() == b.pointers[0], "image tensor is a view of the slot")
        check(labels.data_ptr() == b.pointers[1], "label tensor is a view of the slot")
        check(L.payload() == L.reference(b.epoch, b.step), "payload == reference")
        check(torch.equal(labels, b.index % 10), "labels = index mod classes")
        n += 1
    check(n == spe, "epoch %d had %d batches" % (epoch, n))
check(sum(1 for _ in L) == 0, "after END_OF_DATA iteration ends at once")
s = L.stats()
check(s["batches"] == 2 * spe, "stats batches %d" % s["batches"])
check(s["working_set"] == 0 and s["workers_listed"] == 0,
      "a local client has no working set: %s" % s)
L.close()

# working_set: validated by the Loader, passed to the library (a local
# client has one worker, so it changes nothing there)
W = stoker.Loader(job=JOB, rank=0, world_size=2, working_set=3, working_set_max=5)
check(sum(1 for _ in W) == spe, "a Loader with working_set reads its epoch")
W.close()
for bad in (0, 2000, True, "8"):
    try:
        stoker.Loader(job=JOB, working_set=bad)
        check(False, "working_set=%r accepted" % (bad,))
    except ValueError:
        pass

# resume exactly at the next step
A = stoker.Loader(job=JOB, rank=0, world_size=2, with_meta=True)
it = iter(A)
for _ in range(5):
    next(it)
sd = A.state_dict()
_, _, b6 = next(it)
want = b6.index.clone()
A.close()
B = stoker.Loader(job=JOB, rank=0, world_size=2, with_meta=True)
B.load_state_dict(sd)
_, _, b = next(iter(B))
check(b.step == 5 and torch.equal(b.index, want), "resume yields step 5")
B.close()

# elastic resume: states saved with world_size 2 after 5 steps (sample
# position 40) load into a job that differs only in world_size (3): offset
# 4, steps 3..7 of the new world; over both worlds every sample of epoch 0
# comes exactly once, and the next epoch is the new world's ordinary one.
# (drop_last false: with it, the new world would drop what is left past its
# last full step, here 8 samples.)
JOB2 = JOB + "drop_last = false\n"
JOB3 = JOB2.replace("world_size = 2", "world_size = 3")
seen, states = [], []
for r in range(2):
    A = stoker.Loader(job=JOB2, rank=r, world_size=2, with_meta=True)
    it = iter(A)
    for _ in range(5):
        _, _, b = next(it)
        seen += [int(i) for i, m in zip(b.index, b.mask) if int(m)]
    states.append(A.state_dict())
    A.close()
for r in range(3):
    E = stoker.Loader(job=JOB3, rank=r, world_size=3, with_meta=True)
    E.load_state_dict(states[r % 2])  # any rank's state: they name one position
    steps = []
    for _, _, b in E:
        check(b.epoch == 0 and b.sample_offset == 4, "resumed epoch has offset 4")
        steps.append(b.step)
        seen += [int(i) for i, m in zip(b.index, b.mask) if int(m)]
    check(steps == list(range(3, 8)), "W=3 rank %d resumed steps %r" % (r, steps))
    _, _, b = next(iter(E))
    check(b.epoch == 1 and b.step == 0 and b.sample_offset == 0, "then epoch 1 as usual")
    E.close()
check(sorted(seen) == list(range(96)), "elastic: every sample of epoch 0 once")
try:
    E = stoker.Loader(job=JOB3.replace("seed = 5", "seed = 6"), rank=0, world_size=3,
                      state=states[0]["stoker_state"])
    E.steps_per_epoch
    check(False, "elastic resume into another job raises")
except stoker.StokerError as e:
    check(e.name == "MISMATCH", "elastic mismatch error name %s" % e.name)

C = stoker.Loader(job=JOB, rank=0, world_size=2, convert="bfloat16")
img, lab = next(iter(C))
check(img.dtype == torch.bfloat16 and tuple(img.shape) == (4, 3, 16, 16), "bf16 NCHW")
C.close()
try:
    stoker.Loader(job=JOB, rank=0, world_size=3).steps_per_epoch
    check(False, "world_size mismatch raises")
except stoker.StokerError as e:
    check(e.name == "INVALID_ARGUMENT", "error name %s" % e.name)

# An op chain with three views over a few JPEGs written here, the third
# with a chain and a size of its own: images is a list of the three view
# tensors, the payload is the reference's.
try:
    from PIL import Image
except ImportError:
    Image = None
if Image is not None:
    import tempfile
    with tempfile.TemporaryDirectory(prefix="stoker-views-") as root:
        os.makedirs(os.path.join(root, "ds", "c0"))
        for i in range(8):
            im = Image.new("RGB", (40 + 3 * i, 30 + 2 * i), (20 * i, 255 - 20 * i, 90))
            im.putpixel((1, 1), (255, 255, 255))
            im.save(os.path.join(root, "ds", "c0", "%d.jpg" % i))
        JOBV = ("source = imagefolder\ndataset = ds\nbatch_size = 4\nviews = 3\n"
                "pipeline = random_resized_crop(16, scale=0.3:1) | hflip(0.5) | "
                "color_jitter(0.4, 0.4) | to(float32)\n"
                "view2 = random_resized_crop(8, 12, scale=0.05:0.4) | grayscale(0.5)\n")
        V = stoker.Loader(job=JOBV, data_root=root, rank=0, world_size=1, with_meta=True)
        views, labels, b = next(iter(V))
        check(isinstance(views, list) and len(views) == 3, "three views")
        check(all(tuple(v.shape) == (4, 3, 16, 16) and v.dtype == torch.float32
                  for v in views[:2]), "view shapes")
        check(tuple(views[2].shape) == (4, 3, 8, 12) and views[2].dtype == torch.float32,
              "view 2 of its own chain and size")
        check(V.job["view2"].startswith("decode | random_resized_crop(8, 12,")
              and list(V.job["view_height"]) == [0, 8, 0], "job dict names view2")
        check(not torch.equal(views[0], views[1]), "views differ")
        check(tuple(labels.shape) == (4,) and b.index is not None, "label and index")
        check(L.payload is not None and V.payload() == V.reference(b.epoch, b.step),
              "views payload == reference")
        V.close()
print("%d passed, %d failed" % (0 if fails else 1, 1 if fails else 0))
sys.exit(1 if fails else 0)
