"""layer_norm and rms_norm (backend rownorm, mk_rownorm_args), group_norm
(mk_group_norm_args) and batch_norm (mk_batch_norm_args), with torch.nn.functional
semantics. Weights, biases and running statistics go to the kernels as float32."""
import operator
from math import prod

import numpy as np

from mpskern import _args

LAYER, RMS = 0, 1  # metal/mk_args.h MK_NORM_LAYER / MK_NORM_RMS


def _normalized_shape(ns, x, op):
    if isinstance(ns, (tuple, list)):
        try:
            ns = tuple(operator.index(v) for v in ns)
        except TypeError:
            raise TypeError(f"{op}: normalized_shape must be an int or a tuple of ints, "
                            f"got {ns!r}") from None
    else:
        try:
            ns = (operator.index(ns),)
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
        be.rownorm({"rows": x.size // n, "n": n, "kind": kind, "has_weight": int(w is not None),
                    "has_bias": int(b is not None), "eps": eps}, code, x, w, b, y)
    return _args.finish(y, out)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, *, backend="auto",
               out=None):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape
    (biased variance, as torch)."""
    return _rownorm("layer_norm", LAYER, x, normalized_shape, weight, bias, eps, backend, out)


def rms_norm(x, normalized_shape, weight=None, eps=None, *, backend="auto", out=None):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape; eps=None
    means the machine epsilon of x's dtype, as torch."""
    return _rownorm("rms_norm", RMS, x, normalized_shape, weight, None, eps, backend, out)


def _channels(x, op):
    x, code = _args.array(x, "x", op)
    if x.ndim < 2:
        raise ValueError(f"{op}: x has shape {x.shape}; {op} takes (N, C, *) with at least "
                         "2 dimensions")
    return x, code, x.shape[0], x.shape[1], prod(x.shape[2:])


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, *, backend="auto", out=None):
    """Normalise x (N, C, *) over each group of C/num_groups channels (and all positions),
    then scale and shift per channel."""
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
        be.group_norm({"N": N, "C": C, "HW": HW, "groups": g, "has_weight": int(w is not None),
                       "has_bias": int(b is not None), "eps": eps}, code, x, w, b, y)
    return _args.finish(y, out)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5, *, backend="auto", out=None):
    """Normalise x (N, C, *) per channel. Inference: with running_mean/running_var.
    Training: with the batch's mean and biased variance, and (when given) running stats
    updated in place: r = (1 - momentum) * r + momentum * stat, unbiased variance."""
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
    be.batch_norm({"N": N, "C": C, "HW": HW, "training": int(training),
                   "has_running": int(rm is not None), "has_weight": int(w is not None),
                   "has_bias": int(b is not None), "eps": eps, "momentum": momentum},
                  code, x, rm, rv, w, b, y)
    if training and rm is not None:  # the kernel updated float32 copies: write them back
        for user, mine in ((running_mean, rm), (running_var, rv)):
            if not np.may_share_memory(user, mine):
                user[...] = mine
    return _args.finish(y, out)
