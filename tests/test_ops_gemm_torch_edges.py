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
