"""max_pool2d and avg_pool2d (torch.nn.functional semantics, NCHW) on the backend's pool2d
(mk_pool2d_args), and their entries in the op table (MAX_POOL2D, AVG_POOL2D). Their docstrings'
x, kernel_size, stride, padding and avg_pool2d's Returns are the pooling ops' shared text
(mpskern/_doc.py POOL_PARAMETERS, POOL_RETURNS), completed into them on import."""
import numpy as np

from mpskern import _args
from mpskern import structs
from mpskern.backends.family import Family
from mpskern.ops.op import Check, Field, Op, normal
from mpskern.shapes import pool_shape, refuse_empty

MAX, AVG = structs.POOL_MAX, structs.POOL_AVG


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False, *, backend="auto", out=None):
    """Max over kernel_size windows of x (N, C, H, W) or (C, H, W), as torch; padding
    never wins the max, and NaN does. With return_indices, also where each maximum came
    from, exactly as torch gives them.

    Parameters
    ----------
    dilation : int or (int, int)
        Spacing of the window's taps (default 1).
    ceil_mode : bool
        Round the output size up (a last window that starts inside the input or its left
        padding is kept).
    return_indices : bool
        Also return the indices (default False): int64, shaped like the result, each the
        flat index h * W + w into its (H, W) input plane. As torch's: the first of equal
        maxima, the window's last NaN, and for a window of -inf only its first element
        inside the input. out= receives the values; the indices are a new array.

    Returns
    -------
    numpy.ndarray, or (numpy.ndarray, numpy.ndarray) with return_indices
        (N, C, P, Q) (or (C, P, Q)) in x's dtype; with return_indices, (values, indices).

    Example
    -------
        x = np.arange(2 * 3 * 8 * 8, dtype=np.float32).reshape(2, 3, 8, 8)
        y = mk.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)   # (2, 3, 5, 5)
        y, i = mk.max_pool2d(x, 2, return_indices=True)   # i[0, 0, 0, 0] == 9 (row 1, col 1)
    """
    return _pool("max_pool2d", MAX, x, kernel_size, stride, padding, dilation, ceil_mode,
                 True, None, backend, out,
                 _args.flag(return_indices, "return_indices", "max_pool2d"))


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, *, backend="auto", out=None):
    """Mean over kernel_size windows of x (N, C, H, W) or (C, H, W), as torch. The divisor
    counts the zero padding when count_include_pad (but not windows' overhang past it in
    ceil_mode), or is divisor_override when given.

    Parameters
    ----------
    ceil_mode : bool
        Round the output size up.
    count_include_pad : bool
        Count the zero padding in the divisor (default True, as torch).
    divisor_override : int or None
        A fixed divisor (>= 1) instead of the window's size.

    Example
    -------
        x = np.ones((2, 3, 8, 8), np.float32)
        y = mk.avg_pool2d(x, 2)                                   # (2, 3, 4, 4) of 1.0
        y = mk.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)   # 1.0 at the edges too
    """
    return _pool("avg_pool2d", AVG, x, kernel_size, stride, padding, 1, ceil_mode,
                 count_include_pad, divisor_override, backend, out)


def _pool(op, mode, x, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad,
          divisor_override, backend, out, indices=False):
    x, code = _args.array(x, "x", op)
    if x.ndim not in (3, 4):
        raise ValueError(f"{op}: x has shape {x.shape}; {op} takes (N, C, H, W) or (C, H, W)")
    unbatched = x.ndim == 3
    N, C, H, W = (1,) + x.shape if unbatched else x.shape
    refuse_empty(op, x.shape, {"C": C, "H": H, "W": W}, "as torch, only a 4-D x's batch (N) "
                 "may be empty: give C, H and W of at least 1")
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (P, Q) = pool_shape(
        op, (H, W), kernel_size, stride, padding, dilation, _args.flag(ceil_mode, "ceil_mode", op))
    _args.window(op, (H, W), (kh, kw), (sh, sw), (ph, pw), (dh, dw), (P, Q), count=mode == AVG)
    div = 0
    if divisor_override is not None:
        div = _args.whole(divisor_override, "divisor_override", op, 1,
                          " (or None for the window size)")
    shape = (C, P, Q) if unbatched else (N, C, P, Q)
    _args.check_size(shape, "the result", op)     # padding/ceil_mode: more rows than x
    be = _args.backend(backend)
    y, out = _args.output(out, shape, x.dtype, op, (x,))
    idx = np.empty(shape, np.int64) if indices else None
    if y.size:
        cip = _args.flag(count_include_pad, "count_include_pad", op)
        args = structs.pool2d_args(N, C, H, W, P, Q, kh, kw, stride_h=sh, stride_w=sw,
                                   pad_h=ph, pad_w=pw, dil_h=dh, dil_w=dw, mode=mode,
                                   count_include_pad=cip, divisor=div)
        be.execute("pool2d", args, code, x, y, idx)
    y = _args.finish(y, out)
    return (y, idx) if indices else y



class Pool2dFamily(Family):
    """mk_pool2d_args: the native row 'pool2d'; on metal and sim mpskern/backends/gpu/pool.py."""
    name = "pool2d"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import pool     # the GPU path, loaded by its first call
        return pool.pool2d(ctx, args, dtype, *arrays, config=config)

# -- the op table's entries -----------------------------------------------------------------
_RESNET = [
    ("resnet stem 3x3/2 @112 c64", dict(C=64, H=112, k=3, stride=2, pad=1)),
    ("2x2/2 @56 c256", dict(C=256, H=56, k=2)),
    ("2x2/2 @28 c512", dict(C=512, H=28, k=2)),
    ("resnet head 7x7 @7 c2048", dict(C=2048, H=7, k=7)),
    ("3x3/1 @14 c1024", dict(C=1024, H=14, k=3, stride=1, pad=1)),
]
_PRESETS = {
    "small": _RESNET[:4],
    "resnet50": _RESNET,
    "vgg": [(f"vgg 2x2/2 @{h} c{c}", dict(C=c, H=h, k=2))
            for c, h in [(64, 224), (128, 112), (256, 56), (512, 28), (512, 14)]],
    "options": [("stem 3x3/2 ceil_mode @112 c64", dict(C=64, H=112, k=3, stride=2, ceil=1)),
                ("3x3/2 pad 1 ceil_mode @57 c128", dict(C=128, H=57, k=3, stride=2, pad=1,
                                                       ceil=1))],
    "tiny": [("tiny 3x3/2", dict(C=8, H=16, k=3, stride=2, pad=1))],
}


def _window(xs, k, **p):
    """A selftest case: x of shape xs pooled over kernel_size k with options p."""
    return lambda rng, dt: dict(x=normal(rng, xs, dt), p=dict(p, kernel_size=k))


class _Pool2d(Op):
    kernel, cost = "pool2d", staticmethod(structs.pool2d_cost)
    fields = (Field("N", 1), Field("C", None), Field("H", None), Field("W", "H", "(default H)"),
              Field("k", None, "square window"), Field("stride", "k", "(default k)"),
              Field("pad", 0), Field("dil", 1, "dilation"), Field("ceil", 0, "ceil_mode 0/1"))
    example = "1,64,112,112,3,2,1"
    zero_ok = frozenset({"pad", "ceil"})
    later = {"dil": 1, "ceil": 0}
    presets = _PRESETS
    tune = {"metal": dict(N=8, C=64, H=112, k=3, stride=2, pad=1),
            "sim": dict(N=1, C=4, H=12, k=3, stride=2, pad=1)}

    def validate(self, s):
        super().validate(s)
        if s["ceil"] not in (0, 1):
            raise ValueError(f"{self.name}: ceil={s['ceil']} must be 0 or 1")
        dil = s.get("dil", 1)
        span = dil * (s["k"] - 1) + 1            # the window's extent on the input
        if 2 * s["pad"] > span:
            raise ValueError(f"{self.name}: pad={s['pad']} must be at most half the window "
                             f"k={s['k']}" + (f" (dil={dil}: extent {span})" if dil > 1 else ""))
        if min(s["H"], s["W"]) + 2 * s["pad"] < span:
            raise ValueError(f"{self.name}: window k={s['k']} is larger than the padded input")

    def label(self, s):
        d = f" d{s['dil']}" if s.get("dil", 1) > 1 else ""
        c = " ceil" if s["ceil"] else ""
        return f"{s['N']}x{s['C']}x{s['H']}x{s['W']} k{s['k']}s{s['stride']}p{s['pad']}{d}{c}"

    def inputs(self, s, dtype, rng):
        p = dict(kernel_size=s["k"], stride=s["stride"], padding=s["pad"],
                 ceil_mode=bool(s["ceil"]))
        if "dil" in s:
            p["dilation"] = s["dil"]
        return dict(x=normal(rng, (s["N"], s["C"], s["H"], s["W"]), dtype), p=p)

    def torch_call(self, F, t):
        return self.of(F)(t["x"], **t["p"])         # torch.nn.functional names it alike

    def out_elements(self, s, inp):
        span = s.get("dil", 1) * (s["k"] - 1) + 1
        P, Q = ((n + 2 * s["pad"] - span + (s["stride"] - 1) * s["ceil"]) // s["stride"] + 1
                for n in (s["H"], s["W"]))
        return s["N"] * s["C"] * max(P, 0) * max(Q, 0)

    def struct(self, s, out_shape):
        return structs.pool2d_args(s["N"], s["C"], s["H"], s["W"], out_shape[2], out_shape[3],
                                   s["k"], s["k"])


class MaxPool2d(_Pool2d):
    name = "max_pool2d"
    checks = (Check("x(2,3,9,11) k3 s2 p1", _window((2, 3, 9, 11), 3, stride=2, padding=1)),
              Check("x(1,2,10,7) k(2,3) s(2,1) dil 2 ceil",
                    _window((1, 2, 10, 7), (2, 3), stride=(2, 1), dilation=2, ceil_mode=True)))

    @staticmethod
    def of(ns):
        return ns.max_pool2d


class AvgPool2d(_Pool2d):
    name = "avg_pool2d"
    fields = tuple(f for f in _Pool2d.fields if f.name != "dil")   # torch's has no dilation
    checks = (Check("x(2,3,9,11) k3 s2 p1", _window((2, 3, 9, 11), 3, stride=2, padding=1)),
              Check("x(2,3,9,11) k3 s2 p1 ceil count_include_pad",
                    _window((2, 3, 9, 11), 3, stride=2, padding=1, ceil_mode=True,
                            count_include_pad=True)),
              Check("x(1,2,7,10) k2 s2 p1 ceil exclude pad",
                    _window((1, 2, 7, 10), 2, stride=2, padding=1, ceil_mode=True,
                            count_include_pad=False)),
              Check("x(1,2,6,6) k3 s1 p1 divisor_override 5",
                    _window((1, 2, 6, 6), 3, stride=1, padding=1, divisor_override=5)))

    @staticmethod
    def of(ns):
        return ns.avg_pool2d

    def reduction(self, i):
        k = i["p"]["kernel_size"]
        return k * k if isinstance(k, int) else k[0] * k[1]


MAX_POOL2D, AVG_POOL2D = MaxPool2d(), AvgPool2d()
