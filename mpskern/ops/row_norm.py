"""layer_norm and rms_norm on the backend's rownorm kernel (mk_rownorm_args): normalising
the trailing normalized_shape of each row, with torch.nn.functional semantics. Weights and
biases go to the kernel as float32. Their entries in the op table: LAYER_NORM, RMS_NORM.
(group_norm and batch_norm, which normalise channels: ops/channel_norm.py.)"""
from math import prod

import numpy as np

from mpskern import _args
from mpskern import shapes, structs
from mpskern.backends.family import Family
from mpskern.ops.op import NORM_EPS as EPS
from mpskern.ops.op import Check, Field, Op, normal, torch_call_weights_as_x, vector

LAYER, RMS = structs.NORM_LAYER, structs.NORM_RMS


def _normalized_shape(ns, x, op):
    if isinstance(ns, (tuple, list)):
        try:
            ns = tuple(shapes.index(v) for v in ns)
        except TypeError:
            raise TypeError(f"{op}: normalized_shape must be an int or a tuple of ints, "
                            f"got {ns!r}") from None
    else:
        try:
            ns = (shapes.index(ns),)
        except TypeError:
            raise TypeError(f"{op}: normalized_shape must be an int or a tuple of ints, "
                            f"got {ns!r}") from None
    if not ns or len(ns) > x.ndim or x.shape[x.ndim - len(ns):] != ns:
        raise ValueError(f"{op}: normalized_shape={ns} must be the trailing dimensions of x "
                         f"(x.shape={x.shape}); pass normalized_shape=x.shape[-k:] for the k "
                         "last axes")
    return ns


def _rownorm(op, kind, x, normalized_shape, weight, bias, eps, backend, out):
    x, code = _args.array(x, "x", op)
    ns = _normalized_shape(normalized_shape, x, op)
    what = f"normalized_shape is {ns}"
    w = _args.vector(weight, "weight", ns, what, op)
    b = _args.vector(bias, "bias", ns, what, op)
    if eps is None and kind == RMS:  # rms_norm's default, as torch: the input dtype's machine epsilon
        eps = float(np.finfo(x.dtype).eps)
    eps = _args.real(eps, "eps", op)
    be = _args.backend(backend)
    y, out = _args.output(out, x.shape, x.dtype, op, (x, w, b))
    if y.size:
        n = prod(ns)
        be.execute("rownorm", structs.rownorm_args(x.size // n, n, kind=kind,
                                                   has_weight=w is not None,
                                                   has_bias=b is not None, eps=eps),
                   code, x, w, b, y)
    return _args.finish(y, out)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, *, backend="auto",
               out=None):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape
    (biased variance, as torch).

    Parameters
    ----------
    x : array (..., *normalized_shape)
        The input.
    normalized_shape : int or tuple of ints
        The trailing dimensions normalised together.
    weight, bias : array of shape normalized_shape, optional
        Per-feature vectors: float32 or x's dtype.
    eps : float
        Added to the variance (default 1e-5).

    Returns
    -------
    numpy.ndarray
        x's shape and dtype, each row of normalized_shape with mean 0 and variance 1
        before weight and bias.

    Example
    -------
        x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
        h = mk.layer_norm(x, 32, weight=np.ones(32, np.float32), bias=np.zeros(32, np.float32))
    """
    return _rownorm("layer_norm", LAYER, x, normalized_shape, weight, bias, eps, backend, out)


def rms_norm(x, normalized_shape, weight=None, eps=None, *, backend="auto", out=None):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape, as
    torch.nn.functional.rms_norm.

    Parameters
    ----------
    x : array (..., *normalized_shape)
        The input (float16 too: the mean of squares accumulates in float32).
    normalized_shape : int or tuple of ints
        The trailing dimensions normalised together.
    weight : array of shape normalized_shape, optional
        A per-feature vector: float32 or x's dtype.
    eps : float or None
        None (default): the machine epsilon of x's dtype, as torch.

    Returns
    -------
    numpy.ndarray
        x's shape and dtype, each row of normalized_shape with mean square 1 before weight.

    Example
    -------
        x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float16)
        h = mk.rms_norm(x, 32)                   # float16 in, float16 out
    """
    return _rownorm("rms_norm", RMS, x, normalized_shape, weight, None, eps, backend, out)



class RownormFamily(Family):
    """mk_rownorm_args: the native row 'rownorm'; on metal and sim mpskern/backends/gpu/norm.py."""
    name = "rownorm"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import norm     # the GPU path, loaded by its first call
        return norm.rownorm(ctx, args, dtype, *arrays, config=config)

# -- the op table's entries -----------------------------------------------------------------
_TOKENS = [  # tokens x hidden size
    ("bert-base 4096x768", dict(rows=4096, n=768)),
    ("bert-large 4096x1024", dict(rows=4096, n=1024)),
    ("gpt2-xl 2048x1600", dict(rows=2048, n=1600)),
    ("llama-7b 2048x4096", dict(rows=2048, n=4096)),
    ("llama-70b 512x8192", dict(rows=512, n=8192)),
]
_ROW_PRESETS = {"small": _TOKENS[:3], "transformer": _TOKENS,
                "tiny": [("tiny 64x96", dict(rows=64, n=96))]}
_ROW_FIELDS = (Field("rows", None), Field("n", None, "length of the normalized (last) axis"))


def _row_case(shape, nd, bias=True, **p):
    """A selftest case of layer_norm / rms_norm over the last nd axes of `shape`."""
    def inputs(rng, dt):
        ns = shape[-nd:]
        return dict(x=normal(rng, shape, dt, 2.0), w=normal(rng, ns, "float32"),
                    b=normal(rng, ns, "float32") if bias else None, p=dict(p, normalized_shape=ns))
    return inputs


class _Rows(Op):
    kernel, cost = "rownorm", staticmethod(structs.rownorm_cost)
    fields, example, presets = _ROW_FIELDS, "4096,1024", _ROW_PRESETS
    tune = {"metal": dict(rows=4096, n=1024), "sim": dict(rows=16, n=128)}
    keywords = {"w": "weight", "b": "bias"}

    torch_call = torch_call_weights_as_x

    def label(self, s):
        return f"{s['rows']}x{s['n']}"

    def reduction(self, i):
        return prod(i["p"]["normalized_shape"])


class LayerNorm(_Rows):
    name = "layer_norm"
    checks = (Check("(7,33) over (33,) +w +b", _row_case((7, 33), 1, eps=EPS)),
              Check("(2,3,5,7) over (5,7) +w +b", _row_case((2, 3, 5, 7), 2, eps=EPS)))

    def inputs(self, s, dtype, rng):
        n = s["n"]
        return dict(x=normal(rng, (s["rows"], n), dtype), w=vector(rng, n),
                    b=vector(rng, n, -0.5, 0.5), p=dict(normalized_shape=(n,), eps=EPS))

    @staticmethod
    def of(ns):
        return ns.layer_norm

    @staticmethod
    def mlx_call(mx, t):
        dt = t["x"].dtype
        return mx.fast.layer_norm(t["x"], t["w"].astype(dt), t["b"].astype(dt), t["p"]["eps"])

    def struct(self, s, out_shape):
        return structs.rownorm_args(s["rows"], s["n"], kind=LAYER, has_weight=1, has_bias=1)


class RmsNorm(_Rows):
    name = "rms_norm"
    checks = (Check("(5,31) over (31,) +w eps 1e-6", _row_case((5, 31), 1, False, eps=1e-6)),
              Check("(3,4,9) over (4,9) +w", _row_case((3, 4, 9), 2, False, eps=EPS)))

    def inputs(self, s, dtype, rng):
        n = s["n"]
        return dict(x=normal(rng, (s["rows"], n), dtype), w=vector(rng, n), b=None,
                    p=dict(normalized_shape=(n,), eps=EPS))

    keywords = {"w": "weight"}

    @staticmethod
    def of(ns):
        return ns.rms_norm

    @staticmethod
    def mlx_call(mx, t):
        return mx.fast.rms_norm(t["x"], t["w"].astype(t["x"].dtype), t["p"]["eps"])

    def struct(self, s, out_shape):
        return structs.rownorm_args(s["rows"], s["n"], kind=RMS, has_weight=1)


LAYER_NORM, RMS_NORM = LayerNorm(), RmsNorm()
