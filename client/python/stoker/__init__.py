"""stoker - Python binding of libstoker (ctypes, no compiled extension).

    import stoker
    loader = stoker.Loader("10.0.0.5:7000", rank=0, world_size=2)
    # or, under stoker-launch / torchrun / mpirun / srun: stoker.Loader()
    for epoch in range(loader.epochs):
        for images, labels in loader:      # one epoch per `for`
            ...                            # images, labels: torch tensors
    loader.close()

Ending the job: a rank is finished (the coordinator counts it; when every
rank has, the workers exit 0 and so does the coordinator) as soon as the
`for` of its last epoch runs out, and at close(), context exit, garbage
collection or interpreter exit if every step was delivered by then. A
script that stops early (max steps, early stopping) and exits normally
with its Loader still open is finished at interpreter exit too; one that
ends with an uncaught exception (Ctrl-C included) is not, so a restarted
script resumes the rank. close() and context exit of a rank that stopped
early leave it open (a later Loader of the rank continues it): call
loader.finish() to end it there. stoker-launch finishes every rank of a
host whose training command exited 0.

By default tensors are NOT copied: on the CPU they are torch.frombuffer
views of the library's slot memory, on CUDA they wrap the device slot
through __cuda_array_interface__. A tensor stays what it is: its slot goes
back to the ring only when the last tensor viewing it (any view of it,
any numpy array over it) is gone, also after close(). A loop that keeps
tensors (a list of batches, outputs.append(x)) therefore never sees them
change: once the ring's zero-copy slots are all held that way (slots - 2
batches), later batches come as copies, said once on stderr, until kept
tensors are freed. Loader(copy=True) always yields owned tensors (one copy
per batch, optionally into pinned host memory): the mode to use under
wrappers that prefetch batches in a background thread (torch_xla's
MpDeviceLoader, Lightning, accelerate).
Loader.batch describes the current batch (epoch, step, mask, index, the raw
pointers).

What a step yields: (images, labels) by default, (images, labels, batch)
with with_meta=True, or a dict of every tensor by the names the batch header
carries with as_dict=True ({"image", "label", "mask", "index"} for image
jobs; the token tensors for token jobs). For a token job the first two
tensors are tokens and labels, so the tuple form works there too. A job
with views = V > 1 yields images as a list of V tensors (image0 ..
image{V-1}: the same samples under independent random draws; a view with
a chain of its own, job key view1..view3, has that chain's size).
A job whose op chain ends in a batch op (mixup, cutmix, mixup_cutmix)
yields (images, targets): targets is the float32 [B, num_classes] tensor
"target" of soft targets, what timm's SoftTargetCrossEntropy (or
torch.nn.CrossEntropyLoss with probabilities) takes; each row's own
class stays in the dict's "label" and in batch.label (batch.target is
the soft targets, None for other jobs).

Epochs: one `for` = one epoch. set_epoch(e) before the loop behaves as
with DistributedSampler: e equal to the epoch the loader is at continues it
(also mid-epoch after a resume: stoker never replays a delivered step), any
other e restarts the stream at the first step of epoch e.

device="xla" (PyTorch/XLA, e.g. Trainium through torch-neuronx) iterates a
torch_xla.distributed.parallel_loader.MpDeviceLoader over owned CPU
batches; call xm.mark_step() once per training step, after
optimizer.step(), as torch_xla documents. See docs/xla.md.

The library is found as described in stoker._lib (STOKER_LIB first).
"""
import atexit
import ctypes
import os
import sys
import threading
import types
import warnings
import weakref

from . import _lib
from ._lib import lib

__all__ = ["Loader", "StokerError", "lib_path", "status_name"]
DEVICES = ("cpu", "cuda", "xla")
lib_path = _lib.lib_path


def status_name(st):
    return _lib.STK_STATUS_NAMES.get(st, str(st))


class StokerError(RuntimeError):
    """A libstoker call failed. .status is the stk_status code, .name its
    name (e.g. "UNAVAILABLE"), the message the library's error text."""

    def __init__(self, status, message):
        self.status = status
        self.name = status_name(status)
        super().__init__("%s: %s" % (self.name, message))


# How long one wait of the library lasts at most before Python gets to run
# its signal handlers (KeyboardInterrupt): next waits in slices this long.
_SLICE_MS = 200


def _interruptible(fn, c=None):
    """fn() on a helper thread while this thread waits in short slices, so
    Ctrl-C (KeyboardInterrupt, any exception raised by a signal handler)
    comes within a fraction of a second. On such an exception the library
    call is woken (stk_client_interrupt(c), or stk_interrupt() when there
    is no client yet, as during open's join), waited for (it returns
    within about 100 ms), and the exception goes on. Returns fn's result;
    an exception fn raised is raised here."""
    box = {}

    def run():
        try:
            box["r"] = fn()
        except BaseException as e:  # re-raised on the caller's thread
            box["e"] = e

    t = threading.Thread(target=run, name="stoker-call", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(_SLICE_MS / 1000.0)
    except BaseException:
        if c is not None:
            lib.stk_client_interrupt(c)
        else:
            lib.stk_interrupt()
        t.join()
        raise
    if "e" in box:
        raise box["e"]
    return box["r"]


def _torch():
    import torch  # imported lazily: the module loads without torch
    return torch


def _tdtype(dtype):
    torch = _torch()
    # the library's dtype table names each type as torch does
    m = getattr(torch, _lib.DTYPE_NAMES.get(dtype, ""), None)
    if not isinstance(m, torch.dtype):
        raise StokerError(13, "tensor dtype %d is not known to this binding" % dtype)
    return m


def _xla():
    """(xla_model, parallel_loader) modules of torch_xla, or a clear error."""
    try:
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.parallel_loader as pl
    except ImportError as e:
        raise ImportError(
            "stoker.Loader(device='xla') needs torch_xla (PyTorch/XLA; on Trainium "
            "the Neuron SDK's torch-neuronx), which is not importable here: %s. Use "
            "device='cpu' (or 'cuda') without it." % e) from e
    return xm, pl


class _CudaArray:
    """Minimal __cuda_array_interface__ holder for a device pointer."""
    _typestr = {_lib.DTYPE_UINT8: "|u1", _lib.DTYPE_FLOAT32: "<f4",
                _lib.DTYPE_BFLOAT16: "<i2", _lib.DTYPE_INT64: "<i8",
                _lib.DTYPE_INT32: "<i4"}

    def __init__(self, ptr, shape, dtype):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": self._typestr[dtype],
            "data": (ptr, False), "version": 2, "strides": None}


class _Held:
    """How many batches of one Loader are held (thread-safe: a tensor may
    die on any thread)."""

    def __init__(self):
        self.n = 0
        self._mu = threading.Lock()

    def add(self, d):
        with self._mu:
            self.n += d


class _Slot:
    """One library slot, held while anything references this object: the
    Loader for its current batch, and every tensor viewing the slot (its
    storage keeps the buffer object that holds this). The last reference
    gone, the slot goes back to the ring (after close(): the library frees
    it then)."""
    __slots__ = ("_b", "_held")
    _release = lib.stk_batch_release  # kept here: usable at interpreter exit

    def __init__(self, b, held):
        self._b, self._held = b, held
        held.add(1)

    def __del__(self):
        try:
            self._release(self._b)
            self._held.add(-1)
        except Exception:
            pass


def _as_tensor(t, owner):
    """Zero-copy torch tensor over a stk_tensor; keeps owner (the _Slot)
    alive for as long as any view of the memory is."""
    torch = _torch()
    shape = [t.shape[i] for i in range(t.ndim)]
    dt = _tdtype(t.dtype)
    if t.device == _lib.DEVICE_CUDA:
        arr = _CudaArray(t.data, shape, t.dtype)
        arr.owner = owner  # torch.as_tensor keeps arr alive with the tensor
        x = torch.as_tensor(arr, device="cuda")
        return x.view(torch.bfloat16) if t.dtype == _lib.DTYPE_BFLOAT16 else x
    buf = (ctypes.c_uint8 * t.nbytes).from_address(t.data)
    buf.owner = owner  # torch.frombuffer keeps buf alive with the storage
    count = 1
    for s in shape:
        count *= s
    return torch.frombuffer(buf, dtype=dt, count=count).view(shape)


_LAST_BATCH = ("pad", "trim", "mark")


class Loader:
    """Iterable over this rank's batches; one `for` loop = one epoch.

    coordinator: "host:port" of stoker-coordinator; None = $STOKER_COORDINATOR
        (with job=... none is needed: batches are then built in-process, no
        daemons; for tests/debugging).
    rank, world_size: this training rank and the job's world size; None =
        from the environment: RANK/WORLD_SIZE, else OMPI_COMM_WORLD_RANK/
        OMPI_COMM_WORLD_SIZE, else SLURM_PROCID/SLURM_NTASKS (the first pair
        with either variable set), else rank 0 of 1. An argument given always
        wins. After the first use, .rank and .world_size hold the values used.
    device: "cpu", "cuda" (CUDA runtime loaded at run time) or "xla"
        (torch_xla's MpDeviceLoader over owned CPU batches; implies copy).
    cuda_device: CUDA ordinal; None = $LOCAL_RANK (else the pair's local
        rank, else 0).
    prefetch: batch requests kept in flight; slots: device ring slots (>= 3;
        zero-copy batches held at once: slots - 2, one kept by the loop
        variables while the next is taken plus one more).
    convert: None, "float32" or "bfloat16" (uint8 image -> normalized NCHW).
    state: bytes from state_dict()["stoker_state"] to resume from.
    token: bearer token for the coordinator and workers.
    working_set: how many workers this rank streams from (None =
        $STOKER_WORKING_SET, else 8; it grows up to working_set_max, None =
        4x, while the rank is input-bound; docs/operations.md "Working set").
    log: the client's few stderr lines on what it leaves out (refused list
        entries, its working set, workers dropped) and on what it waits for
        (one line every 5 s while joining or while no batch comes); True by
        default, False silences them ($STOKER_CLIENT_LOG=0 too).
    join_timeout_ms: how long the open keeps trying to join (default 60 s);
        it fails at once, with the worker's reason, when the coordinator
        reports that no worker can serve the job.
    no_worker_timeout_ms: how long a step waits with no live worker before
        it raises StokerError with the reason (None =
        $STOKER_NO_WORKER_TIMEOUT_MS, else join_timeout_ms).
    tls_ca, tls_cert, tls_key: PEM files for TLS (None = $STOKER_TLS_CA,
        $STOKER_TLS_CERT, $STOKER_TLS_KEY, else plaintext): tls_ca verifies
        the daemons; cert+key are presented under mTLS (docs/operations.md).
    with_meta: yield (images, labels, batch) where batch has mask/index.
    as_dict: yield {name: tensor} for every tensor of the batch.
    copy: yield owned tensors (one copy per batch) instead of views of the
        library's slot, valid after the next step; pin_memory: make the CPU
        copies in pinned memory (needs CUDA; ignored without it).
    xla_device: the torch_xla device for device="xla" (None = xm.xla_device()).
    last_batch: what a step yields of the rows that pad an epoch's last
        step (only a job with drop_last = false has them: the batch keeps
        its B rows, mask 0 on the padding, which repeats real samples with
        their real labels). "pad" (the default): every row, as built, said
        once on stderr; "trim": only the real rows (the last step's tensors
        are then shorter than B: shapes change on that step); "mark": every
        row, the padding rows' labels -1 (CrossEntropyLoss(ignore_index=-1)
        skips them). batch.mask and batch.index always hold all B rows.
    auto_finish: finish the rank at the end of its data (the last epoch's
        `for` running out, or close/exit once every step was handed out),
        and at a normal interpreter exit with the Loader still open after
        an early stop; False leaves it to an explicit finish() (a script
        that reopens the same rank afterwards, e.g. to check a resume).
    The client is opened on first use, so load_state_dict() may come first.
    Not thread-safe: drive one Loader from one thread (stats() excepted).
    Ctrl-C: every wait (the join at open, a step, finish) raises
    KeyboardInterrupt within a fraction of a second; the daemons go on
    serving the other ranks, and a script started again resumes as usual.
    The join is woken with stk_interrupt, which also wakes another thread's
    Loader that is joining at that moment.
    """

    def __init__(self, coordinator=None, rank=None, world_size=None, device="cpu",
                 prefetch=8, slots=4, convert=None, state=None, token=None,
                 join_timeout_ms=60000, cuda_device=None, cuda_stream=None,
                 job=None, data_root=None, with_meta=False, as_dict=False,
                 copy=False, pin_memory=False, xla_device=None, tls_ca=None,
                 tls_cert=None, tls_key=None, auto_finish=True, working_set=None,
                 working_set_max=None, log=True, no_worker_timeout_ms=None,
                 last_batch="pad"):
        if device not in DEVICES:
            raise ValueError("device must be 'cpu', 'cuda' or 'xla', not %r" % (device,))
        if with_meta and as_dict:
            raise ValueError("with_meta and as_dict are exclusive (the dict has every "
                             "tensor; Loader.batch has the rest)")
        if last_batch not in _LAST_BATCH:
            raise ValueError("last_batch must be 'pad', 'trim' or 'mark', not %r"
                             % (last_batch,))
        self.last_batch = last_batch
        self._pad_said = False
        self._xla = _xla() if device == "xla" else None
        if convert not in _lib.CONVERT:
            raise ValueError("convert must be None, 'float32' or 'bfloat16'")
        if not coordinator and job is None and not os.environ.get("STOKER_COORDINATOR"):
            raise ValueError("give coordinator='host:port' or set STOKER_COORDINATOR "
                             "(or job=... for local mode)")
        for name, v, lo, hi in (("rank", rank, 0, 0xFFFFFFFE),
                                ("world_size", world_size, 1, 0xFFFFFFFF),
                                ("cuda_device", cuda_device, 0, 0x7FFFFFFF),
                                ("working_set", working_set, 1, 1024),
                                ("working_set_max", working_set_max, 1, 1024),
                                ("no_worker_timeout_ms", no_worker_timeout_ms, 1,
                                 0xFFFFFFFF)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                                  or not lo <= v <= hi):
                raise ValueError("%s must be None (from the environment) or an int in "
                                 "%d..%d, not %r" % (name, lo, hi, v))
        self.rank, self.world_size = rank, world_size
        self._args = dict(coordinator=coordinator, rank=rank, world_size=world_size,
                          device="cpu" if device == "xla" else device,
                          prefetch=prefetch, slots=slots,
                          convert=convert, token=token,
                          join_timeout_ms=join_timeout_ms, cuda_device=cuda_device,
                          cuda_stream=cuda_stream, job=job, data_root=data_root,
                          tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
                          working_set=working_set, working_set_max=working_set_max,
                          log=log, no_worker_timeout_ms=no_worker_timeout_ms)
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 3:
            raise ValueError("slots must be an int >= 3, not %r" % (slots,))
        self.slots = slots
        self._state = bytes(state) if state is not None else None
        self._c = None
        self._slot = None  # the current batch's _Slot
        self._held = _Held()
        self._copy_said = False
        self.auto_finish = bool(auto_finish)
        self._done = False
        self._finished = False
        self.with_meta = with_meta
        self.as_dict = as_dict
        self.copy = bool(copy) or device == "xla"
        self.pin_memory = bool(pin_memory)
        self.device = device
        self._xla_device = xla_device
        self._want_epoch = None
        self._drop_last = None
        self._past_end_said = False
        self._failed = False  # a step raised StokerError
        self.batch = None
        _live.add(self)

    # ---- lifecycle --------------------------------------------------------
    def _open(self):
        if self._c is not None:
            return self._c
        a = self._args
        cfg = _lib.Config()
        lib.stk_client_config_defaults(ctypes.byref(cfg))
        keep = []
        if a["coordinator"]:
            keep.append(a["coordinator"].encode())
            cfg.coordinator = keep[-1]
        if a["rank"] is not None:
            cfg.rank = a["rank"]
        if a["world_size"] is not None:
            cfg.world_size = a["world_size"]
        cfg.prefetch, cfg.slots = a["prefetch"], a["slots"]
        cfg.device = _lib.DEVICE_CUDA if a["device"] == "cuda" else _lib.DEVICE_CPU
        if a["cuda_device"] is not None:
            cfg.cuda_device = a["cuda_device"]
        if a["cuda_stream"] is not None:
            s = a["cuda_stream"]
            cfg.cuda_stream = getattr(s, "cuda_stream", s)  # torch.cuda.Stream or int
        cfg.convert = _lib.CONVERT[a["convert"]]
        cfg.join_timeout_ms = a["join_timeout_ms"]
        if a["no_worker_timeout_ms"] is not None:
            cfg.no_worker_timeout_ms = a["no_worker_timeout_ms"]
        if a["working_set"] is not None:
            cfg.working_set = a["working_set"]
        if a["working_set_max"] is not None:
            cfg.working_set_max = a["working_set_max"]
        env_log = os.environ.get("STOKER_CLIENT_LOG")
        cfg.log = 1 if a["log"] and env_log not in ("0", "off") else 2
        if a["token"]:
            keep.append(a["token"].encode())
            cfg.token = keep[-1]
        for k in ("tls_ca", "tls_cert", "tls_key"):
            if a[k]:
                keep.append(os.fsencode(a[k]))
                setattr(cfg, k, keep[-1])
        if self._state is not None:
            sbuf = ctypes.create_string_buffer(self._state, len(self._state))
            keep.append(sbuf)
            cfg.resume_state = ctypes.cast(sbuf, ctypes.c_void_p)
            cfg.resume_len = len(self._state)
        err = ctypes.create_string_buffer(1024)
        # What was not given comes from the environment (open would do the
        # same; resolving here lets .rank/.world_size report it).
        st = lib.stk_client_config_from_env(ctypes.byref(cfg), err, len(err))
        if st != 0:
            raise StokerError(st, err.value.decode(errors="replace"))
        self.rank, self.world_size = int(cfg.rank), int(cfg.world_size)
        c = ctypes.c_void_p()
        if a["job"] is not None:
            root = a["data_root"].encode() if a["data_root"] else None
            st = lib.stk_client_open_local(ctypes.byref(cfg), a["job"].encode(), root,
                                           ctypes.byref(c), err, len(err))
        else:
            # The join waits (up to join_timeout_ms): on a helper thread, so
            # Ctrl-C interrupts it (stk_interrupt) within a fraction of a
            # second; a client that opened all the same is closed.
            try:
                st = _interruptible(lambda: lib.stk_client_open(
                    ctypes.byref(cfg), ctypes.byref(c), err, len(err)))
            except BaseException:
                if c.value:
                    lib.stk_client_close(c)
                raise
        if st != 0:
            raise StokerError(st, err.value.decode(errors="replace"))
        self._c = c
        return c

    def _error(self, st):
        msg = lib.stk_client_error(self._c) if self._c else b""
        return StokerError(st, (msg or lib.stk_strerror(st)).decode(errors="replace"))

    def _release(self):
        """Drop the loader's own hold of the current batch: its slot goes
        back once no tensor views it."""
        self._slot = None
        self.batch = None

    def close(self):
        """Release the current slot and close the client. A rank that was
        handed every step of every epoch is finished first (if it was not
        yet); one that stopped early is not: call finish() for that.
        Tensors still alive keep their memory: the library frees each slot
        when the last tensor viewing it is gone."""
        self._release()
        if self._c is not None:
            if self._all_delivered():
                self._auto_finish()
            lib.stk_client_close(self._c)
            self._c = None
            # batches still held belong to the closed client's ring, not to
            # the next one's (a reopen starts with every slot free)
            self._held = _Held()

    def finish(self, shutdown_job=False):
        """Tell the coordinator this rank is done (rank 0 may end the job
        with shutdown_job=True). Needed only when the script stops before
        the end of its last epoch: the end of the data finishes the rank by
        itself. Raises StokerError when the coordinator cannot be reached
        within a few seconds (its idle timeout still ends the job)."""
        c = self._open()
        st = _interruptible(lambda: lib.stk_client_finish(c, 1 if shutdown_job else 0), c)
        if st != 0:
            raise self._error(st)
        self._finished = True

    def _all_delivered(self):
        """Every step of every epoch was handed out (the client is open)."""
        e, step = ctypes.c_uint64(), ctypes.c_uint64()
        if lib.stk_client_position(self._c, ctypes.byref(e), ctypes.byref(step)) != 0:
            return False
        j = _lib.JobSpec()
        lib.stk_client_job(self._c, ctypes.byref(j))
        return e.value >= j.epochs

    def _auto_finish(self):
        """finish() at the end of the data: never raises (the training
        loop succeeded); a failure is said on stderr."""
        if self._finished or not self.auto_finish:
            return
        try:
            self.finish()
        except StokerError as e:
            sys.stderr.write("stoker: rank %s: could not finish at the end of the data: "
                             "%s\n" % (self.rank, e))

    def _finish_at_exit(self):
        """The interpreter exits normally with this rank open and stopped
        early: finish it (auto_finish), so the job does not wait for the
        coordinator's idle timeout; said on stderr (log=True). Not after
        a step failed (StokerError): the rank did not stop by choice; nor
        in local mode (job=...: no coordinator to tell)."""
        if (self._c is None or self._finished or self._failed or not self.auto_finish
                or self._args["job"] is not None or self._all_delivered()):
            return
        e, step = ctypes.c_uint64(), ctypes.c_uint64()
        lib.stk_client_position(self._c, ctypes.byref(e), ctypes.byref(step))
        if self._args["log"] and os.environ.get("STOKER_CLIENT_LOG") not in ("0", "off"):
            sys.stderr.write(
                "stoker: rank %s stopped early (at epoch %d step %d of %d epochs) and the "
                "script exits: finishing the rank (Loader(auto_finish=False) keeps it "
                "open)\n" % (self.rank, e.value, step.value, self.epochs))
        self._auto_finish()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---- iteration --------------------------------------------------------
    @property
    def steps_per_epoch(self):
        return int(lib.stk_client_steps_per_epoch(self._open()))

    # Fields the job text names rather than numbers (as a job file says them).
    _NAMED = ("source", "pipeline", "dtype", "layout", "token_dtype", "drop_last",
              "eod_mask_loss", "reset_position_ids", "loss_mask", "position_ids",
              "view1", "view2", "view3")

    @property
    def job(self):
        """The job spec as a dict (num_samples resolved); the enum and flag
        fields as a job file writes them ("dtype": "float32", "layout":
        "nchw", "drop_last": True, "shuffle": True), the rest as numbers and strings; a view
        with a chain of its own as "view1": its chain text (its size in
        view_height/view_width)."""
        j = _lib.JobSpec()
        lib.stk_client_job(self._open(), ctypes.byref(j))
        n = lib.stk_job_spec_format(ctypes.byref(j), None, 0)
        text = ctypes.create_string_buffer(n + 1)
        lib.stk_job_spec_format(ctypes.byref(j), text, n + 1)
        named = {}
        for line in text.value.decode(errors="replace").split("\n"):
            k, eq, v = line.partition(" = ")
            if eq and k in self._NAMED:
                named[k] = {"true": True, "false": False}.get(v, v)
        out = {}
        for k, _ in _lib.JobSpec._fields_:
            if k in ("reserved", "view_chain", "pad0"):
                continue
            if k == "in_order":  # job key shuffle, stored inverted
                out["shuffle"] = not j.in_order
                continue
            v = getattr(j, k)
            if isinstance(v, bytes):
                v = v.decode(errors="replace")
            elif not isinstance(v, (int, float)):
                v = list(v)
            out[k] = named.get(k, v)
        # views with chains of their own: "view1": its chain text
        out.update({k: v for k, v in named.items() if k.startswith("view")})
        return out

    @property
    def classes(self):
        """ImageFolder jobs: the class names, label i being classes[i] (the
        class folders sorted as torchvision's ImageFolder sorts them), as
        the dataset's workers report them; None for other sources, and for
        a dataset with more class names than travel (over 32768 or 256 KiB:
        loader.job["num_classes"] still holds the count)."""
        c = self._open()
        n = lib.stk_client_num_classes(c)
        if n == 0:
            return None
        names = []
        for i in range(n):
            b = lib.stk_client_class_name(c, i)
            if b is None:
                return None
            names.append(b.decode("utf-8", errors="surrogateescape"))
        return names

    @property
    def class_to_idx(self):
        """ImageFolder jobs: {class name: label}, as torchvision's
        ImageFolder.class_to_idx; None where classes is None."""
        names = self.classes
        return None if names is None else {name: i for i, name in enumerate(names)}

    @property
    def epochs(self):
        return int(self.job["epochs"])

    def __len__(self):
        """Batches per epoch for this rank (as len(DataLoader))."""
        return self.steps_per_epoch

    @property
    def epoch(self):
        """The epoch the next `for` iterates (the one it continues if a
        previous loop stopped early or the loader resumed mid-epoch)."""
        e, step = ctypes.c_uint64(), ctypes.c_uint64()
        st = lib.stk_client_position(self._open(), ctypes.byref(e), ctypes.byref(step))
        if st != 0:
            raise self._error(st)
        return int(e.value)

    def set_epoch(self, epoch):
        """Iterate `epoch` next, as DistributedSampler.set_epoch: the epoch
        the loader is at continues (nothing delivered twice); another epoch
        starts over at its first step (reopening the client). Takes effect
        at the next `for`."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError("epoch must be an int >= 0, not %r" % (epoch,))
        self._want_epoch = epoch

    def _seek(self):
        e, self._want_epoch = self._want_epoch, None
        if e is None or e == self.epoch:
            return
        epochs = self.epochs
        if e >= epochs:
            raise ValueError("set_epoch(%d): the job has %d epochs (0..%d)"
                             % (e, epochs, epochs - 1))
        n = ctypes.c_size_t(0)
        lib.stk_client_state_at(self._c, e, None, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        st = lib.stk_client_state_at(self._c, e, buf, ctypes.byref(n))
        if st != 0:
            raise self._error(st)
        self.load_state_dict({"stoker_state": buf.raw[:n.value]})
        self._open()

    def __iter__(self):
        self._open()
        self._seek()
        if self._xla is None:
            return self._epoch()
        xm, pl = self._xla
        dev = self._xla_device if self._xla_device is not None else xm.xla_device()
        return iter(pl.MpDeviceLoader(_OneEpoch(self), dev))

    def _past_end(self):
        """A `for` that got nothing because every epoch was handed out:
        said once (warnings.warn, a RuntimeWarning), naming the epochs."""
        if self._past_end_said:
            return
        self._past_end_said = True
        n = self.epochs
        msg = ("stoker: rank %s: iterating past the job's last epoch: the job has %d "
               "epoch%s (0..%d), all handed out; this loop and later ones get no "
               "batches (loop over range(loader.epochs))"
               % (self.rank, n, "" if n == 1 else "s", n - 1))
        warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def _epoch(self):
        fresh = True  # nothing handed out by this `for` yet
        got = False   # this `for` yielded a batch
        if self._done:
            self._past_end()
        while not self._done:
            self._release()
            b = ctypes.c_void_p()
            # Short waits, so Python runs its signal handlers between them:
            # Ctrl-C raises KeyboardInterrupt here within _SLICE_MS, the
            # client intact (a later `for` goes on where this one stopped).
            st = lib.stk_client_next_timed(self._c, ctypes.byref(b), _SLICE_MS)
            while st == _lib.STK_TIMEOUT:
                st = lib.stk_client_next_timed(self._c, ctypes.byref(b), _SLICE_MS)
            if st == _lib.STK_END_OF_EPOCH and fresh:
                # The end of the previous epoch, left unread by a loop that
                # took exactly len(loader) steps: this `for` is the next epoch.
                fresh = False
                continue
            fresh = False
            if st == _lib.STK_END_OF_EPOCH:
                self._release()
                if self._all_delivered():  # the last epoch: this rank is done
                    self._auto_finish()
                return
            if st == _lib.STK_END_OF_DATA:
                self._done = True
                self._auto_finish()
                if not got:
                    self._past_end()
                return
            if st != 0:
                self._failed = True  # not finished at exit (_finish_at_exit)
                raise self._error(st)
            self.batch = self._describe(b)
            self._last_rows()
            got = True
            if self.as_dict:
                yield dict(self.batch.tensors)
            elif self.with_meta:
                yield self.batch.images, self.batch.labels, self.batch
            else:
                yield self.batch.images, self.batch.labels
        self._release()

    def _last_rows(self):
        """Apply last_batch to a batch with padding rows (mask 0; they are
        the last rows of the batch): trim them or label them -1."""
        b = self.batch
        if b.mask is None or self._job_drops_last():
            return
        B = int(b.mask.shape[0])
        real = int(b.mask.sum())
        if real == B:
            return
        if self.last_batch == "pad":
            if not self._pad_said:
                self._pad_said = True
                sys.stderr.write(
                    "stoker: rank %s: epoch %d step %d holds %d padding rows (drop_last = "
                    "false): repeated samples with their real labels, mask 0 in "
                    "batch.mask; Loader(last_batch=\"trim\") leaves them out, "
                    "last_batch=\"mark\" labels them -1\n"
                    % (self.rank, b.epoch, b.step, B - real))
            return
        if self.last_batch == "trim":
            def cut(x):
                return x[:real] if x is not None and x.dim() and x.shape[0] == B else x
            b.images = [cut(x) for x in b.images] if isinstance(b.images, list) \
                else cut(b.images)
            b.labels, b.label, b.target = cut(b.labels), cut(b.label), cut(b.target)
            b.tensors = [(nm, x if nm in ("mask", "index") else cut(x))
                         for nm, x in b.tensors]
            return
        # "mark": the labels (a copy: the slot's own bytes stay as built)
        lab = b.label.clone()
        lab[real:] = -1
        if b.labels is b.label:
            b.labels = lab
        b.label = lab
        b.tensors = [(nm, lab if nm == "label" else x) for nm, x in b.tensors]

    def _job_drops_last(self):
        """The job's drop_last (then no batch has padding rows), read once."""
        if self._drop_last is None:
            j = _lib.JobSpec()
            lib.stk_client_job(self._c, ctypes.byref(j))
            self._drop_last = bool(j.drop_last)
        return self._drop_last

    def _own(self, x):
        """An owned copy of a slot view (the copy=True mode)."""
        if x.device.type != "cpu":
            return x.clone()
        pin = self.pin_memory and _torch().cuda.is_available()
        y = _torch().empty(x.shape, dtype=x.dtype, pin_memory=pin)
        return y.copy_(x)

    def _describe(self, b):
        # Held by the loader until the next step (payload(), .batch), and by
        # every zero-copy tensor for as long as it lives.
        self._slot = owner = _Slot(b, self._held)
        ts = []
        for i in range(lib.stk_batch_num_tensors(b)):
            t = _lib.Tensor()
            lib.stk_batch_tensor(b, i, ctypes.byref(t))
            ts.append(t)
        n = ctypes.c_size_t()
        payload = lib.stk_batch_payload(b, ctypes.byref(n))
        tensors = [_as_tensor(t, owner) for t in ts]
        # The library hands out a batch only while the caller holds at most
        # slots - 2: so one slot is always there to copy through when the
        # caller keeps tensors of that many batches.
        copy = self.copy or self._held.n > self.slots - 2
        if copy and not self.copy and not self._copy_said:
            self._copy_said = True
            sys.stderr.write(
                "stoker: rank %s: tensors of %d earlier batches are still alive (kept past "
                "their step), which holds every zero-copy slot of the ring (slots=%d): "
                "batches come as copies until some are freed (clone() what you keep, or "
                "raise slots=)\n" % (self.rank, self._held.n - 1, self.slots))
        if copy:
            tensors = [self._own(x) for x in tensors]
        names = [(t.name or b"tensor%d" % i).decode(errors="replace")
                 for i, t in enumerate(ts)]
        # views = V: image0 .. image{V-1}, then label, mask, index by name
        views = [x for nm, x in zip(names, tensors)
                 if nm.startswith("image") and nm[5:].isdigit()]
        if views:
            by = dict(zip(names, tensors))
            images, labels = views, by.get("label")
            mask, index = by.get("mask"), by.get("index")
        else:
            images, labels = tensors[0], tensors[1]
            mask = tensors[2] if len(tensors) > 2 else None
            index = tensors[3] if len(tensors) > 3 else None
        # a chain ending in mixup/cutmix: the soft targets stand for the labels
        label = labels
        target = tensors[4] if len(tensors) > 4 and names[4] == "target" else None
        if target is not None:
            labels = target
        return types.SimpleNamespace(
            epoch=int(lib.stk_batch_epoch(b)), step=int(lib.stk_batch_step(b)),
            sample_offset=int(lib.stk_batch_sample_offset(b)),
            images=images, labels=labels, label=label, target=target, mask=mask,
            index=index,
            tensors=list(zip(names, tensors)),
            pointers=[t.data for t in ts], payload_ptr=payload,
            payload_len=n.value)

    def payload(self):
        """bytes of the current batch's payload as the workers sent it."""
        if self.batch is None:
            raise RuntimeError("no current batch")
        return ctypes.string_at(self.batch.payload_ptr, self.batch.payload_len)

    def reference(self, epoch, step, data_root=None):
        """The reference payload of (epoch, step) for this rank, built
        in-process (stk_client_reference: at the epoch's sample offset, so
        also for an epoch resumed with another world size); for
        verification."""
        c = self._open()
        n = int(lib.stk_client_payload_bytes(c))
        buf = ctypes.create_string_buffer(n)
        st = lib.stk_client_reference(c, epoch, step,
                                      data_root.encode() if data_root else None, buf, n)
        if st != 0:
            raise self._error(st)
        return buf.raw

    # ---- state and stats --------------------------------------------------
    def state_dict(self):
        """{"stoker_state": bytes}: resume exactly at the next undelivered
        step with load_state_dict (or Loader(state=...)).

        Elastic resume: a Loader of a job that differs only in world_size
        may load any rank's state; it continues the epoch at the global
        sample position the state names (step * world_size * batch_size
        of the saving job), so over all new ranks no sample comes twice
        and none is skipped -- provided every new rank loads a state of the
        same position (in a synchronous loop all ranks save at the same
        step: give every new rank, e.g., rank 0's state). That epoch's
        batches carry batch.sample_offset (0 elsewhere) and its step count
        may differ by one from len(loader). With the same world_size each
        rank must load its own state. docs/operations.md, "Elastic resume"."""
        c = self._open()
        n = ctypes.c_size_t(0)
        lib.stk_client_save_state(c, None, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        st = lib.stk_client_save_state(c, buf, ctypes.byref(n))
        if st != 0:
            raise self._error(st)
        return {"stoker_state": buf.raw[:n.value]}

    def load_state_dict(self, d):
        """Resume from a state_dict(); reopens the client if already open."""
        self._state = bytes(d["stoker_state"])
        self._done = False
        if self._c is not None:
            self.close()

    def set_step_ms(self, ms):
        """Tell the library the loop's own compute time per step, ms (e.g.
        from CUDA events): stats()["step_ms"] and the figures the
        coordinator's verdict and `stoker plan --coordinator` use then take
        it instead of the time measured outside next() (which a CPU-
        throttled host inflates). 0 measures again (stk_client_set_step_ms)."""
        st = lib.stk_client_set_step_ms(self._open(), float(ms))
        if st:
            raise ValueError("set_step_ms: want a number in 0..1e7 ms, got %r" % (ms,))

    def stats(self):
        """Counters as a dict (see stk_stats in client.h)."""
        s = _lib.Stats()
        lib.stk_client_stats(self._open(), ctypes.byref(s))
        out = {k: getattr(s, k) for k, _ in _lib.Stats._fields_
               if k not in ("workers", "reserved")}
        out["workers"] = [
            {"address": w.address.decode(errors="replace"), "batches": w.batches,
             "bytes": w.bytes, "batches_per_s": w.batches_per_s,
             "outstanding": w.outstanding, "alive": bool(w.alive)}
            for w in s.workers[:s.nworkers]]
        return out


# Loaders still open at interpreter exit are closed then, before ctypes and
# the library go: a rank that was handed all its data is finished, and so is
# one that stopped early when the interpreter exits without an uncaught
# exception (sys.last_value unset: Ctrl-C and crashes leave the rank open,
# so a restarted script resumes it).
_live = weakref.WeakSet()


@atexit.register
def _close_all():
    clean = getattr(sys, "last_value", None) is None and \
        getattr(sys, "last_exc", None) is None
    for loader in list(_live):
        try:
            if clean:
                loader._finish_at_exit()
            loader.close()
        except Exception:
            pass


class _OneEpoch:
    """One epoch of a Loader as a sized iterable (what MpDeviceLoader wraps):
    iterating it runs the loader's epoch; len() is the steps per epoch."""

    def __init__(self, loader):
        self._loader = loader

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        return self._loader._epoch()
