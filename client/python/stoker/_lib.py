"""_lib.py - loads libstoker with ctypes and declares the C API: struct
mirrors of include/stoker/client.h (checked against the library's own sizes
with stk_client_struct_size) and every function's argtypes/restype.

Where libstoker comes from, first match wins:
  1. $STOKER_LIB (a path to libstoker.so*)
  2. the package's own copy (stoker/libstoker.so*): the wheel's
     (scripts/wheel.sh), which finds its libraries in ../stoker.libs
  3. the directory cmake --install recorded in stoker/_installed.py
  4. a CMake build tree above the package (build*/client/libstoker.so)
  5. ctypes.util.find_library("stoker") (the system's library path)
"""
import ctypes
import ctypes.util
import glob
import os

STK_OK, STK_END_OF_EPOCH, STK_END_OF_DATA = 0, 1, 2
STK_STATUS_NAMES = {
    0: "OK", 1: "END_OF_EPOCH", 2: "END_OF_DATA", 3: "INVALID_ARGUMENT",
    4: "NO_MEMORY", 5: "IO", 6: "CORRUPT", 7: "LIMIT", 8: "UNAVAILABLE",
    9: "TIMEOUT", 10: "MISMATCH", 11: "PROTOCOL", 12: "CANCELLED",
    13: "UNSUPPORTED", 14: "STATE", 15: "NOT_FOUND", 16: "INTERNAL",
    17: "INTERRUPTED", 18: "USER_CODE",
}
STK_TIMEOUT, STK_INTERRUPTED = 9, 17
DEVICE_CPU, DEVICE_CUDA = 1, 2
# "not given" values of stk_client_config (taken from the environment)
RANK_FROM_ENV, WORLD_SIZE_FROM_ENV, CUDA_DEVICE_FROM_ENV = 0xFFFFFFFF, 0, -1
CONVERT = {None: 0, "none": 0, "float32": 1, "bfloat16": 2}
MAX_DIMS, MAX_TENSORS, MAX_WORKER_STATS = 4, 8, 32


class Config(ctypes.Structure):
    _fields_ = [
        ("coordinator", ctypes.c_char_p),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("prefetch", ctypes.c_uint32),
        ("slots", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("cuda_device", ctypes.c_int32),
        ("cuda_stream", ctypes.c_void_p),
        ("convert", ctypes.c_int32),
        ("token", ctypes.c_char_p),
        ("resume_state", ctypes.c_void_p),
        ("resume_len", ctypes.c_size_t),
        ("join_timeout_ms", ctypes.c_uint32),
        ("verify_crc", ctypes.c_uint32),
        ("tls_ca", ctypes.c_char_p),
        ("tls_cert", ctypes.c_char_p),
        ("tls_key", ctypes.c_char_p),
        ("working_set", ctypes.c_uint32),
        ("working_set_max", ctypes.c_uint32),
        ("log", ctypes.c_uint32),
        ("no_worker_timeout_ms", ctypes.c_uint32),
        ("reserved", ctypes.c_uint8 * 88),
    ]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("device", ctypes.c_int32),
    ]


class WorkerStats(ctypes.Structure):
    _fields_ = [
        ("address", ctypes.c_char * 64),
        ("batches", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("batches_per_s", ctypes.c_double),
        ("outstanding", ctypes.c_uint32),
        ("alive", ctypes.c_uint32),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("stall_ns", ctypes.c_uint64),
        ("wall_ns", ctypes.c_uint64),
        ("stall_fraction", ctypes.c_double),
        ("reissued", ctypes.c_uint64),
        ("duplicates", ctypes.c_uint64),
        ("crc_errors", ctypes.c_uint64),
        ("substituted", ctypes.c_uint64),
        ("workers_alive", ctypes.c_uint32),
        ("nworkers", ctypes.c_uint32),
        ("workers_needed", ctypes.c_double),
        ("workers", WorkerStats * MAX_WORKER_STATS),
        ("coordinator_watching", ctypes.c_uint32),
        ("workers_dropped", ctypes.c_uint32),
        ("hedges_sent", ctypes.c_uint64),
        ("hedges_won", ctypes.c_uint64),
        ("hedge_dropped", ctypes.c_uint64),
        ("device_convert", ctypes.c_uint32),
        ("working_set", ctypes.c_uint32),
        ("workers_listed", ctypes.c_uint32),
        ("step_ms", ctypes.c_float),
        ("recv_cpu_s_per_gb", ctypes.c_float),
        ("recv_cpu_s", ctypes.c_double),
        ("reserved", ctypes.c_uint8 * 4),
        ("recv_cpu_user_s_per_gb", ctypes.c_float),
        ("recv_cpu_sys_s_per_gb", ctypes.c_float),
        ("recv_cpu_user_s", ctypes.c_double),
        ("recv_cpu_sys_s", ctypes.c_double),
        ("host_cores", ctypes.c_double),
        ("recv_host_share", ctypes.c_double),
    ]


class JobSpec(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 64), ("source", ctypes.c_int32),
        ("dataset", ctypes.c_char * 512), ("num_samples", ctypes.c_uint64),
        ("pipeline", ctypes.c_int32), ("height", ctypes.c_uint32),
        ("width", ctypes.c_uint32), ("channels", ctypes.c_uint32),
        ("dtype", ctypes.c_int32), ("layout", ctypes.c_int32),
        ("batch_size", ctypes.c_uint32), ("world_size", ctypes.c_uint32),
        ("seed", ctypes.c_uint64), ("epochs", ctypes.c_uint32),
        ("drop_last", ctypes.c_int32), ("num_classes", ctypes.c_uint32),
        ("synthetic_cost_us", ctypes.c_uint32), ("resize", ctypes.c_uint32),
        ("scale_min", ctypes.c_float), ("scale_max", ctypes.c_float),
        ("ratio_min", ctypes.c_float), ("ratio_max", ctypes.c_float),
        ("flip_p", ctypes.c_float), ("brightness", ctypes.c_float),
        ("contrast", ctypes.c_float), ("saturation", ctypes.c_float),
        ("mean", ctypes.c_float * 3), ("std", ctypes.c_float * 3),
        # token jobs (source = megatron)
        ("seq_len", ctypes.c_uint32), ("token_dtype", ctypes.c_int32),
        ("eod_mask_loss", ctypes.c_int32), ("eod_token", ctypes.c_int64),
        ("reset_position_ids", ctypes.c_int32), ("loss_mask", ctypes.c_int32),
        ("position_ids", ctypes.c_int32),
        # pipeline = chain (docs/pipelines.md)
        ("plugin", ctypes.c_char * 64), ("chain", ctypes.c_char * 960),
        ("views", ctypes.c_uint32),
        # views 1..3 with chains of their own (job keys view1..view3)
        ("view_chain", ctypes.c_uint16 * 3), ("pad0", ctypes.c_uint16),
        ("view_height", ctypes.c_uint32 * 3), ("view_width", ctypes.c_uint32 * 3),
        ("in_order", ctypes.c_int32),
        # job key bad_samples ("" = the default)
        ("bad_samples", ctypes.c_char * 32),
        ("reserved", ctypes.c_uint8 * 156),
    ]


def _candidates():
    env = os.environ.get("STOKER_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for p in sorted(glob.glob(os.path.join(here, "libstoker.so*"))):
        yield p
    try:
        from ._installed import LIBDIR
        for p in sorted(glob.glob(os.path.join(LIBDIR, "libstoker.so*"))):
            yield p
    except ImportError:
        pass
    d = here
    for _ in range(6):
        d = os.path.dirname(d)
        for p in sorted(glob.glob(os.path.join(d, "build*", "client", "libstoker.so"))):
            yield p
    name = ctypes.util.find_library("stoker")
    if name:
        yield name


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise ImportError("libstoker not found (set STOKER_LIB to libstoker.so); tried: "
                      + ("; ".join(errors) or "nothing"))


lib, lib_path = _load()

_P = ctypes.c_void_p
_sigs = {
    "stk_client_config_defaults": (None, [ctypes.POINTER(Config)]),
    "stk_client_config_from_env": (ctypes.c_int, [ctypes.POINTER(Config), ctypes.c_char_p,
                                                  ctypes.c_size_t]),
    "stk_client_open": (ctypes.c_int, [ctypes.POINTER(Config), ctypes.POINTER(_P),
                                       ctypes.c_char_p, ctypes.c_size_t]),
    "stk_client_open_local": (ctypes.c_int, [ctypes.POINTER(Config), ctypes.c_char_p,
                                             ctypes.c_char_p, ctypes.POINTER(_P),
                                             ctypes.c_char_p, ctypes.c_size_t]),
    "stk_client_next": (ctypes.c_int, [_P, ctypes.POINTER(_P)]),
    "stk_client_next_timed": (ctypes.c_int, [_P, ctypes.POINTER(_P), ctypes.c_uint32]),
    "stk_client_interrupt": (None, [_P]),
    "stk_interrupt": (None, []),
    "stk_batch_release": (None, [_P]),
    "stk_batch_epoch": (ctypes.c_uint64, [_P]),
    "stk_batch_step": (ctypes.c_uint64, [_P]),
    "stk_batch_sample_offset": (ctypes.c_uint64, [_P]),
    "stk_batch_num_tensors": (ctypes.c_uint32, [_P]),
    "stk_batch_tensor": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(Tensor)]),
    "stk_batch_payload": (ctypes.c_void_p, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "stk_client_job": (ctypes.c_int, [_P, ctypes.POINTER(JobSpec)]),
    "stk_job_spec_format": (ctypes.c_size_t, [ctypes.POINTER(JobSpec), ctypes.c_char_p,
                                              ctypes.c_size_t]),
    "stk_client_steps_per_epoch": (ctypes.c_uint64, [_P]),
    "stk_client_num_classes": (ctypes.c_uint32, [_P]),
    "stk_client_class_name": (ctypes.c_char_p, [_P, ctypes.c_uint32]),
    "stk_client_save_state": (ctypes.c_int, [_P, ctypes.c_void_p,
                                             ctypes.POINTER(ctypes.c_size_t)]),
    "stk_client_position": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_uint64),
                                           ctypes.POINTER(ctypes.c_uint64)]),
    "stk_client_state_at": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_size_t)]),
    "stk_client_finish": (ctypes.c_int, [_P, ctypes.c_int]),
    "stk_client_stats": (None, [_P, ctypes.POINTER(Stats)]),
    "stk_client_set_step_ms": (ctypes.c_int, [_P, ctypes.c_double]),
    "stk_client_error": (ctypes.c_char_p, [_P]),
    "stk_client_close": (None, [_P]),
    "stk_client_reference": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.c_uint64,
                                            ctypes.c_char_p, ctypes.c_void_p,
                                            ctypes.c_size_t]),
    "stk_client_payload_bytes": (ctypes.c_uint64, [_P]),
    "stk_client_struct_size": (ctypes.c_size_t, [ctypes.c_char_p]),
    "stk_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "stk_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    "stk_dtype_from_name": (ctypes.c_int, [ctypes.c_char_p]),
    "stk_crc32c": (ctypes.c_uint32, [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]),
}
for _name, (_res, _args) in _sigs.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

# The dtypes from the library's own table (STK_DTYPE_MAP in
# include/stoker/core.h, read through stk_dtype_name), not a copy:
# DTYPE_NAMES number -> text ("uint8", ...: torch's names too), DTYPES
# text -> number.
DTYPE_NAMES = {}
for _v in range(1, 256):
    _n = lib.stk_dtype_name(_v)
    if _n:
        DTYPE_NAMES[_v] = _n.decode()
DTYPES = {_n: _v for _v, _n in DTYPE_NAMES.items()}
DTYPE_UINT8, DTYPE_FLOAT32, DTYPE_BFLOAT16 = DTYPES["uint8"], DTYPES["float32"], DTYPES["bfloat16"]
DTYPE_INT64, DTYPE_INT32 = DTYPES["int64"], DTYPES["int32"]  # labels; token jobs

for _cls, _cname in ((Config, b"stk_client_config"), (Tensor, b"stk_tensor"),
                     (Stats, b"stk_stats"), (JobSpec, b"stk_job_spec"), (WorkerStats, b"stk_worker_stats")):
    _want = lib.stk_client_struct_size(_cname)
    if _want != ctypes.sizeof(_cls):
        raise ImportError("libstoker at %s: %s is %d bytes, the binding expects %d "
                          "(library and binding versions differ)"
                          % (lib_path, _cname.decode(), _want, ctypes.sizeof(_cls)))
