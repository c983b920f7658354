"""cpu conv2d with a stride along the row smaller than the kernel's width (the 7x7/2 stem,
3x3/2 downsampling) copies the input rows its im2col block reads into column phases
first (mk_cpu_conv2d.c use_phases: every im2col row a memcpy), every GEMM path starts
from the bias (beta 1) instead of adding it after, and small images' single im2col runs
its rows on the pool. Both checked against the float64
reference on each block plan (rows of one image, whole images per block, strides 2 and 3,
dilation, asymmetric padding, groups), float16, a fused activation and non-finite inputs
and biases, at 1 and 2 threads (conftest's threads fixture). MPSKERN_CPU_CONV=gemm: with
fewer than 8 input channels auto takes the direct kernel (test_cpu_conv_direct.py)."""
import numpy as np
import pytest

import mpskern
import refs


@pytest.fixture(autouse=True)
def im2col(monkeypatch):
    monkeypatch.setenv("MPSKERN_CPU_CONV", "gemm")

# (x shape, w shape, stride, padding, dilation, groups)
CASES = [
    ((1, 3, 64, 70), (8, 3, 7, 7), 2, 3, 1, 1),               # the stem, rows of one image
    ((6, 4, 10, 11), (5, 4, 5, 5), 2, 2, 1, 1),               # whole images per block
    ((2, 3, 20, 31), (4, 3, 3, 5), (2, 3), (1, 4), (1, 2), 1),  # stride 3, dilated, odd pad
    ((2, 8, 15, 17), (6, 4, 3, 3), 2, 1, 1, 2),               # 3x3/2 per group
    ((1, 2, 9, 40), (3, 2, 2, 9), (1, 4), (0, 3), 1, 1),      # stride 4 < 9 taps
    # small images at 2 threads (one im2col, its rows over the pool, one split GEMM)
    ((1, 64, 7, 7), (32, 64, 3, 3), 1, 1, 1, 1),
    ((1, 8, 15, 15), (6, 8, 5, 5), 2, 2, 1, 1),
]


def case(xs, ws, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, xs).astype(dtype)
    w = rng.uniform(-1, 1, ws).astype(dtype)
    b = rng.uniform(-1, 1, ws[0]).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CASES)
@pytest.mark.parametrize("activation", [None, "relu"])
def test_phased_im2col_matches_the_reference(threads, xs, ws, stride, padding, dilation,
                                              groups, dtype, activation):
    x, w, b = case(xs, ws, dtype, 14)
    got = mpskern.conv2d(x, w, b, stride, padding, dilation, groups, activation=activation,
                         backend="cpu")
    ref = refs.conv2d(x, w, b, stride, padding, dilation, groups, activation=activation)
    refs.assert_close(got, ref, dtype, terms=ws[1] * ws[2] * ws[3], what=f"{xs} * {ws}")


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CASES[:3])
def test_non_finite_inputs_and_biases_land_where_the_reference_has_them(
        threads, xs, ws, stride, padding, dilation, groups):
    x, w, b = case(xs, ws, np.float32, 15)
    x.flat[[0, x.size // 3, x.size - 1]] = [np.nan, np.inf, -np.inf]   # corners and inside
    b[0], b[-1] = np.nan, np.inf
    got = mpskern.conv2d(x, w, b, stride, padding, dilation, groups, backend="cpu")
    ref = refs.conv2d(x, w, b, stride, padding, dilation, groups)
    assert np.isnan(got[:, 0]).all() and not np.isfinite(got[:, -1]).any()
    refs.assert_close(got, ref, np.float32, terms=ws[1] * ws[2] * ws[3], what=f"{xs} * {ws}")
