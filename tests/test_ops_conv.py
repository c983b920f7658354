"""conv2d against the float64 reference: strides, padding forms, dilation, groups
(depthwise too), bias, odd sizes, unbatched input."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)

# (x shape, K, (R, S), stride, padding, dilation, groups, bias)
CASES = [
    ((1, 3, 8, 8), 4, (3, 3), 1, 1, 1, 1, True),
    ((2, 3, 9, 7), 5, (3, 2), 2, 0, 1, 1, False),          # odd sizes, rectangular kernel
    ((1, 4, 11, 10), 6, (3, 3), (2, 1), (1, 2), (2, 1), 2, True),   # pairs, dilation, groups
    ((2, 6, 7, 7), 6, (3, 3), 1, "same", 1, 6, True),      # depthwise, same
    ((1, 2, 6, 9), 3, (4, 2), 1, "same", (1, 2), 1, False),  # same with even kernel
    ((1, 3, 7, 7), 2, (3, 3), 3, "valid", 1, 1, True),
    ((2, 8, 5, 5), 4, (1, 1), 1, 0, 1, 1, True),           # 1x1 is a GEMM
    ((1, 4, 6, 6), 8, (3, 3), 2, 1, 1, 4, False),          # depthwise multiplier 2
    ((3, 5, 5), 2, (3, 3), 1, 1, 1, 1, True),              # unbatched (C, H, W)
]


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("xs,K,rs,stride,padding,dilation,groups,has_bias", CASES)
def test_conv2d(backend, dtype, xs, K, rs, stride, padding, dilation, groups, has_bias):
    rng = np.random.default_rng(5)
    C = xs[-3]
    x = refs.rand(xs, dtype, rng)
    w = refs.rand((K, C // groups) + rs, dtype, rng)
    b = refs.rand((K,), np.float32, rng) if has_bias else None
    got = mpskern.conv2d(x, w, b, stride, padding, dilation, groups, backend=backend)
    ref = refs.conv2d(x, w, b, stride, padding, dilation, groups)
    refs.assert_close(got, ref, dtype, terms=C // groups * rs[0] * rs[1], what="conv2d")


def test_same_padding_keeps_size(backend):
    x = np.ones((1, 1, 5, 6), np.float32)
    w = np.ones((1, 1, 2, 3), np.float32)
    got = mpskern.conv2d(x, w, padding="same", dilation=2, backend=backend)
    assert got.shape == (1, 1, 5, 6)
    refs.assert_close(got, refs.conv2d(x, w, None, 1, "same", 2), np.float32, 6)


def test_bias_in_input_dtype_accepted(backend):
    x = np.ones((1, 2, 4, 4), np.float16)
    w = np.ones((3, 2, 3, 3), np.float16)
    b = np.array([1, 2, 3], np.float16)
    got = mpskern.conv2d(x, w, b, backend=backend)
    refs.assert_close(got, refs.conv2d(x, w, b), np.float16, 18)
