"""Argument checks shared by every op: dtype, contiguity, size limits, per-channel
vectors, out=, backend resolution. Written for a short hot path: a well-formed call pays
a few attribute reads and dict lookups; the slow branches only run on unusual input."""
import operator

import numpy as np

from mpskern import backends
from mpskern._native import F16, F32

_CODES = {np.dtype(np.float32): F32, np.dtype(np.float16): F16}
_ndarray = np.ndarray
_empty = np.empty
INT32_LIMIT = 2 ** 31  # counts are int32 in metal/mk_args.h


def array(x, name, op):
    """(C-contiguous float32/float16 ndarray, dtype code). Non-contiguous and read-only
    arrays are fine (copied to C order); other dtypes raise TypeError with the fix."""
    if type(x) is not _ndarray:
        if not isinstance(x, _ndarray):
            x = np.asarray(x)
    code = _CODES.get(x.dtype)
    if code is None:
        _bad_dtype(x, name, op)
    if x.size >= INT32_LIMIT:  # before the copy: a broadcast view may be huge
        too_big(name, x.shape, op)
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return x, code


def _bad_dtype(x, name, op):
    dt = x.dtype
    if dt.kind == "f" and dt.itemsize in (2, 4):  # non-native byte order
        fix = f"{name}.astype(np.float{dt.itemsize * 8})"
    else:
        fix = f"{name}.astype(np.float32)"
    why = " (Metal has no double)" if dt.kind == "f" and dt.itemsize == 8 else ""
    if dt.kind == "f" and dt.itemsize in (2, 4) and not dt.isnative:
        why = " in native byte order; this array is byte-swapped"
    raise TypeError(f"{op}: {name} has dtype {dt}; mpskern computes in float32 or float16"
                    f"{why}: pass {fix}")


def too_big(name, shape, op):
    raise ValueError(f"{op}: {name} with shape {tuple(shape)} has 2**31 elements or more; "
                     "mpskern's kernels count in int32: split the work into smaller calls")


def same_dtype(x, name, ref, ref_name, op):
    """An array operand that must have the dtype of `ref` (e.g. conv weight vs x)."""
    y, _ = array(x, name, op)
    if y.dtype != ref.dtype:
        raise TypeError(f"{op}: {name} has dtype {y.dtype} but {ref_name} has {ref.dtype}; "
                        f"cast one so they match, e.g. {name}.astype({ref_name}.dtype)")
    return y


def vector(v, name, n, what, op, writable=False):
    """A per-channel / per-feature parameter as a C-contiguous float32 array of shape
    `n` (int or tuple). It may be given as float32 or float16. None stays None."""
    if v is None:
        return None
    if not isinstance(v, _ndarray):
        v = np.asarray(v)
    shape = (n,) if isinstance(n, int) else tuple(n)
    if v.shape != shape:
        raise ValueError(f"{op}: {name} has shape {v.shape} but {what}; pass an array of "
                         f"shape {shape}")
    if v.dtype not in _CODES:
        _bad_dtype(v, name, op)
    if v.dtype != np.float32 or not v.flags.c_contiguous or (writable and not v.flags.writeable):
        v = np.ascontiguousarray(v, dtype=np.float32)
        if writable and not v.flags.writeable:
            v = v.copy()
    return v.reshape(-1) if v.ndim != 1 else v


def axis(a, ndim, name, shape, op):
    """A normalised axis in [0, ndim)."""
    try:
        i = operator.index(a)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {a!r}") from None
    if i < -ndim or i >= ndim:
        raise ValueError(f"{op}: {name}={a} is out of range for an array with shape "
                         f"{tuple(shape)} (ndim {ndim}); use a value in {-ndim}..{ndim - 1}")
    return i + ndim if i < 0 else i


def real(v, name, op):
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be a real number, got {v!r}") from None


def whole(v, name, op, minimum, note=""):
    """An integer option that must be >= minimum. operator.index semantics: 2.5, "3" and
    True are TypeErrors, not truncated or taken as 1."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be an int, got {v!r}")
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {v!r}") from None
    if i < minimum:
        raise ValueError(f"{op}: {name}={i} must be >= {minimum}{note}")
    return i


def flag(v, name, op):
    """A yes/no option: bool, numpy bool or the integers 0/1. Anything else (an array, a
    string such as "False", None) is a TypeError rather than Python's truthiness."""
    if v is True or v is False:
        return v
    if isinstance(v, (np.bool_, int, np.integer)) and not isinstance(v, np.ndarray) and v in (0, 1):
        return bool(v)
    raise TypeError(f"{op}: {name} must be True or False, got {v!r}")


def check_size(shape, name, op):
    n = 1
    for s in shape:
        n *= s
    if n >= INT32_LIMIT:
        too_big(name, shape, op)


def output(out, shape, dtype, op, inputs=()):
    """(buffer the kernel writes, out or None). The buffer is `out` itself when it is a
    C-contiguous writable array sharing no memory with the inputs; otherwise a fresh
    array that `finish` copies into `out`."""
    if out is None:
        return _empty(shape, dtype), None
    if not isinstance(out, _ndarray):
        raise TypeError(f"{op}: out must be a numpy array, got {type(out).__name__}")
    if out.shape != tuple(shape) or out.dtype != dtype:
        raise ValueError(f"{op}: out has shape {out.shape} and dtype {out.dtype}, but the result "
                         f"has shape {tuple(shape)} and dtype {np.dtype(dtype)}; pass "
                         f"out=np.empty({tuple(shape)}, np.{np.dtype(dtype).name}) or out=None")
    if not out.flags.writeable:
        raise ValueError(f"{op}: out is read-only; pass a writable array or out=None")
    if out.flags.c_contiguous and not any(np.may_share_memory(out, a) for a in inputs
                                          if a is not None):
        return out, out
    return _empty(shape, dtype), out


def finish(y, out):
    """The op's return value: `out` (filled from `y` if the kernel wrote elsewhere) or y."""
    if out is None:
        return y
    if y is not out:
        out[...] = y
    return out


_resolved = {}


def backend(name):
    """The backend object for `name` (cached after the first successful resolution;
    ValueError for unknown names, BackendUnavailable for missing ones)."""
    try:
        be = _resolved.get(name)
    except TypeError:  # unhashable: let the registry produce its error
        be = None
    if be is None:
        be = backends.get(name)
        _resolved[name] = be
    return be
