"""matmul (np.matmul's rules) and gemm (alpha*op(A)*op(B) + beta*C), both on the backend's
gemm (mk_gemm_args)."""
from math import prod

import numpy as np

from mpskern import _args
from mpskern.shapes import broadcast_batch


def matmul(a, b, *, backend="auto", out=None):
    """The matrix product with np.matmul's rules: 1-D operands are promoted (a row
    vector on the left, a column on the right) and the added dimension is removed from
    the result; batch dimensions (all but the last two) broadcast."""
    op = "matmul"
    a, code = _args.array(a, "a", op)
    b = _args.same_dtype(b, "b", a, "a", op)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{op}: a has shape {a.shape} and b has shape {b.shape}; matmul needs "
                         "at least 1 dimension on each side (use np.multiply for scalars)")
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    M, K = a2.shape[-2:]
    K2, N = b2.shape[-2:]
    if a.ndim == 2 and b.ndim == 2 and K == K2 and M * N * K and out is None:
        return _plain(M, N, K, code, a, b, backend)
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
    args = {"batch": count, "M": m, "N": N, "K": K, "lda": K, "ldb": N, "ldc": N,
            "stride_a": sa, "stride_b": sb, "stride_c": m * N, "stride_out": m * N,
            "trans_a": 0, "trans_b": 0, "has_c": 0, "alpha": 1.0, "beta": 0.0, "split_k": 0}
    be.gemm(args, code, A, B, None, y)
    return _result(y, out)


def _plain(M, N, K, code, a, b, backend):
    """The common call, a 2-D @ 2-D product into a new array, without the batch logic."""
    if M * N >= _args.INT32_LIMIT:
        _args.too_big("the result", (M, N), "matmul")
    be = _args.backend(backend)
    y = np.empty((M, N), a.dtype)
    be.gemm({"batch": 1, "M": M, "N": N, "K": K, "lda": K, "ldb": N, "ldc": N, "stride_a": 0,
             "stride_b": 0, "stride_c": M * N, "stride_out": M * N, "trans_a": 0, "trans_b": 0,
             "has_c": 0, "alpha": 1.0, "beta": 0.0, "split_k": 0}, code, a, b, None, y)
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


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, backend="auto",
         out=None):
    """alpha * op(a) @ op(b) + beta * c, where op transposes the last two dimensions when
    trans_a / trans_b is set. a and b are 2-D (M, K) / (K, N) or batched 3-D (a batch of 1
    broadcasts); c broadcasts to the result's shape and has a's dtype."""
    op = "gemm"
    a, code = _args.array(a, "a", op)
    b = _args.same_dtype(b, "b", a, "a", op)
    for x, nm in ((a, "a"), (b, "b")):
        if x.ndim not in (2, 3):
            raise ValueError(f"{op}: {nm} has shape {x.shape}; gemm takes 2-D matrices or 3-D "
                             "batches of them (use matmul for other ranks)")
    alpha = _args.real(alpha, "alpha", op)
    beta = _args.real(beta, "beta", op)
    ta, tb = _args.flag(trans_a, "trans_a", op), _args.flag(trans_b, "trans_b", op)
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
        else:
            c = np.ascontiguousarray(np.broadcast_to(c, shape))
            sc = M * N
    be = _args.backend(backend)
    # C may alias out (the kernel reads each C element before writing it)
    inputs = (a, b) if c is None or c_user is out else (a, b, c)
    y, out = _args.output(out, shape, a.dtype, op, inputs)
    if y.size == 0:
        return _args.finish(y, out)
    if K == 0:
        y[...] = beta * c.astype(np.float32) if has_c else 0
        return _args.finish(y, out)
    args = {"batch": nb, "M": M, "N": N, "K": K, "lda": a.shape[-1], "ldb": b.shape[-1], "ldc": N,
            "stride_a": 0 if na == 1 else M * K, "stride_b": 0 if nbb == 1 else K * N,
            "stride_c": sc, "stride_out": M * N, "trans_a": int(ta), "trans_b": int(tb),
            "has_c": int(has_c), "alpha": alpha, "beta": beta, "split_k": 0}
    be.gemm(args, code, a, b, c if has_c else None, y)
    return _args.finish(y, out)
