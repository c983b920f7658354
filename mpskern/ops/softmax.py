"""softmax and log_softmax along any axis on the backend's softmax (mk_softmax_args).
Kept lean: this is the op whose per-call overhead we measure (a 4x4 float32 call). Their
entries in the op table: SOFTMAX, LOG_SOFTMAX."""
from math import prod

from numpy import empty

from mpskern import _args
from mpskern._outputs import MIN_BYTES, empty as pooled
from mpskern import structs
from mpskern.backends.family import Family
from mpskern.ops.op import Check, Field, Op, normal
from mpskern.structs import softmax_args


def softmax(x, axis=-1, *, backend="auto", out=None, dim=None):
    """exp(x - max) / sum(exp(x - max)) along `axis` (numerically stable).

    Parameters
    ----------
    x : array
        Any shape.
    axis : int
        The axis normalised (default -1, the last).
    dim : int, optional
        torch's name for axis=, accepted instead of it (both at once: TypeError).

    Returns
    -------
    numpy.ndarray
        x's shape and dtype; each slice along axis sums to 1.

    Example
    -------
        x = np.array([[1.0, 2.0, 3.0]], np.float32)
        s = mk.softmax(x, axis=-1)               # [[0.090, 0.245, 0.665]]
        s = mk.softmax(x, dim=1)                 # the same
    """
    return _softmax(x, axis, backend, out, 0, "softmax", dim)


def log_softmax(x, axis=-1, *, backend="auto", out=None, dim=None):
    """x - max - log(sum(exp(x - max))) along `axis` (numerically stable): the log of
    softmax(x, axis) without its underflow to 0 (log 0 = -inf).

    Parameters
    ----------
    x : array
        The logits, any shape.
    axis : int
        The axis of the log-probabilities (default -1, the last).
    dim : int, optional
        Accepted instead of axis= (torch's name); giving both is a TypeError.

    Returns
    -------
    numpy.ndarray
        x's shape and dtype; exp of each slice along axis sums to 1.

    Example
    -------
        x = np.array([[1.0, 2.0, 3.0]], np.float32)
        s = mk.log_softmax(x)                    # [[-2.408, -1.408, -0.408]]
    """
    return _softmax(x, axis, backend, out, 1, "log_softmax", dim)


def _softmax(x, axis, backend, out, log, op, dim):
    if dim is not None:
        axis = _args.alias(dim, "dim", axis, "axis", -1, op)
    x, code = _args.array(x, "x", op)
    shape = x.shape
    nd = len(shape)
    if type(axis) is int and -nd <= axis < nd:
        ax = axis + nd if axis < 0 else axis
    else:  # a 0-d x is one element along axis 0 / -1, as torch treats it
        ax = _args.axis(axis, nd or 1, "axis", shape, op)
    if ax == nd - 1:
        n, inner = shape[ax], 1
    else:
        n = shape[ax] if nd else 1
        inner = prod(shape[ax + 1:])
    be = _args.backend(backend)
    if out is None:             # (large results: buffers freed ones left, mpskern/_outputs.py)
        y = empty(shape, x.dtype) if x.nbytes < MIN_BYTES else pooled(shape, x.dtype)
    else:
        y, out = _args.output(out, shape, x.dtype, op, (x,))
    size = x.size
    if size:                    # (n and inner: no empty axis then)
        be.execute("softmax", softmax_args(size // (n * inner), n, inner, log), code, x, y)
    return y if out is None else _args.finish(y, out)



class SoftmaxFamily(Family):
    """mk_softmax_args: the native row 'softmax'; on metal and sim mpskern/backends/gpu/softmax.py."""
    name = "softmax"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import softmax     # the GPU path, loaded by its first call
        return softmax.softmax(ctx, args, dtype, *arrays, config=config)

# -- the op table's entries -----------------------------------------------------------------
_ROWS = [  # attention scores (batch 8 x 12 heads x seq rows of seq) and vocabularies
    ("attn 8x12x128 rows x128", dict(rows=8 * 12 * 128, n=128)),
    ("attn 2x12x512 rows x512", dict(rows=2 * 12 * 512, n=512)),
    ("attn 1x12x1024 rows x1024", dict(rows=12 * 1024, n=1024)),
    ("attn 1x16x2048 rows x2048", dict(rows=16 * 2048, n=2048)),
    ("vocab 32 x 32000", dict(rows=32, n=32000)),
    ("vocab 16 x 50257", dict(rows=16, n=50257)),
]


def _along(shape, axis):
    return lambda rng, dt: dict(x=normal(rng, shape, dt, 2.0), p=dict(axis=axis))


class Softmax(Op):
    name, log = "softmax", False
    kernel, cost = "softmax", staticmethod(structs.softmax_cost)
    fields = (Field("rows", None), Field("n", None, "length of the reduced (last) axis"))
    example = "4096,1024"
    presets = {"small": _ROWS[:3] + _ROWS[4:5], "transformer": _ROWS,
               "tiny": [("tiny 64x100", dict(rows=64, n=100))]}
    tune = {"metal": dict(rows=4096, n=1024), "sim": dict(rows=16, n=128)}
    checks = (Check("(5,37) axis -1", _along((5, 37), -1)),
              Check("(3,17,6) axis 1", _along((3, 17, 6), 1)),
              Check("(2,1500) long rows", _along((2, 1500), -1)),
              Check("(0,7) empty", _along((0, 7), -1)))

    def label(self, s):
        return f"{s['rows']}x{s['n']}"

    def inputs(self, s, dtype, rng):
        return dict(x=normal(rng, (s["rows"], s["n"]), dtype, 3.0), p=dict(axis=-1))

    @staticmethod
    def of(ns):
        return ns.softmax

    def torch_call(self, F, t):
        return self.of(F)(t["x"], dim=t["p"]["axis"])   # torch.nn.functional names it alike

    @staticmethod
    def mlx_call(mx, t):
        return mx.softmax(t["x"], axis=t["p"]["axis"])

    def reduction(self, i):
        return i["x"].shape[i["p"]["axis"]]

    def struct(self, s, out_shape):
        return softmax_args(s["rows"], s["n"], 1, int(self.log))


class LogSoftmax(Softmax):
    name, log = "log_softmax", True
    checks = (Check("(5,37) axis -1", _along((5, 37), -1)),
              Check("(3,17,6) axis 1", _along((3, 17, 6), 1)))

    @staticmethod
    def of(ns):
        return ns.log_softmax

    @staticmethod
    def mlx_call(mx, t):
        x = t["x"]
        return x - mx.logsumexp(x, axis=t["p"]["axis"], keepdims=True)


SOFTMAX, LOG_SOFTMAX = Softmax(), LogSoftmax()
