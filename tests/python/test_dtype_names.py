"""test_dtype_names.py - the Python binding's dtypes are the library's.

The binding holds no dtype table of its own: stoker._lib reads it from
libstoker (stk_dtype_name over STK_DTYPE_MAP of include/stoker/core.h).
Checked here against the library, both ways (stk_dtype_from_name), and,
where torch is installed, that each text names the torch dtype the
binding hands out for it. No daemons; torch optional.
"""
import importlib.util
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, require, say_passes  # noqa: E402

require()
say_passes()
from stoker import _lib  # noqa: E402
import stoker  # noqa: E402

lib = _lib.lib
names = {}
for v in range(0, 256):
    n = lib.stk_dtype_name(v)
    if n:
        names[v] = n.decode()
check(names == _lib.DTYPE_NAMES, "the binding's dtypes are the library's: %s" % names)
check(sorted(names.values()) == ["bfloat16", "float32", "int32", "int64", "uint8"],
      "the library names five dtypes")
for v, n in names.items():
    check(lib.stk_dtype_from_name(n.encode()) == v, "%s <-> %d both ways" % (n, v))
    check(_lib.DTYPES[n] == v, "DTYPES[%r] == %d" % (n, v))
check(lib.stk_dtype_from_name(b"float16") == 0 and lib.stk_dtype_name(0) is None,
      "no dtype: 0 and None")
check((_lib.DTYPE_UINT8, _lib.DTYPE_FLOAT32, _lib.DTYPE_BFLOAT16, _lib.DTYPE_INT64,
       _lib.DTYPE_INT32) == tuple(_lib.DTYPES[n] for n in
                                  ("uint8", "float32", "bfloat16", "int64", "int32")),
      "the DTYPE_* constants are the table's")

if importlib.util.find_spec("torch") is not None:
    import torch
    for v, n in names.items():
        check(stoker._tdtype(v) is getattr(torch, n), "dtype %d is torch.%s" % (v, n))
    try:
        stoker._tdtype(99)
        check(False, "an unknown dtype is refused")
    except stoker.StokerError as e:
        check("not known" in str(e), "an unknown dtype is refused: %s" % e)
else:
    print("torch not importable: torch dtypes not checked")
print("%d check(s) failed" % len(fails) if fails else "test_dtype_names: ok")
sys.exit(1 if fails else 0)
