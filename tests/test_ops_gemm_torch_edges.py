"""gemm at torch.addmm's edges, against torch itself: a 0-d c (torch broadcasts it; mpskern
raised IndexError from inside its own code), and alpha=0 with NaN/inf in a or b (torch and
BLAS do not compute the product then: beta*c, no NaN; mpskern's cpu agreed, sim returned
NaN rows). Found by qa7 in session 7; fixed in mpskern/ops/matmul.py (the 0-d c takes
the broadcast path; alpha == 0 takes the no-product path of K == 0)."""
import numpy as np
import pytest

import mpskern
from mpskern import sim

torch = pytest.importorskip("torch")
BACKENDS = ["cpu"] + (["sim"] if sim.available()[0] else [])
T = torch.from_numpy


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_d_c_broadcasts_as_torch(backend):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5)))
    c = np.full((), 2.0, np.float32)
    want = torch.addmm(T(c), T(a), T(b), beta=0.5).numpy()
    got = mpskern.gemm(a, b, c, beta=0.5, backend=backend)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_alpha_zero_computes_no_product(backend, bad, beta):
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (4, 5)))
    a[1, 1] = bad
    want = torch.addmm(T(c), T(a), T(b), alpha=0.0, beta=beta).numpy()
    got = mpskern.gemm(a, b, c, alpha=0.0, beta=beta, backend=backend)
    assert not np.isnan(want).any()
    np.testing.assert_array_equal(got, want)
    # the float64 reference (bench, selftest, tests) too: it had 0 * NaN rows (qa10)
    np.testing.assert_array_equal(mpskern.reference.gemm(a, b, c, alpha=0.0, beta=beta), want)
    b3 = np.broadcast_to(b, (2, 3, 5))
    assert mpskern.reference.gemm(a, b3, alpha=0.0).shape == (2, 4, 5)


def test_float16_overflow_of_beta_c_is_inf_without_a_warning(recwarn):
    """K == 0: beta * c computed in numpy; past float16's range it is inf, as the kernels'
    result (and torch's), and no RuntimeWarning from inside mpskern (qa10)."""
    c = np.full((2, 3), 60000, np.float16)
    got = mpskern.gemm(np.ones((2, 0), np.float16), np.ones((0, 3), np.float16), c, beta=2.0,
                       backend="cpu")
    assert np.isposinf(got).all() and got.dtype == np.float16
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bshape", [(), (1,), (1, 5), (1, 1), (5,)])
def test_linear_bias_one_value_per_feature_broadcasts_as_torch(backend, bshape):
    """torch.nn.functional.linear broadcasts a 0-d, (1,) or (1, N) bias over the features;
    mpskern refused all but (N,) (qa7 found it)."""
    rng = np.random.default_rng(2)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (5, 4)))
    bias = rng.standard_normal(bshape).astype(np.float32)
    want = torch.nn.functional.linear(T(x), T(w), T(bias)).numpy()
    got = mpskern.linear(x, w, bias, backend=backend)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bshape", [(2,), (3, 5), (1, 1, 5)])   # (torch: a 3-D bias too)
def test_linear_bias_varying_over_rows_is_refused_with_the_shape(bshape):
    x, w = np.ones((2, 3, 4), np.float32), np.ones((5, 4), np.float32)
    with pytest.raises(ValueError, match=r"bias has shape .* pass an array of shape \(5,\)"):
        mpskern.linear(x, w, np.ones(bshape, np.float32))
