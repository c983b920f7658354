"""Results that cancellation used to spoil (found by QA): log_softmax rows with a large
maximum must keep the precision of (x - max), and a constant group / channel normalises to
exactly 0 (x*scale + (b - mean*scale) cancelled to 2e-3). References: float64."""
import numpy as np
import pytest

import mpskern as mk
import refs
from refs import backend  # noqa: F401  (fixture)


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("big", [1e4, -3e4])
def test_log_softmax_large_maximum(backend, axis, big):
    x = np.array([[big, big, -np.inf], [big, big - 1.0, big - 2.0]], np.float32)
    x = x if axis == -1 else x.T.copy()
    got = mk.log_softmax(x, axis=axis, backend=backend)
    ref = refs.log_softmax(x.astype(np.float64), axis=axis)
    finite = np.isfinite(ref)
    assert np.array_equal(np.isfinite(got), finite)
    # the values are O(1): they must be right to float32 precision of O(1), not of `big`
    np.testing.assert_allclose(got[finite], ref[finite], rtol=0, atol=2e-6)


@pytest.mark.parametrize("value", [1000.0, -37.5])
def test_constant_groups_normalise_to_zero(backend, value):
    x = np.full((2, 4, 3), value, np.float32)
    assert np.abs(mk.group_norm(x, 2, backend=backend)).max() <= 1e-6
    assert np.abs(mk.batch_norm(x, None, None, training=True,
                           backend=backend)).max() <= 1e-6
    w, b = np.full(4, 2.0, np.float32), np.full(4, 0.5, np.float32)
    y = mk.group_norm(x, 4, weight=w, bias=b, backend=backend)
    np.testing.assert_allclose(y, 0.5, rtol=0, atol=1e-6)
