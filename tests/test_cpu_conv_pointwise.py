"""cpu conv2d's pointwise path (objc/cpu/mk_cpu_conv_direct.c): 1x1 stride-1 unpadded
float32 convolutions with at most 512 input channels, on >= 8 threads with >= 384 output
pixels a thread over the batch, run by the direct kernel's register tiles reading the
input in place. Checked against the float64 reference where its tiles have edges: pixels
per image not a multiple of the vector width (the last vector reads a zero-padded copy:
the input's end is the buffer's end), output channels not a multiple of the tile height,
one input channel and the 512 maximum, several images, fused activations, no bias,
non-finite values in the last vector; and that auto takes it only where the rule says
(its rounding differs from the GEMM path's, MPSKERN_CPU_CONV=gemm). Strided or padded 1x1
convolutions take it over the output's pixels gathered once (not when that copy would be
larger than the input): strides per axis, padding rows and columns, odd sizes."""
import numpy as np
import pytest

import mpskern
import refs

# (N, C, H, W, K): H*W = 3135 (odd: a partial last vector at width 8 and 16) unless noted
CASES = [
    (1, 64, 55, 57, 256),      # ResNet's 64->256, one image: 3135 pixels >= 8 x 384
    (2, 3, 55, 57, 9),         # K < the tile height (4 on AVX2, 8 on AVX-512)
    (1, 1, 55, 57, 13),        # one input channel
    (3, 100, 37, 41, 20),      # 1517 pixels an image, 3 images
    (1, 512, 56, 56, 12),      # the most input channels it takes (3136: whole vectors)
    (2, 17, 63, 50, 33),       # 3150 pixels: 6 past a multiple of 16 (14 past 8)
    (1, 512, 19, 167, 12),     # 3173 = 48 * 66 + 5: the partial vector starts a run of 3
]


def case(N, C, H, W, K, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (N, C, H, W)).astype(np.float32),
            rng.uniform(-1, 1, (K, C, 1, 1)).astype(np.float32),
            rng.uniform(-1, 1, K).astype(np.float32))


@pytest.fixture(params=[8, 16])
def threads(request):
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(request.param)
    yield request.param
    mpskern.set_num_threads(old)


@pytest.mark.parametrize("shape", CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}x{c[3]}-{c[4]}" for c in CASES])
@pytest.mark.parametrize("activation,bias", [(None, True), ("relu", True), ("gelu", False),
                                             ("silu", True)])
def test_pointwise_conv_matches_the_reference(threads, shape, activation, bias):
    N, C, H, W, K = shape
    if N * H * W < threads * 384:
        pytest.skip("too few pixels for the pointwise path at this thread count")
    x, w, b = case(*shape, seed=30)
    b = b if bias else None
    got = mpskern.conv2d(x, w, b, activation=activation, backend="cpu")
    ref = refs.conv2d(x, w, b, activation=activation)
    refs.assert_close(got, ref, np.float32, terms=C, what=f"{shape} {activation}")


def test_non_finite_values_in_the_last_vector(threads):
    # the last image's last channel ends the input buffer: its partial vector is copied
    x, w, b = case(2, 8, 55, 57, 12, seed=31)
    x[-1, -1, -1, -1] = np.nan
    x[-1, 3, -1, -2] = np.inf
    x[0, 0, 0, 0] = -np.inf
    w[5, 2, 0, 0] = np.inf           # output channel 5: inf times every pixel of channel 2
    got = mpskern.conv2d(x, w, b, backend="cpu")
    ref = refs.conv2d(x, w, b)
    assert np.isnan(got[-1, :, -1, -1]).all() and np.isnan(got[:, 5]).any()
    refs.assert_close(got, ref, np.float32, terms=8, what="non-finite")


def test_images_of_a_batch_stay_separate(threads):
    x, w, b = case(4, 32, 56, 56, 24, seed=32)      # two images take the path at 16 threads
    whole = mpskern.conv2d(x, w, b, backend="cpu")
    pairs = [mpskern.conv2d(x[n:n + 2], w, b, backend="cpu") for n in (0, 2)]
    np.testing.assert_array_equal(whole, np.concatenate(pairs))


@pytest.mark.parametrize("n_threads,shape,taken", [
    (8, (1, 64, 55, 57, 64), True),
    (2, (1, 64, 55, 57, 64), False),        # few threads: OpenBLAS's kernels are faster
    (16, (1, 64, 55, 57, 64), False),       # batch 1 on 16 threads: 196 pixels a thread
    (16, (2, 64, 55, 57, 64), True),
    (8, (1, 513, 55, 57, 8), False),        # more input channels than it takes
    (8, (1, 64, 55, 57, 64, "stride 2"), False),   # 812 pixels: too few
    (8, (4, 64, 55, 57, 64, "stride 2"), True),    # gathered, then pointwise
    (16, (4, 64, 55, 57, 64, "stride 2"), False),
])
def test_auto_takes_the_pointwise_path_where_the_rule_says(monkeypatch, n_threads, shape,
                                                           taken):
    strided = len(shape) == 6
    x, w, b = case(*shape[:5], seed=33)
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(n_threads)
    try:
        stride = 2 if strided else 1
        auto = mpskern.conv2d(x, w, b, stride, backend="cpu")
        monkeypatch.setenv("MPSKERN_CPU_CONV", "gemm")
        gemm = mpskern.conv2d(x, w, b, stride, backend="cpu")
    finally:
        mpskern.set_num_threads(old)
    refs.assert_close(auto, refs.conv2d(x, w, b, stride), np.float32, terms=shape[1])
    assert np.array_equal(auto, gemm) != taken


# strided / padded 1x1 (N, C, H, W, K, stride, padding): gathered, then the dense path
STRIDED = [
    (2, 33, 111, 113, 17, 2, 0),            # 56 x 57 output pixels an image
    (2, 24, 120, 150, 9, (2, 3), (1, 2)),   # per-axis stride, padded rows and columns
    (4, 19, 100, 100, 13, 3, 1),            # stride 3 (8 threads only)
    (2, 512, 111, 111, 12, 2, 0),           # the most input channels it takes
    (8, 256, 56, 56, 24, 2, 0),             # ResNet's 256->512 1x1/2 @56 b8 (fewer K)
]


def strided_taken(threads, N, H, W, stride, padding):
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    P, Q = (H + 2 * ph - 1) // sh + 1, (W + 2 * pw - 1) // sw + 1
    return N * P * Q >= threads * 384 and P * Q <= H * W


@pytest.mark.parametrize("shape", STRIDED, ids=[f"{c[0]}x{c[1]}x{c[2]}x{c[3]}-{c[4]}-s{c[5]}-p{c[6]}"
                                                for c in STRIDED])
@pytest.mark.parametrize("activation,bias", [(None, True), ("relu", False), ("gelu_tanh", True),
                                             ("silu", True)])
def test_strided_pointwise_matches_the_reference(monkeypatch, threads, shape, activation, bias):
    N, C, H, W, K, stride, padding = shape
    if not strided_taken(threads, N, H, W, stride, padding):
        pytest.skip("too few pixels for the pointwise path at this thread count")
    x, w, b = case(N, C, H, W, K, seed=34)
    b = b if bias else None
    got = mpskern.conv2d(x, w, b, stride, padding, 2, activation=activation, backend="cpu")
    ref = refs.conv2d(x, w, b, stride, padding, 2, activation=activation)
    refs.assert_close(got, ref, np.float32, terms=C, what=f"{shape} {activation}")
    if b is None:   # both sum the C products in order from 0: the same bits (OpenBLAS's
        return      # Zen 4 / SkylakeX kernel); with a bias the GEMM adds it last, the tile first
    monkeypatch.setenv("MPSKERN_CPU_CONV", "gemm")      # the path was taken: other rounding
    assert not np.array_equal(got, mpskern.conv2d(x, w, b, stride, padding, 2,
                                                  activation=activation, backend="cpu"))


def test_strided_pointwise_non_finite_values(threads):
    # stride 2, padding 1: pixels at odd rows/columns of the padded grid are never read
    x, w, b = case(4, 8, 111, 111, 12, seed=35)
    x[0, 1, 1, 1] = np.nan          # read (output 1, 1)
    x[1, 2, 0, 0] = np.nan          # skipped by the stride: must not show up
    x[2, 3, 5, 7] = np.inf          # read (output 3, 4)
    x[3, 0, 2, 2] = -np.inf         # skipped
    w[7, 4, 0, 0] = np.inf          # inf times the padded zeros: NaN there, as the reference
    got = mpskern.conv2d(x, w, b, 2, 1, backend="cpu")
    ref = refs.conv2d(x, w, b, 2, 1)
    assert np.isnan(got[0, :, 1, 1]).all() and np.isfinite(got[1, :7]).all()
    assert np.isnan(got[:, 7, 0, 0]).all()
    refs.assert_close(got, ref, np.float32, terms=8, what="strided non-finite")


def test_strided_pointwise_padding_larger_than_the_input_keeps_the_gemm():
    # padding 40 on a 20 x 20 image: the gathered copy would exceed the input
    x, w, b = case(32, 16, 20, 20, 8, seed=36)
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(8)
    try:
        got = mpskern.conv2d(x, w, b, 1, 40, backend="cpu")
    finally:
        mpskern.set_num_threads(old)
    refs.assert_close(got, refs.conv2d(x, w, b, 1, 40), np.float32, terms=16)


SMALL_STACK_CHILD = r"""
import threading, numpy as np, mpskern
from mpskern import reference
mpskern.set_num_threads(8)
r = np.random.default_rng(0)
cases = [(r.uniform(-1, 1, shape).astype(np.float32),
          r.uniform(-1, 1, (24, 512, 1, 1)).astype(np.float32), stride)
         for shape, stride in (((1, 512, 57, 61), 1), ((2, 512, 80, 83), 2))]  # tails
got = []
def work():
    got.extend(mpskern.conv2d(x, w, stride=s, backend="cpu") for x, w, s in cases)
threading.stack_size(32 << 10)
t = threading.Thread(target=work)
t.start(); t.join()
# the float64 reference on the main thread (numpy's einsum needs more than 32 KiB)
print(*(float(np.abs(y - reference.conv2d(x, w, stride=s)).max() /
              np.abs(reference.conv2d(x, w, stride=s)).max()) for y, (x, w, s) in zip(got, cases)))
"""


@pytest.mark.skipif("libasan" in __import__("os").environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's frames do not fit 32 KiB (.ci/sanitize)")
def test_on_a_32_kib_python_thread(tmp_path):
    """The calling thread runs chunks too: pw_range kept 36 KiB of tail copy and offsets on
    its stack and a 32 KiB thread (threading.stack_size's least) segfaulted at C = 512
    (qa10, session 10); they are on the heap now."""
    import subprocess
    import sys
    (tmp_path / "child.py").write_text(SMALL_STACK_CHILD)
    r = subprocess.run([sys.executable, str(tmp_path / "child.py")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    errs = [float(v) for v in r.stdout.split()]
    assert len(errs) == 2 and max(errs) < 1e-5, r.stdout
