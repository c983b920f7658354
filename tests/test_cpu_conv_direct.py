"""cpu conv2d with at most 7 input channels (groups 1: the 7x7/2 stem) runs a direct
register-blocked kernel over a zero-padded, column-phased copy of the input
(objc/cpu/mk_cpu_conv_direct.c). Checked against the float64 reference where its tiles
have edges: output rows not a multiple of the vector width (8 on AVX2, 16 on AVX-512),
output channels not a multiple of the tile height, vector runs crossing output rows,
strides, dilations and uneven padding, float16, fused activations, non-finite inputs and
weights (a non-finite weight times a padded zero is NaN, as in the reference), at 1, 2 and
5 threads; and against the im2col path (MPSKERN_CPU_CONV=gemm), which it must match to
rounding."""
import numpy as np
import pytest

import mpskern
import refs

# (x shape, w shape, stride, padding, dilation)
CASES = [
    ((1, 3, 64, 70), (64, 3, 7, 7), 2, 3, 1),        # the stem (Q = 35: ragged vectors)
    ((2, 3, 32, 32), (13, 3, 7, 7), 2, 3, 1),        # Q = 16, K % 8 != 0, 2 images
    ((1, 3, 20, 50), (9, 3, 3, 3), 1, 1, 1),         # 3x3/1 on RGB
    ((3, 1, 9, 9), (1, 1, 3, 3), 1, 1, 1),           # one channel in, one out
    ((1, 5, 20, 21), (17, 5, 5, 3), 3, (2, 1), 2),   # stride 3, dilated, uneven padding
    ((1, 7, 8, 8), (9, 7, 2, 2), 1, 0, 1),           # 7 channels, even window
    ((2, 2, 31, 47), (33, 2, 7, 5), (2, 1), (3, 0), (1, 2)),
    ((1, 4, 5, 3), (6, 4, 1, 9), (1, 4), (0, 4), 1),  # stride 4 < 9 taps, tiny image
]


def case(xs, ws, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, xs).astype(dtype), rng.uniform(-1, 1, ws).astype(dtype),
            rng.uniform(-1, 1, ws[0]).astype(np.float32))


@pytest.fixture(params=[1, 2, 5])
def threads(request):
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(request.param)
    yield request.param
    mpskern.set_num_threads(old)


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation", CASES)
@pytest.mark.parametrize("activation", [None, "relu", "silu"])
def test_direct_conv_matches_the_reference(threads, xs, ws, stride, padding, dilation,
                                           dtype, activation):
    x, w, b = case(xs, ws, dtype, 16)
    got = mpskern.conv2d(x, w, b, stride, padding, dilation, activation=activation,
                         backend="cpu")
    ref = refs.conv2d(x, w, b, stride, padding, dilation, activation=activation)
    refs.assert_close(got, ref, dtype, terms=ws[1] * ws[2] * ws[3], what=f"{xs} * {ws}")


@pytest.mark.parametrize("xs,ws,stride,padding,dilation", CASES[:2] + CASES[4:5])
def test_direct_conv_matches_im2col_without_bias(monkeypatch, threads, xs, ws, stride,
                                                 padding, dilation):
    x, w, _ = case(xs, ws, np.float32, 17)
    direct = mpskern.conv2d(x, w, None, stride, padding, dilation, backend="cpu")
    monkeypatch.setenv("MPSKERN_CPU_CONV", "gemm")
    im2col = mpskern.conv2d(x, w, None, stride, padding, dilation, backend="cpu")
    np.testing.assert_allclose(direct, im2col, rtol=1e-5, atol=1e-5 * np.abs(im2col).max())


@pytest.mark.parametrize("xs,ws,stride,padding,dilation", CASES[:2] + CASES[4:5])
def test_non_finite_values_land_where_the_reference_has_them(threads, xs, ws, stride,
                                                             padding, dilation):
    x, w, b = case(xs, ws, np.float32, 18)
    x.flat[[0, x.size // 3, x.size - 1]] = [np.nan, np.inf, -np.inf]   # corners and inside
    w[1, 0, 0, 0] = np.inf           # channel 1: inf times the padded zeros is NaN
    b[-1] = np.nan
    got = mpskern.conv2d(x, w, b, stride, padding, dilation, backend="cpu")
    ref = refs.conv2d(x, w, b, stride, padding, dilation)
    assert np.isnan(got[:, -1]).all() and np.isnan(got[:, 1]).any()
    refs.assert_close(got, ref, np.float32, terms=ws[1] * ws[2] * ws[3], what=f"{xs} * {ws}")


def test_output_views_and_batches_stay_separate(threads):
    # every image's own padded copy: a batch equals its images one at a time
    x, w, b = case((4, 3, 23, 29), (10, 3, 7, 7), np.float32, 19)
    whole = mpskern.conv2d(x, w, b, 2, 3, backend="cpu")
    for n in range(4):
        one = mpskern.conv2d(x[n:n + 1], w, b, 2, 3, backend="cpu")
        np.testing.assert_array_equal(whole[n:n + 1], one)


def test_auto_takes_the_direct_kernel_below_8_channels(monkeypatch):
    # the paths are distinguishable by their rounding; 8 channels stay with im2col/Winograd
    x, w, b = case((1, 3, 40, 40), (16, 3, 7, 7), np.float32, 20)
    x8, w8, b8 = case((1, 8, 40, 40), (16, 8, 7, 7), np.float32, 21)
    auto = mpskern.conv2d(x, w, b, 2, 3, backend="cpu")
    auto8 = mpskern.conv2d(x8, w8, b8, 2, 3, backend="cpu")
    monkeypatch.setenv("MPSKERN_CPU_CONV", "gemm")
    assert not np.array_equal(auto, mpskern.conv2d(x, w, b, 2, 3, backend="cpu"))
    assert np.array_equal(auto8, mpskern.conv2d(x8, w8, b8, 2, 3, backend="cpu"))
