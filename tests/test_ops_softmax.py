"""softmax / log_softmax over every axis, with large inputs (stability)."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)

SHAPES_AXES = [((4, 4), -1), ((3, 17), 1), ((5, 3, 7), 0), ((5, 3, 7), 1), ((5, 3, 7), -1),
               ((2, 3, 4, 5), 2), ((33,), 0), ((1, 1000), -1), ((2, 300, 3), 1)]


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
def test_softmax(backend, dtype, log, shape, axis):
    x = refs.rand(shape, dtype, np.random.default_rng(8), -4, 4)
    fn, ref = (mpskern.log_softmax, refs.log_softmax) if log else (mpskern.softmax, refs.softmax)
    got = fn(x, axis, backend=backend)
    refs.assert_close(got, ref(x, axis), dtype, what=f"{fn.__name__} axis={axis}")


@pytest.mark.parametrize("dtype", refs.DTYPES)
def test_large_inputs_are_stable(backend, dtype):
    big = 30000.0 if dtype == np.float16 else 1e30  # x - max stays finite
    x = np.array([[big, big * 0.5, -big, 0.0]], dtype)
    got = mpskern.softmax(x, backend=backend)
    refs.assert_close(got, refs.softmax(x), dtype, what="softmax large")
    got = mpskern.log_softmax(x, backend=backend)
    refs.assert_close(got, refs.log_softmax(x), dtype, what="log_softmax large")


def test_reference_row_of_minus_inf_is_nan_without_a_warning():
    """The float64 reference gives torch's NaN for a row of -inf without numpy's 'invalid
    value encountered in subtract' RuntimeWarning, which `mpskern selftest` printed."""
    import warnings
    from mpskern import reference as R
    x = np.array([[-np.inf, -np.inf], [1.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for f in (R.softmax, R.log_softmax):
            y = f(x)
            assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()
