"""cpu conv2d on images with few output pixels (objc/cpu/mk_cpu_conv_fewpix.c): on the
small-images path (fewer images than threads), float32, groups 1, at most 64 output pixels
an image (AVX-512), one tile holds every pixel of an image for 6 output channels and reads
the weights in place. Checked against the float64 reference at 1, 2 and 16 threads: ResNet's
512->512 3x3 @7, pixel counts at and between vector edges (1, 17, 35, 48, 64), output
channels off the 6-row tile, 1x1 and strided/dilated/padded windows, every activation, no
bias, two images, non-finite inputs and weights; that auto takes it where its rule says
(its sums run in another order than the im2col GEMM's: not bitwise what
MPSKERN_CPU_CONV=session9, the paths before it, gives; bitwise the same at any thread
count). Also Winograd's
64-output-channel blocks (<= 2 threads, >= 64 tiles) at their edges."""
import pathlib

import numpy as np
import pytest

import mpskern
import refs

CPUINFO = pathlib.Path("/proc/cpuinfo")
AVX512 = CPUINFO.exists() and " avx512f" in CPUINFO.read_text()   # the kernel's CPUs
ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu"]
# (N, C, H, W, K, R, S, stride, padding, dilation): output pixels in the comment
CASES = [
    (1, 512, 7, 7, 512, 3, 3, 1, 1, 1),     # ResNet-50 layer4: 49, 4608 taps
    (1, 37, 5, 7, 13, 3, 3, 1, 1, 1),       # 35 pixels, K = 2 * 6 + 1
    (1, 300, 8, 8, 7, 1, 1, 1, 0, 1),       # 1x1, 64: four whole vectors
    (1, 19, 3, 3, 11, 3, 3, 1, 0, 1),       # one pixel
    (1, 33, 9, 9, 17, 3, 3, 2, 1, 1),       # strided: 5 x 5 = 25
    (1, 21, 11, 10, 5, 3, 3, 1, 1, 2),      # dilated: 9 x 8 = 72 > 64: not this kernel
    (1, 24, 6, 8, 6, 3, 3, 1, 1, 1),        # 48: three whole vectors, K = 6
    (2, 64, 17, 1, 9, 1, 1, 1, 0, 1),       # two images of 17 (a vector and one lane)
    (1, 8, 4, 4, 3, 5, 5, 1, 2, 1),         # 5x5 window on 16 pixels
]


THREADS = pytest.mark.parametrize("threads", [1, 2, 16], indirect=True)   # conftest's


def case(N, C, H, W, K, R, S, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (N, C, H, W)).astype(dtype),
            rng.uniform(-1, 1, (K, C, R, S)).astype(dtype),
            rng.uniform(-1, 1, K).astype(dtype))


def run(shape, activation, bias=True, seed=50, dtype=np.float32, x=None, w=None):
    N, C, H, W, K, R, S, st, pad, dil = shape
    xc, wc, b = case(N, C, H, W, K, R, S, seed, dtype)
    x = xc if x is None else x
    w = wc if w is None else w
    b = b if bias else None
    got = mpskern.conv2d(x, w, b, st, pad, dil, activation=activation, backend="cpu")
    ref = refs.conv2d(x, w, b, st, pad, dil, activation=activation)
    return got, ref


@THREADS
@pytest.mark.parametrize("shape", CASES, ids=["x".join(map(str, c)) for c in CASES])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_matches_the_reference(threads, shape, activation):
    got, ref = run(shape, activation, bias=activation != "gelu")
    refs.assert_close(got, ref, np.float32, terms=shape[1] * shape[5] * shape[6],
                      what=f"{shape} {activation}")


@THREADS
@pytest.mark.parametrize("dtype", [np.float16])
def test_float16_and_groups_keep_their_paths(threads, dtype):
    shape = (1, 64, 7, 7, 32, 3, 3, 1, 1, 1)
    got, ref = run(shape, "silu", dtype=dtype)
    refs.assert_close(got, ref, dtype, terms=64 * 9, what="float16")
    x, w, b = case(1, 64, 7, 7, 32, 3, 3, 51)
    g = mpskern.conv2d(x, w[:, :32], b, 1, 1, groups=2, activation="relu", backend="cpu")
    refs.assert_close(g, refs.conv2d(x, w[:, :32], b, 1, 1, groups=2, activation="relu"),
                      np.float32, terms=32 * 9, what="groups 2")


@THREADS
def test_non_finite_values(threads):
    shape = (1, 512, 7, 7, 20, 3, 3, 1, 1, 1)
    x, w, _ = case(1, 512, 7, 7, 20, 3, 3, 52)
    x[0, 500, 3, 3] = np.nan           # every output of every channel near the centre
    x[0, 10, 0, 6] = np.inf
    w[7, 400, 1, 1] = -np.inf          # channel 7: -inf times the padded zeros too: NaN
    w[13, 3, 0, 0] = np.nan            # channel 13 (the third tile's second row): all NaN
    got, ref = run(shape, "relu", x=x, w=w)
    assert np.isnan(got[0, :, 3, 3]).all() and np.isnan(got[0, 13]).all()
    refs.assert_close(got, ref, np.float32, terms=512 * 9, what="non-finite")


@pytest.mark.parametrize("n_threads,shape,taken", [
    (2, (1, 512, 7, 7, 512, 3, 3, 1, 1, 1), True),
    (16, (2, 37, 5, 7, 13, 3, 3, 1, 1, 1), True),
    (2, (1, 256, 14, 14, 512, 3, 3, 2, 1, 1), True),     # strided 3x3 to 7x7
    (1, (1, 512, 7, 7, 512, 3, 3, 1, 1, 1), False),      # one thread: the blocked path
    (2, (2, 64, 7, 7, 64, 3, 3, 1, 1, 1), False),        # as many images as threads
    (2, (1, 21, 11, 10, 5, 3, 3, 1, 1, 2), False),       # 72 pixels
])
def test_auto_takes_it_where_the_rule_says(monkeypatch, n_threads, shape, taken):
    if taken and not AVX512:
        pytest.skip("the kernel runs on AVX-512 CPUs only")
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(n_threads)
    try:
        auto, ref = run(shape, "relu", seed=53)
        auto16 = auto
        if taken:
            mpskern.set_num_threads(16)
            auto16, _ = run(shape, "relu", seed=53)
            mpskern.set_num_threads(n_threads)
        monkeypatch.setenv("MPSKERN_CPU_CONV", "session9")
        s9, _ = run(shape, "relu", seed=53)
    finally:
        mpskern.set_num_threads(old)
    refs.assert_close(auto, ref, np.float32, terms=shape[1] * 9)
    assert np.array_equal(s9, auto) != taken      # session9: the paths before it
    assert np.array_equal(auto, auto16)          # one tile per output: no thread dependence


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("shape", [(8, 48, 14, 14, 130, 3, 3, 1, 1, 1),   # 64 + 64 + 2
                                   (4, 40, 13, 11, 70, 3, 3, 1, 1, 1)])   # ragged tiles
def test_winograd_wide_channel_blocks(monkeypatch, n_threads, shape):
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(n_threads)
    try:
        for algo in ["auto", "session9", "winograd"]:
            monkeypatch.setenv("MPSKERN_CPU_CONV", algo)
            got, ref = run(shape, "gelu", seed=54)
            refs.assert_close(got, ref, np.float32, terms=shape[1] * 9, what=algo)
    finally:
        mpskern.set_num_threads(old)


def test_unknown_algorithm_names_the_values(monkeypatch):
    monkeypatch.setenv("MPSKERN_CPU_CONV", "session8")
    x, w, b = case(1, 4, 5, 5, 3, 3, 3, 55)
    with pytest.raises(Exception, match="MPSKERN_CPU_CONV=session8.*session9"):
        mpskern.conv2d(x, w, b, backend="cpu")
