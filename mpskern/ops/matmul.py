"""matmul (np.matmul's rules) and gemm (alpha*op(A)*op(B) + beta*C), both on the backend's
gemm (mk_gemm_args), and their entries in the op table (MATMUL, GEMM)."""
from math import prod

import numpy as np

from mpskern import _args
from mpskern import reference as ref
from mpskern import structs
from mpskern.backends.family import Family
from mpskern.ops.op import (ACT_FIELD, ACT_NAMES, Check, Field, Op, act_label, normal,
                            torch_activation)
from mpskern.shapes import broadcast_batch


def matmul(a, b, *, backend="auto", out=None):
    """The matrix product with np.matmul's rules: 1-D operands are promoted (a row
    vector on the left, a column on the right) and the added dimension is removed from
    the result; batch dimensions (all but the last two) broadcast.

    Parameters
    ----------
    a : array (..., M, K) or (K,)
        The left operand.
    b : array (..., K, N) or (K,)
        The right operand, of a's dtype.

    Returns
    -------
    numpy.ndarray
        (..., M, N) in a's dtype, the batch dimensions broadcast.

    Example
    -------
        a = np.ones((2, 64, 32), np.float32)
        b = np.ones((32, 16), np.float32)
        y = mk.matmul(a, b)                      # (2, 64, 16), every entry 32.0
    """
    op = "matmul"
    a, code = _args.array(a, "a", op)
    b = _args.same_dtype(b, "b", a, "a", op)
    if a.ndim == 2 == b.ndim and out is None:   # the common call first, without the batch logic
        M, K = a.shape
        K2, N = b.shape
        if K == K2 and M and N and K:
            return _plain(M, N, K, code, a, b, backend)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{op}: a has shape {a.shape} and b has shape {b.shape}; matmul needs "
                         "at least 1 dimension on each side (use np.multiply for scalars)")
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    M, K = a2.shape[-2:]
    K2, N = b2.shape[-2:]
    if K != K2:
        raise ValueError(f"{op}: the inner dimensions differ: a has shape {a.shape} (K={K}) and "
                         f"b has shape {b.shape} (K={K2}); a.shape[-1] must equal "
                         f"{'b.shape[0]' if b.ndim == 1 else 'b.shape[-2]'} (transpose or reshape "
                         "an operand)")
    batch = broadcast_batch(a2.shape[:-2], b2.shape[:-2], a.shape, b.shape, op)
    shape = batch + ((M,) if a.ndim > 1 else ()) + ((N,) if b.ndim > 1 else ())
    _args.check_size(batch + (M, N), "the result", op)
    be = _args.backend(backend)
    y, out = _args.output(out, shape, a.dtype, op, (a, b))
    if y.size == 0 or K == 0:
        y[...] = 0  # K == 0: an empty sum
        return _result(y, out)
    nb, na, nbb = prod(batch), prod(a2.shape[:-2]), prod(b2.shape[:-2])
    if nbb == 1 and na == nb:
        # b is shared by the whole batch: fold the batch into M (one larger GEMM)
        A, B, count, m, sa, sb = a2, b2, 1, nb * M, 0, 0
    else:
        A, sa = _batched(a2, na, nb, batch, "a", op), M * K
        B, sb = _batched(b2, nbb, nb, batch, "b", op), K * N
        if na == 1:
            sa = 0  # broadcast through a zero batch stride
        if nbb == 1:
            sb = 0
        count, m = nb, M
    be.execute("gemm", structs.gemm_args(m, N, K, batch=count, stride_a=sa, stride_b=sb), code,
               A, B, None, y)
    return _result(y, out)


def _plain(M, N, K, code, a, b, backend):
    """The common call, a 2-D @ 2-D product into a new array, without the batch logic."""
    if M * N >= _args.INT32_LIMIT:
        _args.too_big("the result", (M, N), "matmul")
    be = _args.backend(backend)
    y = np.empty((M, N), a.dtype)
    be.execute("gemm", structs.plain_gemm_args(M, N, K), code, a, b, None, y)
    return y


def _batched(x, n, nb, batch, name, op):
    """x itself when its batch is 1 or the full batch; else x broadcast and copied."""
    if n == 1 or n == nb:
        return x
    full = batch + x.shape[-2:]
    _args.check_size(full, f"{name} broadcast to the batch", op)
    return np.ascontiguousarray(np.broadcast_to(x, full))


def _result(y, out):
    if out is None and y.ndim == 0:
        return y[()]  # 1-D @ 1-D is a scalar, as np.matmul returns
    return _args.finish(y, out)


def gemm(a, b, c=None, *, alpha=1.0, beta=None, trans_a=False, trans_b=False, activation=None,
         backend="auto", out=None):
    """activation(alpha * op(a) @ op(b) + beta * c), where op transposes the last two
    dimensions when trans_a / trans_b is set. a and b are 2-D (M, K) / (K, N) or batched 3-D
    (a batch of 1 broadcasts); c broadcasts to the result's shape and has a's dtype.

    beta=None (the default) means 1 when c is given and 0 without it, as torch.addmm: so
    gemm(a, b, c) is a @ b + c. An explicit beta=0 with c ignores c entirely (NaN or Inf
    in it do not reach the result, as torch.addmm documents); a nonzero beta needs c.

    Parameters
    ----------
    a : array (M, K) or (B, M, K); (K, M) / (B, K, M) with trans_a
        The left operand.
    b : array (K, N) or (B, K, N); (N, K) / (B, N, K) with trans_b
        The right operand, of a's dtype.
    c : array broadcastable to (M, N) / (B, M, N), optional
        Added after scaling by beta; a's dtype.
    alpha : float
        Scale of the product (default 1).
    beta : float or None
        Scale of c: None is 1 with c and 0 without it.
    trans_a, trans_b : bool
        Read a / b transposed (no copy is made).

    Returns
    -------
    numpy.ndarray
        (M, N) or (B, M, N) in a's dtype.

    Example
    -------
        a = np.ones((64, 32), np.float32)
        b = np.ones((32, 16), np.float32)
        c = np.full((64, 16), 2.0, np.float32)
        y = mk.gemm(a, b, c)                     # a @ b + c: every entry 34.0
        y = mk.gemm(a.T.copy(), b, c, alpha=0.5, beta=0.0, trans_a=True)   # 0.5 * a @ b
    """
    op = "gemm"
    a, code = _args.array(a, "a", op)
    b = _args.same_dtype(b, "b", a, "a", op)
    for x, nm in ((a, "a"), (b, "b")):
        if x.ndim not in (2, 3):
            raise ValueError(f"{op}: {nm} has shape {x.shape}; gemm takes 2-D matrices or 3-D "
                             "batches of them (use matmul for other ranks)")
    alpha = _args.real(alpha, "alpha", op)
    beta = (0.0 if c is None else 1.0) if beta is None else _args.real(beta, "beta", op)
    ta, tb = _args.flag(trans_a, "trans_a", op), _args.flag(trans_b, "trans_b", op)
    act = _args.activation(activation, op)
    c_user = c
    M, K = a.shape[-1:-3:-1] if ta else a.shape[-2:]
    K2, N = b.shape[-1:-3:-1] if tb else b.shape[-2:]
    if K != K2:
        raise ValueError(f"{op}: the inner dimensions differ: op(a) is {M}x{K} (a.shape={a.shape}, "
                         f"trans_a={ta}) and op(b) is {K2}x{N} (b.shape={b.shape}, trans_b={tb}); "
                         "fix the shapes or the trans_a/trans_b flags")
    na = a.shape[0] if a.ndim == 3 else 1
    nbb = b.shape[0] if b.ndim == 3 else 1
    if na != nbb and na != 1 and nbb != 1:
        raise ValueError(f"{op}: the batch sizes of a {a.shape} and b {b.shape} differ; make them "
                         "equal or 1")
    nb = max(na, nbb)
    shape = (nb, M, N) if 3 in (a.ndim, b.ndim) else (M, N)
    _args.check_size(shape, "the result", op)
    if c is None:
        if beta != 0.0:
            raise ValueError(f"{op}: beta={beta} needs c; pass c (shape {shape}) or beta=0")
        has_c, sc = False, 0
    else:
        has_c = beta != 0.0
        c = _args.same_dtype(c, "c", a, "a", op)
        try:
            np.broadcast_shapes(c.shape, shape)
            ok = len(c.shape) <= len(shape)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{op}: c has shape {c.shape} which does not broadcast to the "
                             f"result's shape {shape}; pass c with shape {shape}")
        if c.shape[-2:] == (M, N) and len(shape) == 3 and (c.ndim == 2 or c.shape[0] == 1):
            sc = 0  # one C for the whole batch
        elif c.shape == shape:
            sc = M * N
        elif (c.ndim and c.shape[-1] == N and c.size in (N, nb * N)    # (a 0-d c: broadcast)
              and (c.ndim == 1 or c.shape[-2] == 1)):
            sc = None   # one row for all output rows (of each item): written into the result
        else:
            c = np.ascontiguousarray(np.broadcast_to(c, shape))
            sc = M * N
    be = _args.backend(backend)
    # C may alias out (the kernel reads each C element before writing it)
    inputs = (a, b) if c is None or c_user is out else (a, b, c)
    y, out = _args.output(out, shape, a.dtype, op, inputs)
    if y.size == 0:
        return _args.finish(y, out)
    if K == 0 or alpha == 0:    # no product (BLAS and torch compute none): activation(beta * c)
        with np.errstate(over="ignore"):    # beyond float16's range: inf, as the kernels
            y[...] = ref.activate(beta * c.astype(np.float32), activation) if has_c else 0
        return _args.finish(y, out)
    if sc is None:              # the result holds C, read in place (it may alias out)
        c, sc = (_args.fill_rows(be, y, c) if has_c else c), M * N
    args = structs.gemm_args(M, N, K, batch=nb, trans_a=ta, trans_b=tb,
                             stride_a=0 if na == 1 else M * K, stride_b=0 if nbb == 1 else K * N,
                             stride_c=sc, has_c=has_c, alpha=alpha, beta=beta, activation=act)
    be.execute("gemm", args, code, a, b, c if has_c else None, y)
    return _args.finish(y, out)



class GemmFamily(Family):
    """mk_gemm_args: the native row 'gemm'; on metal and sim mpskern/backends/gpu/gemm.py."""
    name = "gemm"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import gemm     # the GPU path, loaded by its first call
        return gemm.gemm(ctx, args, dtype, *arrays, config=config)

# -- the op table's entries -----------------------------------------------------------------
_SQUARE = [(f"{n}^3", dict(M=n)) for n in (64, 128, 256, 512, 1024, 2048, 4096)]
_TRANSFORMER = [  # BERT-base / GPT-2-small projections at 512 tokens
    ("qkv 512x2304x768", dict(M=512, N=2304, K=768)),
    ("attn-out 512x768x768", dict(M=512, N=768, K=768)),
    ("mlp-up 512x3072x768", dict(M=512, N=3072, K=768)),
    ("mlp-down 512x768x3072", dict(M=512, N=768, K=3072)),
    ("scores 12x512x512x64", dict(M=512, N=512, K=64, batch=12)),
]


def _operands(sa, sb, sc=None, **p):
    """A selftest case: a of shape sa, b of sb (c of sc), options p."""
    def inputs(rng, dt):
        return dict(a=normal(rng, sa, dt), b=normal(rng, sb, dt),
                    c=None if sc is None else normal(rng, sc, dt), p=p)
    return inputs


class Matmul(Op):
    name = "matmul"
    kernel, cost, metric, work_done = "gemm", staticmethod(structs.gemm_cost), "gflops", True
    fields = (Field("M", None, "rows of a"), Field("N", "M", "columns of b (default M)"),
              Field("K", "M", "inner dimension (default M)"), Field("batch", 1))
    example = "1024"
    presets = {"small": _SQUARE[1:5], "square": _SQUARE, "transformer": _TRANSFORMER,
               "tiny": [("32^3", dict(M=32)), ("64x48x80", dict(M=64, N=48, K=80))]}
    tune = {"metal": dict(M=1024), "sim": dict(M=64)}
    checks = (Check("(7,5) @ (5,3)", _operands((7, 5), (5, 3))),
              Check("(2,1,9,17) @ (3,17,13) broadcast", _operands((2, 1, 9, 17), (3, 17, 13))),
              Check("(17,) @ (17,6)", _operands((17,), (17, 6))),
              Check("(0,5) @ (5,3) empty", _operands((0, 5), (5, 3))))

    def label(self, s):
        b = f"{s['batch']}x" if s["batch"] > 1 else ""
        return f"{b}{s['M']}x{s['N']}x{s['K']}"

    def inputs(self, s, dtype, rng):
        lead = (s["batch"],) if s["batch"] > 1 else ()
        return dict(a=normal(rng, lead + (s["M"], s["K"]), dtype, s["K"] ** -0.25),
                    b=normal(rng, lead + (s["K"], s["N"]), dtype, s["K"] ** -0.25))

    arrays = ("a", "b")

    @staticmethod
    def of(ns):
        return ns.matmul

    def torch_call(self, F, t):
        import torch
        return torch.matmul(t["a"], t["b"])

    @staticmethod
    def mlx_call(mx, t):
        return mx.matmul(t["a"], t["b"])

    def reduction(self, i):
        return i["a"].shape[-1]

    def out_elements(self, s, inp):
        return s["batch"] * s["M"] * s["N"]

    def struct(self, s, out_shape):
        return structs.gemm_args(s["M"], s["N"], s["K"], batch=s["batch"])


class Gemm(Op):
    name = "gemm"
    kernel, cost, metric, work_done = "gemm", staticmethod(structs.gemm_cost), "gflops", True
    fields = (Field("M", None), Field("N", "M", "(default M)"), Field("K", "M", "(default M)"),
              Field("ta", 0, "A transposed 0/1"), Field("tb", 0, "B transposed 0/1"),
              Field("c", 1, "add beta*C 0/1"), ACT_FIELD)
    example = "512,256,1024,tb=1"
    zero_ok = frozenset({"ta", "tb", "c", "act"})
    later = {"act": 0}
    presets = {
        "small": [(f"{n}^3 +C", dict(M=n)) for n in (128, 256, 512, 1024)],
        "square": [(f"{n}^3 +C", dict(M=n)) for n in (64, 128, 256, 512, 1024, 2048, 4096)],
        "transposed": [(f"1024^3 {a}{b}", dict(M=1024, ta=int(a == "T"), tb=int(b == "T")))
                       for a in "NT" for b in "NT"],
        "tiny": [("32^3 +C", dict(M=32)), ("48x40x72 TN", dict(M=48, N=40, K=72, ta=1, c=0))],
        # a transformer MLP's up projection (GPT-2 small, 512 tokens) with each activation
        "activations": [(f"mlp-up 512x3072x768{act_label(a)}", dict(M=512, N=3072, K=768, c=0, act=a))
                        for a in ACT_NAMES],
    }
    tune = {"metal": dict(M=1024, c=0), "sim": dict(M=64, c=0)}
    checks = (Check("M33 N31 K65", _operands((33, 65), (65, 31), alpha=1.0, beta=0.0)),
              Check("M6 N9 K11 A^T B^T alpha .5 beta 2 +C",
                    _operands((11, 6), (9, 11), (6, 9), alpha=0.5, beta=2.0, trans_a=True,
                              trans_b=True)),
              Check("M19 N37 K23 +C gelu", _operands((19, 23), (23, 37), (19, 37), beta=1.0,
                                                    activation="gelu")),
              Check("M8 N70 K9 silu", _operands((8, 9), (9, 70), activation="silu")))

    def label(self, s):
        t = "".join(("T" if s["ta"] else "N", "T" if s["tb"] else "N"))
        return f"{s['M']}x{s['N']}x{s['K']} {t}{' +C' if s['c'] else ''}{act_label(s['act'])}"

    def inputs(self, s, dtype, rng):
        M, N, K = s["M"], s["N"], s["K"]
        sc = K ** -0.25
        return dict(a=normal(rng, (K, M) if s["ta"] else (M, K), dtype, sc),
                    b=normal(rng, (N, K) if s["tb"] else (K, N), dtype, sc),
                    c=normal(rng, (M, N), dtype) if s["c"] else None,
                    p=dict(alpha=1.0, beta=0.5 if s["c"] else 0.0, trans_a=bool(s["ta"]),
                           trans_b=bool(s["tb"]), activation=ACT_NAMES[s["act"]]))

    arrays = ("a", "b", "c")

    @staticmethod
    def of(ns):
        return ns.gemm

    def torch_call(self, F, t):
        import torch
        p = t["p"]
        a = t["a"].T if p.get("trans_a") else t["a"]
        b = t["b"].T if p.get("trans_b") else t["b"]
        if t["c"] is None:
            y = torch.mm(a, b) * p.get("alpha", 1.0)
        else:
            y = torch.addmm(t["c"], a, b, beta=p.get("beta", 0.0), alpha=p.get("alpha", 1.0))
        return torch_activation(F, y, p.get("activation"))

    def reduction(self, i):
        return i["a"].shape[-2 if i["p"].get("trans_a") else -1]

    def out_elements(self, s, inp):
        return s["M"] * s["N"]

    def struct(self, s, out_shape):
        return structs.gemm_args(s["M"], s["N"], s["K"], has_c=s["c"], activation=s["act"])


MATMUL, GEMM = Matmul(), Gemm()
