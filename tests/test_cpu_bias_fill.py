"""The broadcast row a GEMM adds (linear's bias, gemm's c of one row) is written into the
result before the GEMM. On the cpu backend a large float32 fill runs on the thread pool
(mpskern._args.fill_rows: the rank-1 GEMM ones x row), not as one numpy thread: the
values must be numpy's (NaN, Inf, subnormals bit for bit; a -0 is written +0, as BLAS's
sums start at +0, and the GEMM that follows adds its products to it), at any thread
count, and linear/gemm with such a row must match the float64 references."""
import numpy as np
import pytest

import mpskern
import refs
from mpskern import _args

SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, -3.4e38, 3.4e38, 1.0], np.float32)


@pytest.fixture(params=[1, 3, 16], ids=lambda t: f"{t}threads")
def threads(request):
    before = mpskern.get_num_threads()
    mpskern.set_num_threads(request.param)
    yield request.param
    mpskern.set_num_threads(before)


@pytest.mark.parametrize("shape", [(1, 1 << 17), (257, 1031), (2, 3, 40000), (3, 5)])
def test_fill_rows_is_numpys_broadcast(threads, shape):
    rng = np.random.default_rng(3)
    row = rng.standard_normal(shape[-1]).astype(np.float32)
    n = min(len(SPECIALS), shape[-1])
    row[:n] = SPECIALS[:n]
    y = np.full(shape, 7.0, np.float32)
    got = _args.fill_rows(_args.backend("cpu"), y, row)
    assert got is y
    want = np.ascontiguousarray(np.broadcast_to(row, shape))
    same = got.view(np.uint32) == want.view(np.uint32)
    assert np.all(same | ((got == 0) & (want == 0)))


def test_fill_rows_one_row_per_item(threads):
    rng = np.random.default_rng(4)
    rows = rng.standard_normal((3, 1, 50000)).astype(np.float32)
    y = np.full((3, 4, 50000), 7.0, np.float32)
    _args.fill_rows(_args.backend("cpu"), y, rows)
    assert np.array_equal(y, np.broadcast_to(rows, y.shape))


def test_large_float32_fills_run_on_the_pool(monkeypatch):
    """The fill is one rank-1 GEMM call (K = 1) for >= 2^17 float32 elements; numpy's own
    fill below that and for float16 (a kernel call costs more there)."""
    be = _args.backend("cpu")
    calls = []
    real = be.execute

    def spy(kernel, args, *rest):
        calls.append((kernel, args["batch"], args["M"], args["N"], args["K"]))
        return real(kernel, args, *rest)

    monkeypatch.setattr(be, "execute", spy)
    _args.fill_rows(be, np.empty((512, 256), np.float32), np.ones(256, np.float32))
    _args.fill_rows(be, np.empty((2, 512, 256), np.float32), np.ones((2, 1, 256), np.float32))
    assert calls == [("gemm", 1, 512, 256, 1), ("gemm", 2, 512, 256, 1)]
    calls.clear()
    _args.fill_rows(be, np.empty((3, 256), np.float32), np.ones(256, np.float32))
    _args.fill_rows(be, np.empty((512, 256), np.float16), np.ones(256, np.float16))
    assert calls == []


@pytest.mark.parametrize("act", [None, "gelu"])
@pytest.mark.parametrize("M,K,N", [(256, 24, 1031), (3, 5, 7), (1200, 8, 130), (600, 0, 300)])
def test_linear_bias_matches_reference(threads, M, K, N, act):
    rng = np.random.default_rng(5)
    x, w = refs.rand((M, K), np.float32, rng), refs.rand((N, K), np.float32, rng)
    b = refs.rand(N, np.float32, rng)
    got = mpskern.linear(x, w, b, activation=act, backend="cpu")
    ref = mpskern.reference.activate(x.astype(np.float64) @ w.T.astype(np.float64) + b, act)
    refs.assert_close(got, ref, np.float32, terms=K + 1, what="linear + bias")


@pytest.mark.parametrize("cshape", [(1031,), (1, 1031), (1, 1, 1031), (2, 1, 1031)])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_gemm_with_a_row_c(threads, cshape, beta):
    rng = np.random.default_rng(6)
    a, b = refs.rand((2, 150, 24), np.float32, rng), refs.rand((24, 1031), np.float32, rng)
    c = refs.rand(cshape, np.float32, rng)
    c[..., 0] = np.nan if beta else 1.0       # beta = 0: c is not read (BLAS rule)
    got = mpskern.gemm(a, b, c, beta=beta, backend="cpu")
    ref = a.astype(np.float64) @ b + (beta * c.astype(np.float64) if beta else 0.0)
    refs.assert_close(got, ref, np.float32, terms=25, what="gemm + row c")
    out = np.empty((2, 150, 1031), np.float32)
    assert mpskern.gemm(a, b, c, beta=beta, backend="cpu", out=out) is out
    refs.assert_close(out, ref, np.float32, terms=25, what="gemm + row c, out=")
