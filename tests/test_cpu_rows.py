"""The cpu backend's contiguous-row passes (objc/cpu/mk_cpu_rowvec*: explicit 8- or 16-float
vectors, a vector exp for x <= 0) at every tail length around the vector widths, with
-inf / NaN / huge values placed in the vector body, the tail and in different blocks of
long rows, checked against mpskern.reference with the tolerance rule."""
import numpy as np
import pytest

import mpskern
import refs

# every length up to 5 vectors of 16 (the 2-vector loop, one vector, a partial one)
LENGTHS = list(range(1, 81)) + [2047, 2048, 2049, 4113]


def softmax_pair(log):
    return (mpskern.log_softmax, refs.log_softmax) if log else (mpskern.softmax, refs.softmax)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])   # float16 rows run in place
@pytest.mark.parametrize("log", [False, True])
def test_softmax_every_tail_length(log, dtype):
    fn, ref = softmax_pair(log)
    rng = np.random.default_rng(70)
    for n in LENGTHS:
        x = refs.rand((4, n), dtype, rng, -8, 8)
        x[1, -1] = 40.0                   # the maximum in the tail
        x[2, 0] = -np.inf                 # a masked entry in the body (alone when n = 1)
        x[3, 0] = 100.0                   # the maximum first: a missed one overflows exp
        with np.errstate(invalid="ignore"):
            want = ref(x, -1)
        refs.assert_close(fn(x, -1, backend="cpu"), want, dtype, n, what=f"n={n}")


@pytest.mark.parametrize("log", [False, True])
def test_softmax_nan_anywhere_makes_the_row_nan(log):
    fn, _ = softmax_pair(log)
    for n in LENGTHS:
        for pos in sorted({0, n // 2, n - 1}):
            x = np.zeros((2, n), np.float32)
            x[0, pos] = np.nan
            y = fn(x, -1, backend="cpu")
            assert np.isnan(y[0]).all(), f"n={n} NaN at {pos}"
            assert not np.isnan(y[1]).any(), f"n={n}: the next row is not NaN"


def test_softmax_underflow_is_zero_not_garbage():
    # x - max around the float32 exp underflow (-87.3 .. -88.7) and far below it, in the
    # 2-vector loop, the single vector and the tail: results are tiny, never NaN or huge
    d = np.array([0, -80, -87.0, -87.3, -87.5, -87.7, -87.9, -88.0, -88.5, -89, -100, -1e4,
                  -1e30, -np.inf], np.float32)
    for n in (14, 16, 31, 32, 33, 47):
        x = np.resize(d, n)
        x[0] = 0.0
        y = mpskern.softmax(x[None], backend="cpu")[0]
        e = np.exp(x.astype(np.float64))
        assert np.all(y >= 0) and np.all(y <= 1)
        np.testing.assert_allclose(y, e / e.sum(), rtol=1e-6, atol=2e-38)
        assert (y[x == -np.inf] == 0).all()


@pytest.mark.parametrize("log", [False, True])
def test_softmax_long_rows_blocks(log):
    # longer than the 2048-element blocks: the max grows in a later block (stored terms
    # rescaled), -inf blocks, a +-1e30 spread, a NaN only in the last block's tail
    fn, ref = softmax_pair(log)
    n = 3 * 2048 + 37
    rng = np.random.default_rng(71)
    x = refs.rand((5, n), np.float32, rng, -5, 5)
    x[0, -20:] = 60.0
    x[1, :4096] = -np.inf
    x[2, 100], x[2, 5000] = 1e30, -1e30
    x[3] = np.linspace(-300.0, 30.0, n, dtype=np.float32)
    x[4, -1] = np.nan
    with np.errstate(invalid="ignore"):
        want = ref(x, -1)
    refs.assert_close(fn(x[:4], -1, backend="cpu"), want[:4], np.float32, n)
    assert np.isnan(fn(x[4:], -1, backend="cpu")).all()


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("affine", ["none", "w", "wb"])
def test_rownorm_every_tail_length(kind, affine):
    rng = np.random.default_rng(72)
    for n in LENGTHS:
        x = refs.rand((2, n), np.float32, rng, -3, 3) + np.float32(5.0)   # mean to remove
        w = refs.rand((n,), np.float32, rng) if affine != "none" else None
        b = refs.rand((n,), np.float32, rng) if affine == "wb" else None
        if kind == "layer_norm":
            got = mpskern.layer_norm(x, n, w, b, 1e-5, backend="cpu")
            want = refs.layer_norm(x, n, w, b, 1e-5)
        else:
            got = mpskern.rms_norm(x, n, w, 1e-5, backend="cpu")
            want = refs.rms_norm(x, n, w, 1e-5)
        refs.assert_close(got, want, np.float32, n, what=f"{kind} n={n} {affine}")
