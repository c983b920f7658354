"""adaptive_avg_pool2d (torch.nn.functional semantics, NCHW) on the backend's pool2d kernel
(mk_pool2d_args, mode MK_POOL_ADAPTIVE_AVG), and its entry in the op table
(ADAPTIVE_AVG_POOL2D). Its docstring's Returns is the pooling ops' shared one
(mpskern/_doc.py POOL_RETURNS), completed into it on import."""
import operator

import numpy as np

from mpskern import _args
from mpskern import structs
from mpskern.ops.op import Check, Field, Op, normal
from mpskern.shapes import refuse_empty

OP = "adaptive_avg_pool2d"


def adaptive_avg_pool2d(x, output_size, *, backend="auto", out=None):
    """Average of x (N, C, H, W) or (C, H, W) over torch's adaptive windows, giving an
    output of exactly output_size: output row p averages input rows floor(p*H/P) up to
    ceil((p+1)*H/P) (likewise columns), so windows overlap when H is not a multiple of P,
    and an output larger than the input repeats input rows.

    Parameters
    ----------
    x : array (N, C, H, W) or (C, H, W)
        The input, NCHW; H and W at least 1 (as torch; output_size 1 of an empty plane
        is NaN, torch's mean of nothing).
    output_size : int, (int or None, int or None)
        (P, Q); an int is (P, P); None keeps that input size (as torch). 0 gives an
        empty result.

    Example
    -------
        x = np.arange(2 * 3 * 7 * 9, dtype=np.float32).reshape(2, 3, 7, 9)
        y = mk.adaptive_avg_pool2d(x, 1)                 # (2, 3, 1, 1): global average
        y = mk.adaptive_avg_pool2d(x, (3, None))         # (2, 3, 3, 9)
    """
    x, code = _args.array(x, "x", OP)
    if x.ndim not in (3, 4):
        raise ValueError(f"{OP}: x has shape {x.shape}; {OP} takes (N, C, H, W) or (C, H, W)")
    unbatched = x.ndim == 3
    N, C, H, W = (1,) + x.shape if unbatched else x.shape
    P, Q = output_hw(output_size, (H, W))
    if (P, Q) != (1, 1):    # torch takes the mean for (1, 1): NaN over an empty plane
        refuse_empty(OP, x.shape, {"H": H, "W": W}, "as torch, an empty plane has no adaptive "
                     "windows (only output_size 1 averages it, to NaN): give H and W of at "
                     "least 1")
    shape = (C, P, Q) if unbatched else (N, C, P, Q)
    _args.check_size(shape, "the result", OP)     # output_size may be far larger than x
    be = _args.backend(backend)
    y, out = _args.output(out, shape, x.dtype, OP, (x,))
    if y.size == 0 or H * W == 0:
        y[...] = np.nan                       # the mean of nothing, as torch and numpy
        return _args.finish(y, out)
    be.execute("pool2d", args_of(N, C, H, W, P, Q), code, x, y, None)
    return _args.finish(y, out)


def output_hw(output_size, hw):
    """(P, Q) of output_size: an int, or a pair of ints / None (None: that input size).
    TypeError / ValueError naming output_size."""
    pair = (output_size, output_size) if not isinstance(output_size, (tuple, list)) \
        else tuple(output_size)
    if len(pair) != 2:
        raise ValueError(f"{OP}: output_size={output_size!r} must be an int or a pair "
                         f"(P, Q) of ints or None, got {len(pair)} values")
    out = []
    for v, n in zip(pair, hw):
        if v is None and isinstance(output_size, (tuple, list)):
            out.append(n)
            continue
        if isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{OP}: output_size must hold ints (or None), got {output_size!r}")
        try:
            i = operator.index(v)
        except TypeError:
            raise TypeError(f"{OP}: output_size must be an int or a pair of ints or None, got "
                            f"{output_size!r}") from None
        if i < 0:
            raise ValueError(f"{OP}: output_size={output_size!r} must be >= 0")
        if i >= _args.INT32_LIMIT:
            raise ValueError(f"{OP}: output_size={output_size!r} is 2**31 or more; mpskern's "
                             f"kernels index in int32")
        out.append(i)
    return tuple(out)


def args_of(N, C, H, W, P, Q):
    """The pool2d struct of an adaptive average (the window fields are unused: 1, 0)."""
    return structs.pool2d_args(N, C, H, W, P, Q, 1, 1, mode=structs.POOL_ADAPTIVE_AVG)


def window_terms(n, out):
    """The largest adaptive window along an axis of n inputs cut into `out` (the terms
    summed per output, for the tolerance)."""
    return max((((i + 1) * n + out - 1) // out - i * n // out) for i in range(out)) if out else 0


# -- the op table's entry -------------------------------------------------------------------
def _case(xs, size):
    """A selftest case: x of shape xs pooled to output_size `size`."""
    return lambda rng, dt: dict(x=normal(rng, xs, dt), p=dict(output_size=size))


class AdaptiveAvgPool2d(Op):
    name = OP
    kernel, cost = "pool2d", staticmethod(structs.adaptive_pool2d_cost)
    fields = (Field("N", 1), Field("C", None), Field("H", None), Field("W", "H", "(default H)"),
              Field("P", None, "output height"), Field("Q", "P", "output width (default P)"))
    example = "8,2048,7,7,1"
    presets = {
        "small": [("resnet head 7x7 -> 1 c2048", dict(N=8, C=2048, H=7, P=1)),
                  ("vgg head 14x14 -> 7 c512", dict(N=8, C=512, H=14, P=7)),
                  ("non-divisible 13x13 -> 5 c256", dict(N=8, C=256, H=13, P=5))],
        "resnet50": [("resnet head 7x7 -> 1 c2048", dict(N=32, C=2048, H=7, P=1))],
        "options": [("upsampling 5x5 -> 8 c64", dict(N=8, C=64, H=5, P=8)),
                    ("rows only 56x56 -> 1x56 c64", dict(N=8, C=64, H=56, P=1, Q=56))],
        "tiny": [("tiny 9x7 -> 4x3", dict(C=8, H=9, W=7, P=4, Q=3))],
    }
    tune = {"metal": dict(N=8, C=2048, H=7, P=1), "sim": dict(N=1, C=8, H=9, P=4)}
    checks = (Check("x(2,3,9,11) -> (4,5) non-divisible", _case((2, 3, 9, 11), (4, 5))),
              Check("x(1,2,3,5) -> (7,None) larger than the input", _case((1, 2, 3, 5), (7, None))),
              Check("x(2,4,7,7) -> 1 global", _case((2, 4, 7, 7), 1)))

    def label(self, s):
        return f"{s['N']}x{s['C']}x{s['H']}x{s['W']} -> {s['P']}x{s['Q']}"

    def inputs(self, s, dtype, rng):
        return dict(x=normal(rng, (s["N"], s["C"], s["H"], s["W"]), dtype),
                    p=dict(output_size=(s["P"], s["Q"])))

    @staticmethod
    def of(ns):
        return ns.adaptive_avg_pool2d

    def torch_call(self, F, t):
        return F.adaptive_avg_pool2d(t["x"], **t["p"])

    def reduction(self, i):
        H, W = i["x"].shape[-2:]
        P, Q = output_hw(i["p"]["output_size"], (H, W))
        return window_terms(H, P) * window_terms(W, Q)

    def out_elements(self, s, inp):
        return s["N"] * s["C"] * s["P"] * s["Q"]

    def struct(self, s, out_shape):
        return args_of(s["N"], s["C"], s["H"], s["W"], out_shape[2], out_shape[3])


ADAPTIVE_AVG_POOL2D = AdaptiveAvgPool2d()
