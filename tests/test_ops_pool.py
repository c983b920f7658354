"""max_pool2d / avg_pool2d against the float64 reference: strides, padding, dilation,
ceil_mode (incl. the last-window rule), count_include_pad, divisor_override."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)

# (x shape, kernel, stride, padding, dilation, ceil_mode)
MAX = [
    ((1, 2, 8, 8), 2, None, 0, 1, False),
    ((2, 3, 9, 7), 3, 2, 1, 1, False),
    ((1, 2, 9, 7), 3, 2, 1, 1, True),
    ((1, 1, 5, 5), 2, 2, 1, 1, True),            # ceil_mode drops a window starting in padding
    ((1, 2, 10, 11), (3, 2), (2, 3), (1, 1), (2, 1), False),   # pairs and dilation
    ((1, 2, 10, 11), (3, 3), 2, 1, 2, True),
    ((2, 7, 7), 3, 1, 1, 1, False),              # unbatched
]


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("xs,k,s,p,d,ceil", MAX)
def test_max_pool2d(backend, dtype, xs, k, s, p, d, ceil):
    x = refs.rand(xs, dtype, np.random.default_rng(6))
    got = mpskern.max_pool2d(x, k, s, p, d, ceil, backend=backend)
    refs.assert_close(got, refs.max_pool2d(x, k, s, p, d, ceil), dtype, what="max_pool2d")


# (x shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG = [
    ((1, 2, 8, 8), 2, None, 0, False, True, None),
    ((2, 3, 9, 7), 3, 2, 1, False, True, None),
    ((2, 3, 9, 7), 3, 2, 1, False, False, None),
    ((1, 2, 9, 7), 3, 2, 1, True, True, None),   # ceil windows overhang the padding
    ((1, 2, 9, 7), 3, 2, 1, True, False, None),
    ((1, 1, 6, 6), 4, 3, 2, True, True, None),
    ((1, 2, 7, 8), (3, 2), (2, 1), (1, 0), False, True, 5),
    ((1, 2, 7, 8), 3, 2, 1, True, False, 2),
    ((3, 6, 5), 2, 2, 1, True, True, None),       # unbatched
]


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("xs,k,s,p,ceil,cip,div", AVG)
def test_avg_pool2d(backend, dtype, xs, k, s, p, ceil, cip, div):
    x = refs.rand(xs, dtype, np.random.default_rng(7))
    got = mpskern.avg_pool2d(x, k, s, p, ceil, cip, div, backend=backend)
    refs.assert_close(got, refs.avg_pool2d(x, k, s, p, ceil, cip, div), dtype, what="avg_pool2d")


@pytest.mark.parametrize("n,k,s,p,ceil,expect", [
    (5, 2, 2, 1, True, 3),   # torch: the 4th window would start in the right padding
    (6, 3, 2, 1, True, 4),
    (6, 3, 2, 1, False, 3),
    (2, 3, 2, 0, True, 1),   # ceil_mode admits one partial window
    (7, 2, 2, 0, True, 4),
    (7, 2, 2, 0, False, 3),
])
def test_output_sizes_match_torch(n, k, s, p, ceil, expect):
    """Known torch output sizes, checked on both the library's rule and the reference's."""
    from mpskern.shapes import pool_output_size
    assert pool_output_size(n, k, s, p, 1, ceil) == expect
    assert len(refs.window_starts(n, k, s, p, 1, ceil)) == expect


def test_max_pool_padding_never_wins(backend):
    x = -np.ones((1, 1, 4, 4), np.float32)
    got = mpskern.max_pool2d(x, 3, 1, 1, backend=backend)
    assert np.array_equal(got, -np.ones((1, 1, 4, 4), np.float32))
