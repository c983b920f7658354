"""softmax and log_softmax along any axis on the backend's softmax (mk_softmax_args).
Kept lean: this is the op whose per-call overhead we measure (a 4x4 call is ~3 us)."""
from math import prod

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
    if nd == 0:  # a scalar is a 1-element axis, as torch treats it
        ax, shape3 = _args.axis(axis, 1, "axis", shape, op), (1, 1, 1)
    else:
        ax = axis + nd if type(axis) is int and -nd <= axis < 0 else _args.axis(axis, nd, "axis", shape, op)
        shape3 = (prod(shape[:ax]), shape[ax], prod(shape[ax + 1:]))
    be = _args.backend(backend)
    y, out = _args.output(out, shape, x.dtype, op, (x,))
    if shape3[0] and shape3[1] and shape3[2]:
        be.softmax({"outer": shape3[0], "n": shape3[1], "inner": shape3[2], "log": log},
                   code, x, y)
    return _args.finish(y, out) if out is not None else y
