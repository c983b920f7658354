"""linear (torch.nn.functional.linear: x @ weight.T + bias) on the backend's gemm
(mk_gemm_args, weight read transposed in place), and its entry in the op table (LINEAR)."""
from math import prod

import numpy as np

from mpskern import _args
from mpskern import reference as ref
from mpskern import structs
from mpskern.ops.op import (ACT_FIELD, ACT_NAMES, Check, Field, Op, act_label, normal,
                            torch_activation, vector)


def linear(x, weight, bias=None, *, activation=None, backend="auto", out=None):
    """x @ weight.T + bias, as torch.nn.functional.linear: x (..., in_features), weight
    (out_features, in_features) -> (..., out_features); a 1-D weight (in_features,) gives
    (...). The leading dimensions of x are one GEMM's rows (no copy); the bias is written
    into the result first and added by the GEMM (beta=1), as torch's addmm.

    Parameters
    ----------
    x : array (..., in_features)
        The input.
    weight : array (out_features, in_features) or (in_features,)
        x's dtype; read transposed in place.
    bias : array (out_features,), optional
        A per-feature vector: float32 or x's dtype (0-d, (1,) and (1, out_features) are
        broadcast over the features, as torch does).

    Returns
    -------
    numpy.ndarray
        (..., out_features) in x's dtype ((...) for a 1-D weight).

    Example
    -------
        x = np.ones((8, 32), np.float32)
        w = np.ones((16, 32), np.float32)
        y = mk.linear(x, w, np.zeros(16, np.float32))   # (8, 16), every entry 32.0
    """
    op = "linear"
    x, code = _args.array(x, "x", op)
    w = _args.same_dtype(weight, "weight", x, "x", op)
    if x.ndim == 0:
        raise ValueError(f"{op}: x is a scalar (shape ()); linear takes x (..., in_features)")
    if w.ndim not in (1, 2):
        raise ValueError(f"{op}: weight has shape {w.shape}; linear takes weight "
                         "(out_features, in_features) or (in_features,)")
    K = x.shape[-1]
    if w.shape[-1] != K:
        raise ValueError(f"{op}: x has shape {x.shape} (in_features={K}) but weight has shape "
                         f"{w.shape} (in_features={w.shape[-1]}); weight is (out_features, "
                         "in_features), as torch's: pass weight.T if yours is (in, out)")
    N = w.shape[0] if w.ndim == 2 else 1
    lead = x.shape[:-1]
    shape = lead + ((N,) if w.ndim == 2 else ())
    _args.check_size(lead + (N,), "the result", op)
    if bias is not None and w.ndim == 1:
        raise ValueError(f"{op}: a bias needs weight (out_features, in_features); weight has "
                         f"shape {w.shape} (a result without a feature axis): pass weight[None] "
                         "and a bias of shape (1,), or add the bias to linear(x, weight)")
    b = _args.vector(_per_feature(bias, N, op), "bias", N,
                     f"weight has {N} output features", op)
    act = _args.activation(activation, op)
    be = _args.backend(backend)
    y, out = _args.output(out, shape, x.dtype, op, (x, w, b))
    if y.size == 0:
        return _args.finish(y, out)
    if b is not None and K > 0:
        _args.fill_rows(be, y, b)                 # C of the GEMM (beta=1), aliasing its output
    elif b is not None:
        y[...] = b.astype(y.dtype, copy=False)    # the result itself (-0 stays -0)
    elif K == 0:
        y[...] = 0                                # an empty sum
    if K == 0:
        y[...] = ref.activate(y, activation)      # activation(bias), as the kernel would
    else:
        M = prod(lead)
        be.execute("gemm", structs.gemm_args(M, N, K, trans_b=True, has_c=b is not None,
                                             beta=1.0, activation=act),
                   code, x, w, y if b is not None else None, y)
    return _args.finish(y, out)


# -- the op table's entry -------------------------------------------------------------------
_TRANSFORMER = [  # BERT-base / GPT-2-small layers at batch 1 x 512 tokens (x: (512, in))
    ("qkv 512 tok 768->2304", dict(M=512, N=2304, K=768)),
    ("attn-out 512 tok 768->768", dict(M=512, N=768, K=768)),
    ("mlp-up 512 tok 768->3072", dict(M=512, N=3072, K=768)),
    ("mlp-down 512 tok 3072->768", dict(M=512, N=768, K=3072)),
]


def _per_feature(bias, N, op):
    """A bias that torch broadcasts as one value per output feature (0-d, (1,), (1, N), ...)
    as the vector of N it is; other shapes go on to _args.vector's error."""
    if bias is None:
        return None
    bias = _args._as_array(bias, "bias", op)
    bs = bias.shape
    if (bs != (N,) and len(bs) <= 2 and all(d == 1 for d in bs[:-1])   # (torch: <= 2-D)
            and bs[-1:] in ((), (1,), (N,))):
        return np.broadcast_to(bias.reshape(bs[-1:]), (N,))
    return bias


def _features(xs, n, bias=True, act=None):
    """A selftest case: x of shape xs, weight (n, xs[-1]), a bias when `bias`, then `act`."""
    def inputs(rng, dt):
        return dict(x=normal(rng, xs, dt), w=normal(rng, (n, xs[-1]), dt),
                    b=vector(rng, n) if bias else None, p=dict(activation=act))
    return inputs


class Linear(Op):
    name = "linear"
    kernel, cost, metric, work_done = "gemm", staticmethod(structs.gemm_cost), "gflops", True
    fields = (Field("M", None, "rows of x (tokens)"), Field("N", None, "out_features"),
              Field("K", None, "in_features"), Field("bias", 1, "0/1"), ACT_FIELD)
    example = "512,3072,768"
    zero_ok = frozenset({"bias", "act"})
    later = {"act": 0}
    presets = {"small": _TRANSFORMER[:2], "transformer": _TRANSFORMER,
               "tiny": [("tiny 33 tok 20->17", dict(M=33, N=17, K=20))],
               # GPT-2 small's MLP up projection (512 tokens) with each activation
               "activations": [(f"mlp-up 512 tok 768->3072{act_label(a)}",
                                dict(M=512, N=3072, K=768, act=a)) for a in ACT_NAMES]}
    tune = {"metal": dict(M=512, N=3072, K=768, bias=0), "sim": dict(M=64, N=48, K=32, bias=0)}
    checks = (Check("x(7,5) w(3,5) +bias", _features((7, 5), 3)),
              Check("x(2,3,9,17) w(13,17) batched", _features((2, 3, 9, 17), 13, bias=False)),
              Check("x(0,4) w(6,4) empty", _features((0, 4), 6)),
              Check("x(2,9,17) w(13,17) +bias gelu", _features((2, 9, 17), 13, act="gelu")))

    def label(self, s):
        return f"{s['M']}x{s['K']} -> {s['N']}{' +bias' if s['bias'] else ''}{act_label(s['act'])}"

    def inputs(self, s, dtype, rng):
        sc = s["K"] ** -0.25
        return dict(x=normal(rng, (s["M"], s["K"]), dtype, sc),
                    w=normal(rng, (s["N"], s["K"]), dtype, sc),
                    b=normal(rng, s["N"], dtype) if s["bias"] else None,   # torch: x's dtype
                    p=dict(activation=ACT_NAMES[s["act"]]))

    arrays = ("x", "w", "b")

    @staticmethod
    def of(ns):
        return ns.linear

    def torch_call(self, F, t):
        return torch_activation(F, F.linear(t["x"], t["w"], t["b"]), t.get("p", {}).get("activation"))

    def reduction(self, i):
        return i["x"].shape[-1]

    def out_elements(self, s, inp):
        return s["M"] * s["N"]

    def struct(self, s, out_shape):
        return structs.gemm_args(s["M"], s["N"], s["K"], trans_b=True, activation=s["act"])

    def costs(self, s, out_shape, itemsize):
        """The GEMM's, plus the bias: N elements read and one add per output (the bias
        written into the result before the GEMM is traffic, not compulsory)."""
        c = super().costs(s, out_shape, itemsize)
        if not s["bias"]:
            return c
        return structs.Cost(c.flops + s["M"] * s["N"], c.bytes + s["N"] * itemsize)


LINEAR = Linear()
