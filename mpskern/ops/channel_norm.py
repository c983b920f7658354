"""group_norm (mk_group_norm_args) and batch_norm (mk_batch_norm_args): normalising x (N, C, *)
per group of channels or per channel, with torch.nn.functional semantics. Weights, biases
and running statistics go to the kernels as float32. Their entries in the op table:
GROUP_NORM, BATCH_NORM. (layer_norm and rms_norm, which normalise rows: ops/row_norm.py.)"""
from math import prod

import numpy as np

from mpskern import _args
from mpskern import structs
from mpskern.backends.family import Family
from mpskern.ops.op import NORM_EPS as EPS
from mpskern.ops.op import Check, Field, Op, normal, torch_call_weights_as_x, vector


def _channels(x, op):
    x, code = _args.array(x, "x", op)
    if x.ndim < 2:
        raise ValueError(f"{op}: x has shape {x.shape}; {op} takes (N, C, *) with at least "
                         "2 dimensions")
    return x, code, x.shape[0], x.shape[1], prod(x.shape[2:])


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, *, backend="auto", out=None):
    """Normalise x (N, C, *) over each group of C/num_groups channels (and all positions),
    then scale and shift per channel, as torch.

    Parameters
    ----------
    x : array (N, C, *)
        The input.
    num_groups : int
        Divides C.
    weight, bias : array (C,), optional
        Per-channel vectors: float32 or x's dtype.
    eps : float
        Added to each group's variance (default 1e-5).

    Returns
    -------
    numpy.ndarray
        x's shape and dtype, each group of channels with mean 0 and variance 1 before
        weight and bias.

    Example
    -------
        x = np.random.default_rng(0).standard_normal((2, 8, 4, 4)).astype(np.float32)
        h = mk.group_norm(x, 4)
    """
    op = "group_norm"
    x, code, N, C, HW = _channels(x, op)
    g = _args.whole(num_groups, "num_groups", op, 1)
    if C % g:
        raise ValueError(f"{op}: num_groups={num_groups} must be >= 1 and divide the channels "
                         f"(x.shape[1]={C}, x.shape={x.shape}); pick a divisor of {C}")
    what = f"x has {C} channels (x.shape={x.shape})"
    w = _args.vector(weight, "weight", C, what, op)
    b = _args.vector(bias, "bias", C, what, op)
    eps = _args.real(eps, "eps", op)
    be = _args.backend(backend)
    y, out = _args.output(out, x.shape, x.dtype, op, (x, w, b))
    if y.size:
        be.execute("group_norm", structs.group_norm_args(N, C, HW, g, has_weight=w is not None,
                                                         has_bias=b is not None, eps=eps),
                   code, x, w, b, y)
    return _args.finish(y, out)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5, *, backend="auto", out=None):
    """Normalise x (N, C, *) per channel, as torch. Inference: with running_mean and
    running_var. Training: with the batch's mean and biased variance, and (when given)
    the running statistics updated in place: r = (1 - momentum) * r + momentum * stat,
    with the unbiased variance.

    Parameters
    ----------
    x : array (N, C, *)
        The input.
    running_mean, running_var : array (C,) or None
        Per-channel statistics: float32 or x's dtype; writable when training (numpy or
        DLPack arrays, updated in place).
    weight, bias : array (C,), optional
        Per-channel vectors: float32 or x's dtype.
    training : bool
        Use the batch's statistics (and update the running ones).
    momentum : float
        Weight of the batch's statistic in the update (default 0.1).
    eps : float
        Added to the variance (default 1e-5).

    Returns
    -------
    numpy.ndarray
        x's shape and dtype, each channel normalised by the batch's or the running
        statistics, then scaled and shifted.

    Example
    -------
        x = np.random.default_rng(0).standard_normal((2, 8, 4, 4)).astype(np.float32)
        mean, var = np.zeros(8, np.float32), np.ones(8, np.float32)
        h = mk.batch_norm(x, mean, var, training=True)   # mean and var updated in place
        h = mk.batch_norm(x, mean, var)                  # inference with them
    """
    op = "batch_norm"
    x, code, N, C, HW = _channels(x, op)
    training = _args.flag(training, "training", op)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: pass both running_mean and running_var or neither")
    if running_mean is None and not training:
        raise ValueError(f"{op}: inference (training=False) needs running_mean and running_var; "
                         "pass them or training=True")
    what = f"x has {C} channels (x.shape={x.shape})"
    if training:
        for r, nm in ((running_mean, "running_mean"), (running_var, "running_var")):
            if r is not None and not isinstance(r, np.ndarray) and hasattr(r, "__dlpack__"):
                r = _args._as_array(r, nm, op)   # a view of its memory: updated in place
                if nm == "running_mean":
                    running_mean = r
                else:
                    running_var = r
            if r is not None and isinstance(r, np.ndarray) and not r.flags.writeable:
                raise ValueError(f"{op}: {nm} is read-only but training=True updates it in "
                                 "place; pass a writable array (or None to skip the update)")
            if r is not None and not isinstance(r, np.ndarray):
                raise TypeError(f"{op}: {nm} must be a numpy array when training=True (it is "
                                f"updated in place), got {type(r).__name__}")
    rm = _args.vector(running_mean, "running_mean", C, what, op, writable=True)
    rv = _args.vector(running_var, "running_var", C, what, op, writable=True)
    w = _args.vector(weight, "weight", C, what, op)
    b = _args.vector(bias, "bias", C, what, op)
    momentum = _args.real(momentum, "momentum", op)
    eps = _args.real(eps, "eps", op)
    be = _args.backend(backend)
    y, out = _args.output(out, x.shape, x.dtype, op, (x, rm, rv, w, b))
    if y.size == 0:
        return _args.finish(y, out)
    if training and N * HW < 2:
        raise ValueError(f"{op}: training needs more than 1 value per channel to estimate the "
                         f"variance, got x.shape={x.shape}; use a larger batch or training=False")
    be.execute("batch_norm", structs.batch_norm_args(N, C, HW, training=training,
                                                     has_running=rm is not None,
                                                     has_weight=w is not None,
                                                     has_bias=b is not None, eps=eps,
                                                     momentum=momentum),
               code, x, rm, rv, w, b, y)
    if training and rm is not None:  # the kernel updated float32 copies: write them back
        for user, mine in ((running_mean, rm), (running_var, rv)):
            if not np.may_share_memory(user, mine):
                user[...] = mine
    return _args.finish(y, out)



class GroupNormFamily(Family):
    """mk_group_norm_args: the native row 'group_norm'; on metal and sim mpskern/backends/gpu/norm.py."""
    name = "group_norm"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import norm     # the GPU path, loaded by its first call
        return norm.group_norm(ctx, args, dtype, *arrays, config=config)


class BatchNormFamily(Family):
    """mk_batch_norm_args: the native row 'batch_norm'; on metal and sim mpskern/backends/gpu/norm.py."""
    name = "batch_norm"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import norm     # the GPU path, loaded by its first call
        return norm.batch_norm(ctx, args, dtype, *arrays, config=config)

# -- the op table's entries -----------------------------------------------------------------
_STAGES = [  # ResNet-50 stage outputs, batch 8
    ("res2 8x256x56x56", dict(N=8, C=256, H=56)),
    ("res3 8x512x28x28", dict(N=8, C=512, H=28)),
    ("res4 8x1024x14x14", dict(N=8, C=1024, H=14)),
    ("res5 8x2048x7x7", dict(N=8, C=2048, H=7)),
    ("stem 8x64x112x112", dict(N=8, C=64, H=112)),
]
_CHANNEL_PRESETS = {"small": [(lbl.replace("8x", "1x", 1), dict(s, N=1)) for lbl, s in _STAGES[:4]],
                    "resnet50": _STAGES,
                    "tiny": [("tiny 2x64x8x8", dict(N=2, C=64, H=8))]}
_CHANNEL_FIELDS = (Field("N", 1), Field("C", None), Field("H", None),
                   Field("W", "H", "(default H)"))


def _channel_case(shape, **p):
    """A selftest case of group_norm / batch_norm: x (N, C, ...) and per-channel vectors."""
    def inputs(rng, dt):
        C = shape[1]
        return dict(x=normal(rng, shape, dt, 2.0), m=normal(rng, C, "float32", 0.5),
                    v=vector(rng, C, 0.5, 2.0), w=normal(rng, C, "float32"),
                    b=normal(rng, C, "float32"), p=p)
    return inputs


class GroupNorm(Op):
    name = "group_norm"
    kernel, cost = "group_norm", staticmethod(structs.group_norm_cost)
    fields = _CHANNEL_FIELDS + (Field("G", 32, "groups"),)
    example, presets = "8,256,28,28,G=32", _CHANNEL_PRESETS
    tune = {"metal": dict(N=8, C=64, H=56, G=2), "sim": dict(N=2, C=8, H=6, G=2)}
    checks = (Check("x(2,6,5,7) 3 groups +w +b",
                    _channel_case((2, 6, 5, 7), num_groups=3, eps=EPS)),
              Check("x(3,4,9) 2 groups +w +b", _channel_case((3, 4, 9), num_groups=2, eps=EPS)))

    def validate(self, s):
        super().validate(s)
        if s["C"] % s["G"]:
            raise ValueError(f"group_norm: G={s['G']} must divide C={s['C']}")

    def label(self, s):
        return f"{s['N']}x{s['C']}x{s['H']}x{s['W']} G{s['G']}"

    def inputs(self, s, dtype, rng):
        C = s["C"]
        return dict(x=normal(rng, (s["N"], C, s["H"], s["W"]), dtype), w=vector(rng, C),
                    b=vector(rng, C, -0.5, 0.5), p=dict(num_groups=s["G"], eps=EPS))

    keywords = {"w": "weight", "b": "bias"}
    torch_call = torch_call_weights_as_x

    @staticmethod
    def of(ns):
        return ns.group_norm

    def reduction(self, i):
        return i["x"].size // max(1, i["x"].shape[0]) // i["p"]["num_groups"]

    def struct(self, s, out_shape):
        return structs.group_norm_args(s["N"], s["C"], s["H"] * s["W"], s["G"], has_weight=1,
                                       has_bias=1)


class BatchNorm(Op):
    """Inference in bench and tune; selftest also checks training, whose running statistics
    (updated in place) are part of the result."""
    name = "batch_norm"
    kernel, cost = "batch_norm", staticmethod(structs.batch_norm_cost)
    fields, example, presets = _CHANNEL_FIELDS, "8,256,14,14", _CHANNEL_PRESETS
    tune = {"metal": dict(N=8, C=256, H=14), "sim": dict(N=2, C=8, H=6)}
    checks = (Check("x(3,5,7,6) inference +w +b", _channel_case((3, 5, 7, 6), training=False,
                                                            eps=EPS)),
              Check("x(4,3,5,5) training (+ running stats)",
                    _channel_case((4, 3, 5, 5), training=True, momentum=0.1, eps=EPS)))

    def label(self, s):
        return f"{s['N']}x{s['C']}x{s['H']}x{s['W']}"

    def inputs(self, s, dtype, rng):
        C = s["C"]
        return dict(x=normal(rng, (s["N"], C, s["H"], s["W"]), dtype),
                    m=vector(rng, C, -0.5, 0.5), v=vector(rng, C), w=vector(rng, C),
                    b=vector(rng, C, -0.5, 0.5), p=dict(training=False, eps=EPS))

    arrays = ("x", "m", "v", "w", "b")

    @staticmethod
    def of(ns):
        return ns.batch_norm

    def call(self, i, backend, out=None):
        if not i["p"].get("training"):
            return super().call(i, backend, out)
        i = dict(i, m=i["m"].copy(), v=i["v"].copy())   # training updates them in place
        return np.concatenate([super().call(i, backend).ravel(), i["m"], i["v"]])

    def torch_call(self, F, t):
        return F.batch_norm(t["x"], t["m"], t["v"], t["w"], t["b"], **t["p"])

    def reference(self, i):
        y, m, v = super().reference(i)
        return np.concatenate([y.ravel(), m, v]) if i["p"].get("training") else y

    def reduction(self, i):
        x = i["x"]
        return x.size // x.shape[1] if i["p"].get("training") else 1

    def struct(self, s, out_shape):
        return structs.batch_norm_args(s["N"], s["C"], s["H"] * s["W"], has_weight=1,
                                       has_bias=1)


GROUP_NORM, BATCH_NORM = GroupNorm(), BatchNorm()
