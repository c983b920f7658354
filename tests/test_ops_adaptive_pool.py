"""adaptive_avg_pool2d and max_pool2d(return_indices=True) on every backend here (cpu, sim;
mps replays its graph program in tests/test_mps_math.py): float64 references with the
tolerance rule, torch itself where installed (indices exactly: ties keep the first, the
last NaN of a window wins, a window of -inf only points at its first input element),
odd and non-divisible sizes, outputs larger than the input, None in output_size, NaN/Inf,
float16, out= and bad arguments."""
import numpy as np
import pytest

import mpskern
import refs
from mpskern import reference as R
from mpskern import sim
from mpskern.ops.adaptive_pool import window_terms

BACKENDS = ["cpu"] + (["sim"] if sim.available()[0] else [])
try:
    import torch
    import torch.nn.functional as F
except ImportError:                       # the references still check everything
    torch = None


def _rand(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- adaptive_avg_pool2d --------------------------------------------------------------------
ADAPTIVE = [((2, 3, 9, 11), (4, 5)),        # non-divisible: overlapping windows
            ((1, 2, 3, 5), (7, None)),      # larger than the input; None keeps W
            ((2, 4, 7, 7), 1),              # global average
            ((1, 3, 13, 6), 5),             # odd, rows and columns cut differently
            ((1, 1, 1, 1), 3),              # one pixel repeated
            ((3, 5, 8), (2, 4)),            # unbatched (C, H, W)
            ((1, 2, 6, 10), (None, 3))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("xs,size", ADAPTIVE)
def test_adaptive_avg_pool2d_matches_float64_and_torch(backend, dtype, xs, size):
    x = _rand(xs, dtype, sum(xs))
    got = mpskern.adaptive_avg_pool2d(x, size, backend=backend)
    want = R.adaptive_avg_pool2d(x, size)
    H, W = xs[-2:]
    refs.assert_close(got, want, dtype, terms=window_terms(H, want.shape[-2]) *
                      window_terms(W, want.shape[-1]))
    if torch is not None:
        t = F.adaptive_avg_pool2d(torch.from_numpy(x.astype(np.float32)), size).numpy()
        assert got.shape == t.shape
        refs.assert_close(got, t.astype(np.float64), dtype, terms=16)


def test_adaptive_windows_are_torchs():
    """The float64 reference's windows (and so every backend) are torch's: floor / ceil of
    p*H/P, overlapping; checked on an input whose every element is distinct."""
    x = np.arange(5 * 7, dtype=np.float64).reshape(1, 1, 5, 7) ** 2
    y = R.adaptive_avg_pool2d(x, (3, 4))
    assert y[0, 0, 1, 2] == x[0, 0, 1:4, 3:6].mean()        # rows 5/3..10/3, cols 14/4..21/4
    assert y[0, 0, 2, 3] == x[0, 0, 3:5, 5:7].mean()
    if torch is not None:
        t = F.adaptive_avg_pool2d(torch.from_numpy(x), (3, 4)).numpy()
        np.testing.assert_allclose(y, t, rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adaptive_avg_pool2d_nan_and_inf(backend):
    x = _rand((1, 3, 6, 7), np.float32, 5)
    x[0, 0, 1, 2] = np.nan
    x[0, 1, 4, 4] = np.inf
    x[0, 2, 0, 0], x[0, 2, 0, 1] = np.inf, -np.inf          # inf - inf: NaN
    got = mpskern.adaptive_avg_pool2d(x, (4, 3), backend=backend)
    want = R.adaptive_avg_pool2d(x, (4, 3))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    assert np.isnan(got).sum() >= 2 and np.isposinf(got).any()
    fin = np.isfinite(want)
    refs.assert_close(got[fin], want[fin], np.float32, terms=9)
    if torch is not None:
        t = F.adaptive_avg_pool2d(torch.from_numpy(x), (4, 3)).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(t))


def test_adaptive_avg_pool2d_near_float32_max_is_finite_on_cpu():
    """A window of values near FLT_MAX overflows a float32 sum, not its average: the cpu
    kernel sums such a window again in double."""
    x = np.full((1, 1, 4, 4), 3e38, np.float32)
    got = mpskern.adaptive_avg_pool2d(x, 2, backend="cpu")
    np.testing.assert_allclose(got, 3e38, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adaptive_avg_pool2d_out_and_empty(backend):
    x = _rand((2, 3, 5, 5), np.float32, 1)
    out = np.full((2, 3, 2, 3), np.nan, np.float32)
    got = mpskern.adaptive_avg_pool2d(x, (2, 3), backend=backend, out=out)
    assert got is out
    refs.assert_close(out, R.adaptive_avg_pool2d(x, (2, 3)), np.float32, terms=12)
    assert mpskern.adaptive_avg_pool2d(x, 0, backend=backend).shape == (2, 3, 0, 0)
    assert mpskern.adaptive_avg_pool2d(x, (0, 4), backend=backend).shape == (2, 3, 0, 4)
    e = np.zeros((0, 3, 5, 5), np.float16)
    assert mpskern.adaptive_avg_pool2d(e, 2, backend=backend).shape == (0, 3, 2, 2)
    with pytest.raises(ValueError, match="out has shape"):
        mpskern.adaptive_avg_pool2d(x, 2, backend=backend, out=np.empty((2, 3, 3, 3), np.float32))


@pytest.mark.parametrize("size, err, words", [
    (-1, ValueError, "output_size=-1 must be >= 0"),
    ((2, -3), ValueError, "output_size=(2, -3) must be >= 0"),
    ((2,), ValueError, "output_size=(2,) must be an int or a pair"),
    ((1, 2, 3), ValueError, "got 3 values"),
    (2.5, TypeError, "output_size must be an int"),
    ((2, 1.5), TypeError, "output_size must be an int"),
    ("2", TypeError, "output_size must be an int"),
    (True, TypeError, "output_size must hold ints"),
    (None, TypeError, "output_size must be an int"),
    (2 ** 31, ValueError, "2**31 or more"),
])
def test_adaptive_avg_pool2d_bad_output_size(size, err, words):
    x = np.ones((1, 2, 4, 4), np.float32)
    with pytest.raises(err) as e:
        mpskern.adaptive_avg_pool2d(x, size)
    assert words in str(e.value) and "adaptive_avg_pool2d" in str(e.value)


def test_adaptive_avg_pool2d_bad_inputs():
    with pytest.raises(ValueError, match=r"x has shape \(4, 4\); adaptive_avg_pool2d takes"):
        mpskern.adaptive_avg_pool2d(np.ones((4, 4), np.float32), 2)
    with pytest.raises(ValueError, match="an empty plane"):
        mpskern.adaptive_avg_pool2d(np.ones((1, 2, 0, 4), np.float32), 2)
    with pytest.raises(TypeError, match="float64"):
        mpskern.adaptive_avg_pool2d(np.ones((1, 2, 4, 4)), 2)


# -- max_pool2d(return_indices=True) --------------------------------------------------------
MAXES = [((2, 3, 9, 11), dict(kernel_size=3, stride=2, padding=1)),
         ((1, 2, 10, 7), dict(kernel_size=(2, 3), stride=(2, 1), dilation=2, ceil_mode=True)),
         ((1, 2, 5, 5), dict(kernel_size=2, ceil_mode=True)),
         ((3, 7, 6), dict(kernel_size=3, stride=1, padding=1)),          # unbatched
         ((1, 1, 7, 7), dict(kernel_size=7))]                             # global


def _torch_max(x, kw):
    v, i = F.max_pool2d(torch.from_numpy(x.astype(np.float32)), return_indices=True, **kw)
    return v.numpy(), i.numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("xs,kw", MAXES)
def test_max_pool2d_indices_match_reference_and_torch(backend, dtype, xs, kw):
    x = _rand(xs, dtype, len(xs) + xs[-1])
    y, i = mpskern.max_pool2d(x, return_indices=True, backend=backend, **kw)
    wy, wi = R.max_pool2d(x, return_indices=True, **kw)
    assert i.dtype == np.int64 and i.shape == y.shape == wy.shape
    np.testing.assert_array_equal(y, wy.astype(dtype))
    np.testing.assert_array_equal(i, wi)
    np.testing.assert_array_equal(y, mpskern.max_pool2d(x, backend=backend, **kw))
    H, W = xs[-2:]
    planes = x.reshape(-1, H * W)
    np.testing.assert_array_equal(np.take_along_axis(planes, i.reshape(planes.shape[0], -1), 1),
                                  y.reshape(planes.shape[0], -1))   # the index holds the max
    if torch is not None:
        ty, ti = _torch_max(x, kw)
        np.testing.assert_array_equal(i, ti)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_max_pool2d_indices_ties_nan_and_inf_as_torch(backend, dtype):
    n, inf = np.nan, np.inf
    x = np.array([[[[5, 5, 1, 2],              # window (0,0): tie -> the first 5
                    [5, 0, 3, 3],              # window (0,1): ties across rows -> (1,2)
                    [n, 1, n, -inf],           # window (1,0): NaNs at (2,0) and (3,1) -> the last
                    [2, n, -inf, -inf]]],      # window (1,1): NaN at (2,2) beside -inf
                  [[[-inf] * 4] * 4]], dtype)  # windows of -inf only: their first element
    x = x.reshape(2, 1, 4, 4)
    y, i = mpskern.max_pool2d(x, 2, return_indices=True, backend=backend)
    assert i[0, 0].tolist() == [[0, 6], [13, 10]]
    assert i[1, 0].tolist() == [[0, 2], [8, 10]]
    assert y[0, 0, 0].tolist() == [5, 3] and np.isnan(y[0, 0, 1]).all() and (y[1] == -inf).all()
    yp, ip = mpskern.max_pool2d(x, 3, stride=2, padding=1, return_indices=True, backend=backend)
    wy, wi = R.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)
    np.testing.assert_array_equal(ip, wi)                  # -inf rows: the first tap inside
    np.testing.assert_array_equal(yp, wy.astype(dtype))
    if torch is not None:
        for kw in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)):
            ty, ti = _torch_max(x, kw)
            got = mpskern.max_pool2d(x, return_indices=True, backend=backend, **kw)[1]
            np.testing.assert_array_equal(got, ti)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_pool2d_indices_out_empty_and_bad_flag(backend):
    x = _rand((2, 3, 6, 6), np.float32, 3)
    out = np.empty((2, 3, 3, 3), np.float32)
    y, i = mpskern.max_pool2d(x, 2, return_indices=True, backend=backend, out=out)
    assert y is out and i.dtype == np.int64
    np.testing.assert_array_equal(out, R.max_pool2d(x, 2).astype(np.float32))
    y, i = mpskern.max_pool2d(np.zeros((0, 3, 6, 6), np.float32), 2, return_indices=True,
                              backend=backend)
    assert y.shape == i.shape == (0, 3, 3, 3) and i.dtype == np.int64
    for bad in ("yes", None, np.array([True, False]), 2):
        with pytest.raises(TypeError, match="max_pool2d: return_indices must be True or False"):
            mpskern.max_pool2d(x, 2, return_indices=bad, backend=backend)
    assert isinstance(mpskern.max_pool2d(x, 2, return_indices=False, backend=backend), np.ndarray)
