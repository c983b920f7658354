"""Direct tests of the C CPU kernels (objc/cpu/) through mpskern._native.cpu_*, against
float64 numpy references (written here from torch's documented semantics, conv2d's is
mpskern/reference.py's; the public-API tests live in tests/test_ops_*.py). Arguments are
the structs of metal/mk_args.h as dicts."""
import multiprocessing as mp
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from mpskern import _native, structs
from mpskern.reference import conv2d as conv_ref

F32, F16 = _native.F32, _native.F16
DT = {np.float32: F32, np.float16: F16}
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float16: dict(rtol=4e-3, atol=4e-3)}


def rnd(shape, dtype, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def close(got, ref, dtype, scale=1.0):
    t = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=t["rtol"],
                               atol=t["atol"] * scale)


# ------------------------------------------------------------------------------ gemm
def gemm_args(batch, M, N, K, ta, tb, has_c, alpha, beta, sa, sb, sc):
    return dict(batch=batch, M=M, N=N, K=K, lda=M if ta else K, ldb=K if tb else N, ldc=N,
                stride_a=sa, stride_b=sb, stride_c=sc, stride_out=M * N, trans_a=ta,
                trans_b=tb, has_c=has_c, alpha=alpha, beta=beta, split_k=1, activation=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 13, 5), (64, 48, 33), (130, 70, 260), (5, 6, 0)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(dtype, M, N, K, ta, tb, threads):
    batch = 3
    A = rnd((batch, K, M) if ta else (batch, M, K), dtype, 1)
    B = rnd((1, N, K) if tb else (1, K, N), dtype, 2)      # broadcast over the batch
    C = rnd((batch, M, N), dtype, 3)
    out = np.empty((batch, M, N), dtype)
    args = gemm_args(batch, M, N, K, ta, tb, 1, 0.5, -1.5, A[0].size, 0, M * N)
    _native.cpu_gemm(args, DT[dtype], A, B, C, out)
    a = A.astype(np.float64).transpose(0, 2, 1) if ta else A.astype(np.float64)
    b = B.astype(np.float64).transpose(0, 2, 1) if tb else B.astype(np.float64)
    ref = 0.5 * (a @ b) - 1.5 * C.astype(np.float64)
    close(out, ref, dtype, scale=max(1.0, np.sqrt(K)))


def _gemm_args_as_written_out(M, N, K, *, batch=1, trans_a=0, trans_b=0, lda=None, ldb=None,
                              ldc=None, stride_a=0, stride_b=0, stride_c=0, stride_out=None,
                              has_c=0, alpha=1.0, beta=0.0, split_k=0, activation=0):
    # structs.gemm_args before it copied a template (its definition, one literal)
    return {"batch": batch, "M": M, "N": N, "K": K,
            "lda": (M if trans_a else K) if lda is None else lda,
            "ldb": (K if trans_b else N) if ldb is None else ldb,
            "ldc": N if ldc is None else ldc, "stride_a": stride_a, "stride_b": stride_b,
            "stride_c": stride_c, "stride_out": M * N if stride_out is None else stride_out,
            "trans_a": trans_a, "trans_b": trans_b, "has_c": has_c, "alpha": alpha,
            "beta": beta, "split_k": split_k, "activation": activation}


@pytest.mark.parametrize("kw", [{}, dict(batch=3), dict(trans_a=True), dict(trans_b=1),
                                dict(lda=99, ldb=98, ldc=97, stride_out=5), dict(stride_b=7),
                                dict(stride_a=1, stride_c=2), dict(has_c=True, beta=-0.5),
                                dict(alpha=0.0), dict(alpha=float("nan")), dict(activation=2),
                                dict(split_k=4), dict(batch=2, trans_a=1, trans_b=1, has_c=1,
                                                      alpha=2.0, beta=3.0, stride_c=6)])
def test_gemm_args_builders_agree(kw):
    """gemm_args (a copy of defaults, only non-default fields set) and plain_gemm_args build
    the struct the written-out definition does, in the struct's field order."""
    got, want = structs.gemm_args(5, 6, 7, **kw), _gemm_args_as_written_out(5, 6, 7, **kw)
    assert list(got) == list(want) == list(_native.OPS["gemm"].fields)
    assert _native.pack_args("gemm", got) == _native.pack_args("gemm", want)
    assert structs.plain_gemm_args(5, 6, 7) == structs.gemm_args(5, 6, 7)


def test_gemm_c_aliases_out_and_no_c():
    A, B = rnd((20, 30), np.float32, 1), rnd((30, 10), np.float32, 2)
    C = rnd((20, 10), np.float32, 3)
    ref = A.astype(np.float64) @ B + 2.0 * C
    _native.cpu_gemm(gemm_args(1, 20, 10, 30, 0, 0, 1, 1.0, 2.0, 0, 0, 0), F32, A, B, C, C)
    close(C, ref, np.float32, 5)
    out = np.full((20, 10), np.nan, np.float32)   # beta ignored without C: NaN must not leak
    _native.cpu_gemm(gemm_args(1, 20, 10, 30, 0, 0, 0, 1.0, 2.0, 0, 0, 0), F32, A, B, None, out)
    close(out, A.astype(np.float64) @ B, np.float32, 5)


def test_gemm_bad_leading_dim():
    A = np.zeros((4, 4), np.float32)
    args = gemm_args(1, 4, 4, 4, 0, 0, 0, 1.0, 0.0, 0, 0, 0)
    args["lda"] = 2
    with pytest.raises(ValueError, match="lda=2"):
        _native.cpu_gemm(args, F32, A, A, None, np.empty((4, 4), np.float32))
    with pytest.raises(ValueError, match="dtype 7"):
        _native.cpu_gemm(gemm_args(1, 4, 4, 4, 0, 0, 0, 1.0, 0.0, 0, 0, 0), 7, A, A, None, A)


# ------------------------------------------------------------------------------ conv2d
def conv_out(H, R, stride, pad, dil):
    return (H + 2 * pad - dil * (R - 1) - 1) // stride + 1


CONV_CASES = [
    # N, C, H, W, K, R, S, stride, pad, dil, groups
    (2, 3, 9, 11, 5, 3, 3, (1, 1), (1, 1), (1, 1), 1),
    (1, 4, 8, 8, 6, 1, 1, (1, 1), (0, 0), (1, 1), 1),          # 1x1 = GEMM
    (2, 6, 10, 7, 4, 1, 1, (2, 2), (0, 0), (1, 1), 2),         # strided 1x1, groups
    (1, 4, 13, 12, 8, 3, 2, (2, 3), (2, 1), (2, 1), 2),        # odd everything
    (2, 8, 12, 12, 8, 3, 3, (1, 1), (1, 1), (1, 1), 8),        # depthwise
    (1, 4, 11, 9, 8, 5, 3, (2, 1), (2, 1), (1, 2), 4),         # depthwise multiplier 2
    (1, 6, 11, 10, 6, 3, 3, (2, 2), (1, 1), (1, 1), 6),        # depthwise 3x3 stride 2
    (2, 4, 9, 9, 8, 3, 3, (1, 2), (2, 0), (2, 1), 4),          # depthwise 3x3 dilated, mult 2
    (1, 3, 5, 5, 2, 5, 5, (1, 1), (0, 0), (1, 1), 1),          # kernel = input
    (1, 2, 7, 7, 3, 2, 2, (1, 1), (0, 0), (1, 1), 1),          # even kernel
    (8, 6, 5, 6, 4, 3, 3, (1, 1), (1, 1), (1, 1), 2),          # small images: several per block
    (9, 8, 4, 4, 5, 1, 1, (1, 1), (0, 0), (1, 1), 1),          # ... 1x1, batch not a multiple
    (1, 32, 6, 6, 256, 3, 3, (1, 1), (1, 1), (1, 1), 1),       # batch 1, few pixels: one GEMM
    (1, 512, 4, 4, 256, 1, 1, (1, 1), (0, 0), (1, 1), 1),      # ... split over output channels
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d(dtype, case, with_bias, threads):
    N, C, H, W, K, R, S, stride, pad, dil, groups = case
    P, Q = conv_out(H, R, stride[0], pad[0], dil[0]), conv_out(W, S, stride[1], pad[1], dil[1])
    x = rnd((N, C, H, W), dtype, 1)
    w = rnd((K, C // groups, R, S), dtype, 2, 0.5)
    bias = rnd((K,), np.float32, 3) if with_bias else None
    y = np.full((N, K, P, Q), np.nan, dtype)
    args = dict(N=N, C=C, H=H, W=W, K=K, R=R, S=S, P=P, Q=Q, stride_h=stride[0],
                stride_w=stride[1], pad_h=pad[0], pad_w=pad[1], dil_h=dil[0], dil_w=dil[1],
                groups=groups, has_bias=int(with_bias), activation=0)
    _native.cpu_conv2d(args, DT[dtype], x, w, bias, y)
    ref = conv_ref(x, w, bias, stride, pad, dil, groups)
    close(y, ref, dtype, scale=np.sqrt(C // groups * R * S))


def test_conv2d_same_even_kernel_pads_bottom_right():
    # "same" with a 2x2 kernel: top/left pad 0, bottom/right pad 1, implied by P = H
    x, w = rnd((1, 2, 6, 5), np.float32, 1), rnd((3, 2, 2, 2), np.float32, 2)
    y = np.empty((1, 3, 6, 5), np.float32)
    _native.cpu_conv2d(structs.conv2d_args(1, 2, 6, 5, 3, 2, 2, 6, 5), F32, x, w, None, y)
    close(y, conv_ref(x, w, None, 1, "same"), np.float32, 3)


def test_conv2d_large_im2col_blocks():
    # big enough that the im2col is split into several blocks of output rows
    x, w = rnd((1, 64, 70, 70), np.float32, 1), rnd((16, 64, 3, 3), np.float32, 2, 0.1)
    y = np.empty((1, 16, 70, 70), np.float32)
    args = structs.conv2d_args(1, 64, 70, 70, 16, 3, 3, 70, 70, pad_h=1, pad_w=1)
    _native.cpu_conv2d(args, F32, x, w, None, y)
    close(y, conv_ref(x, w, None, 1, 1), np.float32, 24)


def test_conv2d_bad_groups():
    args = dict(N=1, C=3, H=4, W=4, K=4, R=1, S=1, P=4, Q=4, stride_h=1, stride_w=1,
                pad_h=0, pad_w=0, dil_h=1, dil_w=1, groups=2, has_bias=0,
                activation=0)
    x = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match="groups=2 must divide C=3"):
        _native.cpu_conv2d(args, F32, x, np.zeros((4, 1, 1, 1), np.float32), None,
                           np.zeros((1, 4, 4, 4), np.float32))


# ------------------------------------------------------------------------------ pooling
def pool_out(H, k, s, p, d, ceil):
    num = H + 2 * p - d * (k - 1) - 1
    o = (-(-num // s) if ceil else num // s) + 1
    if ceil and (o - 1) * s >= H + p:
        o -= 1
    return o


def pool_ref(x, mode, k, s, p, d, P, Q, count_include_pad=True, divisor=0):
    """Window by window, straight from torch's definitions."""
    x = x.astype(np.float64)
    N, C, H, W = x.shape
    y = np.zeros((N, C, P, Q))
    for i in range(P):
        for j in range(Q):
            hs, ws = i * s[0] - p[0], j * s[1] - p[1]
            rows = [hs + t * d[0] for t in range(k[0]) if 0 <= hs + t * d[0] < H]
            cols = [ws + t * d[1] for t in range(k[1]) if 0 <= ws + t * d[1] < W]
            win = x[:, :, rows][:, :, :, cols]
            if mode == 0:
                y[:, :, i, j] = win.max(axis=(2, 3))
                nan = np.isnan(win).any(axis=(2, 3))
                y[:, :, i, j][nan] = np.nan
            else:
                if divisor:
                    div = divisor
                elif count_include_pad:
                    he, we = min(hs + k[0], H + p[0]), min(ws + k[1], W + p[1])
                    div = (he - hs) * (we - ws)
                else:
                    div = len(rows) * len(cols)
                y[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return y


POOL_CASES = [
    # mode, H, W, k, s, p, d, ceil, count_include_pad, divisor
    (0, 9, 9, (3, 3), (2, 2), (1, 1), (1, 1), False, True, 0),
    (0, 10, 11, (3, 2), (2, 1), (1, 1), (2, 1), True, True, 0),
    (0, 7, 8, (2, 2), (2, 2), (0, 0), (1, 1), True, True, 0),
    (1, 8, 8, (2, 2), (2, 2), (0, 0), (1, 1), False, True, 0),
    (1, 9, 10, (3, 3), (2, 2), (1, 1), (1, 1), True, True, 0),    # ceil + include pad
    (1, 9, 10, (3, 3), (2, 2), (1, 1), (1, 1), True, False, 0),
    (1, 11, 6, (3, 2), (3, 2), (1, 1), (1, 1), True, True, 0),
    (1, 7, 7, (3, 3), (1, 1), (1, 0), (1, 1), False, True, 5),    # divisor_override
    # wide outputs (Q > 8: the row sweep) and narrow ones (window by window)
    (1, 20, 40, (3, 3), (2, 2), (1, 1), (1, 1), True, False, 0),
    (1, 20, 40, (3, 3), (1, 1), (1, 1), (1, 2), False, True, 0),
    (0, 12, 40, (2, 3), (2, 2), (0, 1), (1, 1), True, True, 0),
    (0, 9, 9, (3, 3), (2, 3), (1, 1), (2, 2), False, True, 0),    # dilated: tap by tap
    (1, 9, 9, (3, 3), (2, 3), (1, 1), (2, 2), True, False, 0),
    (1, 7, 7, (7, 7), (7, 7), (0, 0), (1, 1), False, True, 0),    # global pool: one span
    (0, 7, 7, (7, 7), (7, 7), (0, 0), (1, 1), False, True, 0),
    (1, 5, 5, (7, 7), (7, 7), (1, 1), (1, 1), False, False, 0),   # padded whole-row window
    (1, 5, 5, (7, 7), (7, 7), (1, 1), (1, 1), False, True, 0),
    (1, 9, 30, (2, 30), (2, 30), (0, 0), (1, 1), False, True, 0), # whole rows, two spans
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", POOL_CASES)
def test_pool2d(dtype, case, threads):
    mode, H, W, k, s, p, d, ceil, cip, div = case
    P, Q = pool_out(H, k[0], s[0], p[0], d[0], ceil), pool_out(W, k[1], s[1], p[1], d[1], ceil)
    x = rnd((2, 3, H, W), dtype, 4)
    y = np.full((2, 3, P, Q), np.nan, dtype)
    args = dict(N=2, C=3, H=H, W=W, P=P, Q=Q, kh=k[0], kw=k[1], stride_h=s[0], stride_w=s[1],
                pad_h=p[0], pad_w=p[1], dil_h=d[0], dil_w=d[1], mode=mode,
                count_include_pad=int(cip), divisor=div, pad_h_end=p[0], pad_w_end=p[1])
    _native.cpu_pool2d(args, DT[dtype], x, y, None)
    close(y, pool_ref(x, mode, k, s, p, d, P, Q, cip, div), dtype)


def test_max_pool_propagates_nan():
    x = rnd((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.nan
    y = np.empty((1, 1, 2, 2), np.float32)
    args = dict(N=1, C=1, H=4, W=4, P=2, Q=2, kh=2, kw=2, stride_h=2, stride_w=2, pad_h=0,
                pad_w=0, dil_h=1, dil_w=1, mode=0, count_include_pad=1, divisor=0,
                pad_h_end=0, pad_w_end=0)
    _native.cpu_pool2d(args, F32, x, y, None)
    assert np.isnan(y[0, 0, 0, 0]) and not np.isnan(y[0, 0, 1:, 1:]).any()


def test_global_max_pool_nan_and_inf():
    x = rnd((1, 3, 7, 7), np.float32)
    x[0, 0, 6, 6] = np.nan                      # NaN last, after larger values
    x[0, 1] = -np.inf
    y = np.empty((1, 3, 1, 1), np.float32)
    args = dict(N=1, C=3, H=7, W=7, P=1, Q=1, kh=7, kw=7, stride_h=7, stride_w=7, pad_h=0,
                pad_w=0, dil_h=1, dil_w=1, mode=0, count_include_pad=1, divisor=0,
                pad_h_end=0, pad_w_end=0)
    _native.cpu_pool2d(args, F32, x, y, None)
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 1, 0, 0] == -np.inf
    assert y[0, 2, 0, 0] == x[0, 2].max()


# ------------------------------------------------------------------------------ softmax
def softmax_ref(x, axis, log):
    x = x.astype(np.float64)
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return (x - m - np.log(s)) if log else e / s


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,axis", [((4, 4), 1), ((3, 1000), 1), ((5, 7, 300), 1),
                                        ((9, 17), 1), ((30, 56), 1), ((3, 16), 1),
                                        ((2, 9, 600), 2), ((600, 3), 0), ((1, 1), 0),
                                        ((3, 5000, 2), 1), ((4, 70, 5), 1), ((2, 40, 15), 1),
                                        ((2, 90000, 3), 1)])
@pytest.mark.parametrize("log", [0, 1])
def test_softmax(dtype, shape, axis, log, threads):
    x = rnd(shape, dtype, 5, 4.0)
    x.flat[0] = 60.0          # large values: the max must be subtracted
    y = np.full(shape, np.nan, dtype)
    outer = int(np.prod(shape[:axis]))
    inner = int(np.prod(shape[axis + 1:]))
    _native.cpu_softmax(dict(outer=outer, n=shape[axis], inner=inner, log=log), DT[dtype], x, y)
    ref = softmax_ref(x, axis, log)
    close(y, ref, dtype, scale=np.abs(ref).max() if log else 1.0)
    if not log:
        np.testing.assert_allclose(y.astype(np.float64).sum(axis=axis), 1.0,
                                   rtol=TOL[dtype]["rtol"] * 4)


def test_softmax_extremes():
    x = np.array([[-np.inf, 0.0, 1.0], [1e30, -1e30, 0.0], [np.nan, 1.0, 2.0]], np.float32)
    y = np.empty_like(x)
    _native.cpu_softmax(dict(outer=3, n=3, inner=1, log=0), F32, x, y)
    e = np.exp([-1.0, 0.0])
    np.testing.assert_allclose(y[0], [0.0, *(e / e.sum())], rtol=1e-6)   # exp(-inf) = 0
    np.testing.assert_allclose(y[1], [1.0, 0.0, 0.0])
    assert np.isnan(y[2]).all()


@pytest.mark.parametrize("log", [0, 1])
def test_softmax_small_inner_extremes(log):
    # a few inner columns (transposed to rows): -inf entries, a NaN column, an all -inf one
    x = rnd((3, 50, 4), np.float32, 61, 3.0)
    x[0, :10, 0] = -np.inf
    x[1, 7, 1] = np.nan
    x[2, :, 2] = -np.inf
    y = np.empty_like(x)
    _native.cpu_softmax(dict(outer=3, n=50, inner=4, log=log), F32, x, y)
    with np.errstate(invalid="ignore"):           # the all -inf column: -inf - -inf
        ref = softmax_ref(x, 1, log)
    bad = np.zeros(x.shape, bool)
    bad[1, :, 1] = bad[2, :, 2] = True
    assert np.isnan(y[bad]).all()
    fin = np.isfinite(ref) & ~bad
    np.testing.assert_allclose(y[fin], ref[fin], rtol=1e-4, atol=1e-6)
    assert (y[~fin & ~bad] == ref[~fin & ~bad]).all()


@pytest.mark.parametrize("log", [0, 1])
def test_softmax_long_rows_masked_blocks(log):
    # rows longer than a block: whole blocks of -inf (masking), the maximum growing late,
    # a NaN in the last block, an all -inf row
    n = 9000
    x = rnd((4, n), np.float32, 60, 3.0)
    x[0, :5000] = -np.inf
    x[1, :] = np.linspace(-50.0, 50.0, n, dtype=np.float32)
    x[2, -3] = np.nan
    x[3, :] = -np.inf
    y = np.empty_like(x)
    _native.cpu_softmax(dict(outer=4, n=n, inner=1, log=log), F32, x, y)
    for i in (0, 1):
        ref = softmax_ref(x[i:i + 1], 1, log)[0]
        fin = np.isfinite(ref)
        np.testing.assert_allclose(y[i][fin], ref[fin], rtol=1e-4, atol=1e-6)
        assert (y[i][~fin] == ref[~fin]).all()       # exp(-inf) = 0 (log: -inf)
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()


# ------------------------------------------------------------------------------ norms
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("rows,n", [(1, 1), (7, 33), (64, 1000), (3, 50257)])
@pytest.mark.parametrize("kind", [0, 1])
@pytest.mark.parametrize("affine", [(1, 1), (0, 0), (1, 0), (0, 1)])
def test_rownorm(dtype, rows, n, kind, affine, threads):
    x = rnd((rows, n), dtype, 6, 3.0) + dtype(2.0)     # offset: mean must be removed
    w, b = rnd((n,), np.float32, 7), rnd((n,), np.float32, 8)
    y = np.full((rows, n), np.nan, dtype)
    eps = 1e-5
    _native.cpu_rownorm(dict(rows=rows, n=n, kind=kind, has_weight=affine[0],
                             has_bias=affine[1], eps=eps), DT[dtype], x,
                        w if affine[0] else None, b if affine[1] else None, y)
    xd = x.astype(np.float64)
    if kind == 0:
        ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + eps)
    else:
        ref = xd / np.sqrt((xd * xd).mean(1, keepdims=True) + eps)
    if affine[0]:
        ref = ref * w
    if affine[1] and kind == 0:
        ref = ref + b
    close(y, ref, dtype, scale=np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("N,C,HW,G", [(2, 6, 25, 3), (1, 4, 1, 4), (3, 8, 300, 1), (2, 32, 49, 8)])
def test_group_norm(dtype, N, C, HW, G, threads):
    x = rnd((N, C, HW), dtype, 9, 2.0) + dtype(1.0)
    w, b = rnd((C,), np.float32, 10), rnd((C,), np.float32, 11)
    y = np.full((N, C, HW), np.nan, dtype)
    _native.cpu_group_norm(dict(N=N, C=C, HW=HW, groups=G, has_weight=1, has_bias=1, eps=1e-5),
                           DT[dtype], x, w, b, y)
    xg = x.astype(np.float64).reshape(N, G, -1)
    ref = ((xg - xg.mean(2, keepdims=True)) / np.sqrt(xg.var(2, keepdims=True) + 1e-5))
    ref = ref.reshape(N, C, HW) * w[:, None] + b[:, None]
    close(y, ref, dtype, scale=np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("training", [0, 1])
@pytest.mark.parametrize("N,C,HW", [(4, 3, 20), (2, 16, 1), (1, 5, 77)])
def test_batch_norm(dtype, training, N, C, HW, threads):
    x = rnd((N, C, HW), dtype, 12, 2.0) + dtype(0.5)
    rm0, rv0 = rnd((C,), np.float32, 13), np.abs(rnd((C,), np.float32, 14)) + 0.5
    rm, rv = rm0.copy(), rv0.copy()
    w, b = rnd((C,), np.float32, 15), rnd((C,), np.float32, 16)
    y = np.full((N, C, HW), np.nan, dtype)
    args = dict(N=N, C=C, HW=HW, training=training, has_running=1, has_weight=1, has_bias=1,
                eps=1e-5, momentum=0.1)
    _native.cpu_batch_norm(args, DT[dtype], x, rm, rv, w, b, y)
    xd = x.astype(np.float64)
    if training:
        mean, var = xd.mean((0, 2)), xd.var((0, 2))
        cnt = N * HW
        np.testing.assert_allclose(rm, 0.9 * rm0 + 0.1 * mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rv, 0.9 * rv0 + 0.1 * var * cnt / (cnt - 1), rtol=1e-5,
                                   atol=1e-6)
    else:
        mean, var = rm0.astype(np.float64), rv0.astype(np.float64)
        assert (rm == rm0).all() and (rv == rv0).all()
    ref = (xd - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) * w[:, None] + b[:, None]
    close(y, ref, dtype, scale=np.abs(ref).max())


def test_batch_norm_training_one_value_per_channel():
    args = dict(N=1, C=2, HW=1, training=1, has_running=1, has_weight=0, has_bias=0,
                eps=1e-5, momentum=0.1)
    x = np.zeros((1, 2, 1), np.float32)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        _native.cpu_batch_norm(args, F32, x, np.zeros(2, np.float32), np.ones(2, np.float32),
                               None, None, np.empty_like(x))


# ------------------------------------------------------------------------------ threads
def test_num_threads_setting():
    old = _native.cpu_get_num_threads()
    try:
        _native.cpu_set_num_threads(3)
        assert _native.cpu_get_num_threads() == 3
        _native.cpu_set_num_threads(0)
        assert _native.cpu_get_num_threads() >= 1
    finally:
        _native.cpu_set_num_threads(old)


def test_concurrent_calls_from_python_threads():
    """Several application threads share the pool: each result must still be right."""
    xs = [rnd((64, 2000), np.float32, 20 + i, 3.0) for i in range(6)]
    refs = [softmax_ref(x, 1, 0) for x in xs]
    conv_x = rnd((2, 8, 20, 20), np.float32, 40)
    conv_w = rnd((8, 8, 3, 3), np.float32, 41, 0.2)
    conv_refv = conv_ref(conv_x, conv_w, None, 1, 1)
    errors = []

    def work(i):
        try:
            for _ in range(5):
                y = np.empty_like(xs[i])
                _native.cpu_softmax(dict(outer=64, n=2000, inner=1, log=0), F32, xs[i], y)
                close(y, refs[i], np.float32)
                yc = np.empty((2, 8, 20, 20), np.float32)
                _native.cpu_conv2d(dict(N=2, C=8, H=20, W=20, K=8, R=3, S=3, P=20, Q=20,
                                        stride_h=1, stride_w=1, pad_h=1, pad_w=1, dil_h=1,
                                        dil_w=1, groups=1, has_bias=0, activation=0),
                                   F32, conv_x, conv_w, None, yc)
                close(yc, conv_refv, np.float32, 9)
        except Exception as e:  # reported below: assertion errors in threads are otherwise lost
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_num_threads_from_environment():
    code = "from mpskern import _native; print(_native.cpu_get_num_threads())"
    env = dict(os.environ, MPSKERN_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "1"


def _softmax_in_child(q):
    x = rnd((256, 3000), np.float32, 50)
    y = np.empty_like(x)
    _native.cpu_set_num_threads(2)
    _native.cpu_softmax(dict(outer=256, n=3000, inner=1, log=0), F32, x, y)
    q.put(float(np.abs(y.astype(np.float64) - softmax_ref(x, 1, 0)).max()))


def test_pool_works_after_fork(threads):
    """A forked child has none of the parent's workers: the pool must start afresh there."""
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork on this platform")
    x = rnd((256, 3000), np.float32, 51)      # start the parent's workers first
    _native.cpu_softmax(dict(outer=256, n=3000, inner=1, log=0), F32, x, np.empty_like(x))
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_softmax_in_child, args=(q,))
    p.start()
    p.join(60)
    if p.is_alive():
        p.kill()
        pytest.fail("the forked child hung in the thread pool")
    assert p.exitcode == 0
    assert q.get(timeout=5) < 1e-6
