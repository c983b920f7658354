"""softmax and log_softmax along any axis on the backend's softmax (mk_softmax_args).
Kept lean: this is the op whose per-call overhead we measure (a 4x4 float32 call)."""
from math import prod

from numpy import empty

from mpskern import _args


def softmax(x, axis=-1, *, backend="auto", out=None):
    """exp(x - max) / sum(exp(x - max)) along `axis` (numerically stable)."""
    return _softmax(x, axis, backend, out, 0, "softmax")


def log_softmax(x, axis=-1, *, backend="auto", out=None):
    """x - max - log(sum(exp(x - max))) along `axis` (numerically stable)."""
    return _softmax(x, axis, backend, out, 1, "log_softmax")


def _softmax(x, axis, backend, out, log, op):
    x, code = _args.array(x, "x", op)
    shape = x.shape
    nd = len(shape)
    if type(axis) is int and -nd <= axis < nd:
        ax = axis + nd if axis < 0 else axis
    else:  # a 0-d x is one element along axis 0 / -1, as torch treats it
        ax = _args.axis(axis, nd or 1, "axis", shape, op)
    n = shape[ax] if nd else 1
    inner = prod(shape[ax + 1:]) if ax < nd - 1 else 1
    be = _args.backend(backend)
    if out is None:
        y = empty(shape, x.dtype)
    else:
        y, out = _args.output(out, shape, x.dtype, op, (x,))
    if n and inner and x.size:
        be.softmax({"outer": x.size // (n * inner), "n": n, "inner": inner, "log": log},
                   code, x, y)
    return y if out is None else _args.finish(y, out)
