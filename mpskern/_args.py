"""Argument checks shared by every op: dtype, contiguity, size limits, per-channel
vectors, out=, backend resolution. Written for a short hot path: a well-formed call pays
a few attribute reads and dict lookups; the slow branches only run on unusual input."""
import sys

import numpy as np

from mpskern import backends, shapes, structs
from mpskern._outputs import empty as _empty   # large results reuse freed buffers
from mpskern._native import F16, F32

_CODES = {np.dtype(np.float32): F32, np.dtype(np.float16): F16}
_F32_DTYPE = np.dtype(np.float32)
_ndarray = np.ndarray
INT32_LIMIT = 2 ** 31  # counts are int32 in metal/mk_args.h


def array(x, name, op):
    """(C-contiguous float32/float16 ndarray, dtype code). Non-contiguous and read-only
    arrays are fine (copied to C order); other dtypes raise TypeError with the fix."""
    if type(x) is not _ndarray:
        x = _as_array(x, name, op)
    dt = x.dtype
    if dt is _F32_DTYPE:        # numpy's own float32 dtype object: no hashing of a dtype
        code = F32
    else:
        code = _CODES.get(dt)
        if code is None:
            _bad_dtype(x, name, op)
    if x.size >= INT32_LIMIT:  # before the copy: a broadcast view may be huge
        too_big(name, x.shape, op)
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return x, code


def rows(x, name, op):
    """As array(), but an ndarray view whose last dimension is contiguous (rows at any
    non-negative strides: the heads of one qkv projection) is returned as it is, for
    kernels that take row strides; other layouts are copied to C order."""
    if type(x) is not _ndarray or x.flags.c_contiguous or not row_strided(x):
        return array(x, name, op)
    code = _CODES.get(x.dtype)
    if code is None:
        _bad_dtype(x, name, op)
    if x.size >= INT32_LIMIT:
        too_big(name, x.shape, op)
    return x, code


def row_strided(x):
    """Whether ndarray x (size > 0) reads as rows of contiguous elements at non-negative
    strides that are whole elements, spanning fewer than 2**31 elements (int32 strides)."""
    if x.size == 0 or x.ndim == 0 or (x.shape[-1] > 1 and x.strides[-1] != x.itemsize):
        return False
    n = _elements_spanned(x)
    return n is not None and n < INT32_LIMIT


def _elements_spanned(x):
    """Elements from x's first to its last, or None where a stride is negative or partial."""
    es = x.itemsize
    n = 1
    for d, st in zip(x.shape, x.strides):
        if d > 1:
            if st < 0 or st % es:
                return None
            n += (d - 1) * (st // es)
    return n


def span(x):
    """The C-contiguous 1-D view of the memory from a row_strided array's first element to
    its last, what the kernels' pointer and the buffer protocol take."""
    if (n := _elements_spanned(x)) is None:
        raise ValueError(f"span: strides {x.strides} are not whole non-negative elements")
    return np.lib.stride_tricks.as_strided(x, (n,), (x.itemsize,),
                                           writeable=x.flags.writeable)


def _refuse_masked(x, name, op):
    ma = sys.modules.get("numpy.ma")           # (no masked array exists unless it is loaded)
    if ma is not None and isinstance(x, ma.MaskedArray):
        raise TypeError(f"{op}: {name} is a masked array; mpskern would ignore its mask: pass "
                        f"{name}.filled(value) with the value masked entries should take")


def _as_array(x, name, op):
    """The slow branch of array() and vector(): ndarray subclasses and everything else,
    with a TypeError that says what `x` is and the fix."""
    _refuse_masked(x, name, op)
    if isinstance(x, _ndarray):
        return x
    if x is None:
        raise TypeError(f"{op}: {name} is None; pass a numpy float32 or float16 array")
    kind = type(x).__name__
    what = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(x, name, op, what)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:       # ragged lists, objects numpy cannot take
        raise TypeError(f"{op}: {name} is {what}, not an array ({e}); pass a numpy float32 "
                        "or float16 array") from None
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{op}: {name} is {what}, not an array of numbers; pass a numpy "
                        "float32 or float16 array")
    if a.dtype not in _CODES:                  # numpy makes a list of floats float64
        raise TypeError(f"{op}: {name} is {what}, not a numpy array (as one it would be "
                        f"{a.dtype}); pass np.asarray({name}, dtype=np.float32)")
    return a


def _from_dlpack(x, name, op, what, floats=True):
    """A DLPack array (torch CPU tensors, JAX, MLX, CuPy, ...) as a numpy view of its memory,
    without a copy where the exporter allows it; the op's result is a numpy array. `floats`:
    refuse other dtypes than float32/float16 (else the caller checks the dtype)."""
    try:
        a = np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise TypeError(f"{op}: {name} is {what} that numpy cannot read through DLPack ({e}); "
                        "pass a float32 or float16 array in CPU memory (torch: "
                        f"{name}.detach().cpu().float())") from None
    if floats and a.dtype not in _CODES:
        raise TypeError(f"{op}: {name} is {what} of dtype {a.dtype}; mpskern computes in "
                        "float32 or float16: convert it first (torch: .float() or .half(); "
                        "numpy, JAX, MLX: .astype(float32))")
    return a


def any_array(x, name, op):
    """`x` as an ndarray of its own dtype (masks and other non-float inputs): numpy arrays
    as they are, DLPack arrays as views of their memory, anything else by np.asarray;
    masked arrays are refused (their mask would be ignored)."""
    _refuse_masked(x, name, op)
    if isinstance(x, _ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        kind = type(x).__name__
        return _from_dlpack(x, name, op, f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}",
                            floats=False)
    return np.asarray(x)


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


def same_dtype(x, name, ref, ref_name, op, take=array):
    """An operand that must have the dtype of `ref` (e.g. conv weight vs x). THE MIXED-DTYPE
    RULE, for every op: the operands (the arrays an op computes on: x, a, b, c, conv2d's
    and linear's weight, query/key/value) share one dtype, which the result has; the
    per-channel or per-feature vectors (biases, the norms' weight and bias, running
    statistics: see vector()) may be float32 or float16 with either, and are used in float32."""
    y, _ = take(x, name, op)
    if y.dtype != ref.dtype:
        raise TypeError(f"{op}: {name} has dtype {y.dtype} but {ref_name} has {ref.dtype}; an "
                        "op's operands share one dtype (only per-channel vectors such as biases "
                        f"may be float32 with float16): pass {name}.astype(np.{ref.dtype.name})")
    return y


def vector(v, name, n, what, op, writable=False):
    """A per-channel / per-feature parameter as a C-contiguous float32 array of shape
    `n` (int or tuple). It may be given as float32 or float16, whatever the operands'
    dtype (same_dtype states the rule). None stays None."""
    if v is None:
        return None
    if type(v) is not _ndarray:
        v = _as_array(v, name, op)
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
        i = shapes.index(a)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {a!r}") from None
    if i < -ndim or i >= ndim:
        raise ValueError(f"{op}: {name}={a} is out of range for an array with shape "
                         f"{tuple(shape)} (ndim {ndim}); use a value in {-ndim}..{ndim - 1}")
    return i + ndim if i < 0 else i


def alias(value, name, own, own_name, default, op):
    """The value of an option given by another library's name (torch's dim= for axis=):
    `value`, unless the option was given under both names."""
    if own is not default and own != value:
        raise TypeError(f"{op}: {name}={value!r} and {own_name}={own!r} name the same option "
                        f"({name} is torch's name for {own_name}); give only {own_name}=")
    return value


def real(v, name, op):
    """A real-number option. float() semantics but for text ("1e-5", b"2": float() parses
    them) and arrays of one element or more (a shape mistake): TypeErrors."""
    if isinstance(v, (str, bytes, bytearray)) or (isinstance(v, np.ndarray) and v.ndim):
        raise TypeError(f"{op}: {name} must be a real number, got {v!r}")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be a real number, got {v!r}") from None


def whole(v, name, op, minimum, note=""):
    """An integer option that must be >= minimum. operator.index semantics: 2.5, "3" and
    True are TypeErrors, not truncated or taken as 1."""
    try:
        i = shapes.index(v)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {v!r}") from None
    if i < minimum:
        raise ValueError(f"{op}: {name}={i} must be >= {minimum}{note}")
    if i >= INT32_LIMIT:
        raise ValueError(f"{op}: {name}={i} is 2**31 or more; mpskern's kernels take it as an "
                         f"int32: pass a smaller {name}")
    return i


def window(op, hw, kernel, stride, padding, dilation, out, count=False):
    """Sliding-window geometry (conv2d, pooling) whose index math fits the kernels' int32:
    every value below 2**31, the padded input (H + 2*padding) and the farthest tap,
    (P - 1)*stride + (kernel - 1)*dilation, too; with count, the window's element count.
    Pairs are (height, width) values; out is (P, Q). ValueError naming the argument."""
    for name, v in (("kernel_size", kernel), ("stride", stride), ("padding", padding),
                    ("dilation", dilation)):
        if v[0] >= INT32_LIMIT or v[1] >= INT32_LIMIT:
            raise ValueError(f"{op}: {name}={_pair_text(v)} is 2**31 or more; mpskern's "
                             f"kernels index in int32: pass a smaller {name}")
    for i, axis in ((0, "height"), (1, "width")):
        if hw[i] + 2 * padding[i] >= INT32_LIMIT:
            raise ValueError(f"{op}: padding={_pair_text(padding)} makes the padded input's "
                             f"{axis} {hw[i]} + 2*{padding[i]} = {hw[i] + 2 * padding[i]}, "
                             "2**31 or more; mpskern's kernels index in int32: pass a "
                             "smaller padding")
        reach = (out[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i]
        if reach >= INT32_LIMIT:
            raise ValueError(f"{op}: stride={_pair_text(stride)}, kernel_size="
                             f"{_pair_text(kernel)} and dilation={_pair_text(dilation)} reach "
                             f"{axis} offset ({out[i]} - 1)*{stride[i]} + ({kernel[i]} - 1)*"
                             f"{dilation[i]} = {reach}, 2**31 or more; mpskern's kernels "
                             "index in int32: pass a smaller stride or dilation")
    if count and kernel[0] * kernel[1] >= INT32_LIMIT:
        raise ValueError(f"{op}: kernel_size={_pair_text(kernel)} has {kernel[0] * kernel[1]} "
                         "elements per window, 2**31 or more; the kernels count a window's "
                         "elements in int32: pass a smaller kernel_size")


def _pair_text(v):
    return str(v[0]) if v[0] == v[1] else f"({v[0]}, {v[1]})"


def flag(v, name, op):
    """A yes/no option: bool, numpy bool or the integers 0/1. Anything else (an array, a
    string such as "False", None) is a TypeError rather than Python's truthiness."""
    if v is True or v is False:
        return v
    if isinstance(v, (np.bool_, int, np.integer)) and not isinstance(v, np.ndarray) and v in (0, 1):
        return bool(v)
    raise TypeError(f"{op}: {name} must be True or False, got {v!r}")


def activation(v, op):
    """The MK_ACT_* code of a fused activation name (None: none); ValueError listing the
    choices for anything else."""
    from mpskern.structs import ACTIVATIONS
    try:
        return ACTIVATIONS[v]
    except (KeyError, TypeError):
        raise ValueError(f"{op}: activation={v!r} is not one of "
                         f"{', '.join(map(repr, ACTIVATIONS))}") from None


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
        hint = (" (np.from_dlpack(out) is a numpy view of a DLPack array's memory)"
                if hasattr(out, "__dlpack__") else "")
        raise TypeError(f"{op}: out must be a numpy array, got {type(out).__name__}{hint}")
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


def strided_output(out, shape, dtype, op, inputs=()):
    """output() for kernels that write through row strides: `out` itself when it is a
    writable row_strided view of the result's shape and dtype that overlaps neither itself
    nor the inputs (attention writing its heads merged, (B, L, H, E) seen as (B, H, L, E));
    else as output()."""
    if (type(out) is _ndarray and out.shape == tuple(shape) and out.dtype == dtype
            and out.flags.writeable and not out.flags.c_contiguous and row_strided(out)
            and not _self_overlapping(out)
            and not any(np.may_share_memory(out, a) for a in inputs if a is not None)):
        return out, out
    return output(out, shape, dtype, op, inputs)


def _self_overlapping(x):
    """Whether two elements of x may share memory: False when, dimensions sorted by
    stride, each stride covers the extent of the ones below it (numpy's own views, such
    as transposes and slices, always do; as_strided ones may not)."""
    reach = x.itemsize                          # bytes spanned by the dimensions below
    for st, n in sorted((st, n) for n, st in zip(x.shape, x.strides) if n > 1):
        if st < reach:
            return True
        reach += (n - 1) * st
    return False


# below this many elements numpy's one-thread fill costs less than a kernel call
_FILL_ON_POOL = 1 << 17


def fill_rows(be, y, rows):
    """y[...] = rows, the C of a GEMM that adds it (linear's bias, gemm's c of one row per
    batch item): y C-contiguous (..., M, N), rows N values (one row for all of y) or one row
    per batch item (items, N). On the cpu backend a float32 fill of >= 2^17 elements is
    the rank-1 GEMM ones x row per item on its thread pool, not one numpy thread (GPT-2's
    LM-head bias, 256 x 50257, was a single-threaded 51 MB write before its 16-thread
    GEMM). The values are 1 * row[j], bit for bit, except -0, written +0 (BLAS's sums start
    at +0): callers whose GEMM adds no product (K = 0) fill with numpy."""
    N = y.shape[-1]
    rows = rows.reshape(-1, N)
    items = rows.shape[0]
    M = y.size // (items * N)
    if be.name != "cpu" or y.dtype != np.float32 or y.size < _FILL_ON_POOL:
        y.reshape(items, M, N)[...] = rows.astype(y.dtype, copy=False)[:, None, :]
        return y
    be.execute("gemm", structs.gemm_args(M, N, 1, batch=items, stride_b=N), F32,
               np.ones(M, np.float32), np.ascontiguousarray(rows, np.float32), None, y)
    return y


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
