"""cpu conv2d's split reduction (objc/cpu/mk_cpu_conv_splitk.c): on the small-images path
(fewer images than threads, few output pixels: batch-1 late layers) with many threads, the
GEMM's reduction rows (input channels x taps) are cut into chunks whose partial outputs
one pass adds, with the bias and the activation; that path also takes deeper im2cols
(strided 3x3 at batch 1) where the blocked path would leave the threads idle. Checked against the float64 reference
at 1, 2, 8 and 16 threads: ResNet-50's shapes, odd channel and pixel counts (chunk, tile and vector edges),
3x3 and 1x1, strides, every activation, no bias, several images, non-finite values in a
late chunk; and that auto splits only where its rule says (results differ from the one
GEMM of MPSKERN_CPU_CONV=gemm in rounding only)."""
import numpy as np
import pytest

import mpskern
import refs

ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu"]
# (N, C, H, K, R, stride)
CASES = [
    (1, 512, 7, 512, 3, 1),     # ResNet-50's layer4 3x3: 4608 reduction rows, 49 pixels
    (1, 515, 7, 61, 3, 1),      # odd: 4635 rows (not a multiple of the 16-row chunk edge)
    (1, 1023, 13, 257, 1, 1),   # 1x1 reading the input in place, 169 pixels
    (1, 333, 14, 130, 3, 2),    # strided 3x3: 7x7 outputs
    (2, 1024, 7, 40, 1, 1),     # two images (each split on its own)
    # deeper im2cols that take the small-images path when the blocked one would leave the
    # threads idle (one task / four): strided 3x3 at batch 1
    (1, 256, 28, 256, 3, 2),
    (1, 131, 55, 67, 3, 2),
]


@pytest.fixture(params=[1, 2, 8, 16])
def threads(request):
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(request.param)
    yield request.param
    mpskern.set_num_threads(old)


def case(N, C, H, K, R, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (N, C, H, H)).astype(np.float32),
            rng.uniform(-1, 1, (K, C, R, R)).astype(np.float32),
            rng.uniform(-1, 1, K).astype(np.float32))


@pytest.mark.parametrize("shape", CASES, ids=["x".join(map(str, c)) for c in CASES])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_split_reduction_matches_the_reference(threads, shape, activation):
    N, C, H, K, R, stride = shape
    x, w, b = case(N, C, H, K, R, seed=40)
    bias = None if activation == "gelu" else b
    got = mpskern.conv2d(x, w, bias, stride, R // 2, activation=activation, backend="cpu")
    ref = refs.conv2d(x, w, bias, stride, R // 2, activation=activation)
    refs.assert_close(got, ref, np.float32, terms=C * R * R, what=f"{shape} {activation}")


def test_non_finite_values_in_late_chunks(threads):
    x, w, b = case(1, 512, 7, 64, 3, seed=41)
    x[0, 500, 3, 3] = np.nan          # the last chunk: every output near the centre
    w[7, 400, 1, 1] = np.inf          # channel 7: +-inf from a late chunk's partial
    w[9, 300, 0, 0] = -np.inf
    w[9, 301, 0, 0] = np.inf          # channel 9: -inf + inf = NaN across two rows
    got = mpskern.conv2d(x, w, b, 1, 1, activation="relu", backend="cpu")
    ref = refs.conv2d(x, w, b, 1, 1, activation="relu")
    assert np.isnan(got[0, :, 3, 3]).all() and np.isinf(got[0, 7]).any()
    refs.assert_close(got, ref, np.float32, terms=512 * 9, what="non-finite")


@pytest.mark.parametrize("n_threads,shape,split", [
    (16, (1, 512, 7, 512, 3, 1), True),     # 16 tiles would each pack all 4608 x 49
    (16, (1, 1024, 14, 256, 1, 1), True),   # ResNet-50's 1x1 1024->256 @14
    (2, (1, 512, 7, 512, 3, 1), False),     # 2 threads: one GEMM over output channels
    (2, (1, 1024, 14, 256, 1, 1), False),
    (16, (1, 64, 56, 64, 1, 1), False),     # shallow reduction: nothing to gain
])
def test_auto_splits_where_the_rule_says(monkeypatch, n_threads, shape, split):
    N, C, H, K, R, stride = shape
    x, w, b = case(N, C, H, K, R, seed=42)
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(n_threads)
    try:
        # session9: auto without the few-pixels kernel (tests/test_cpu_conv_fewpix.py), which
        # takes 7x7 images before the split; the split's rule is the same
        monkeypatch.setenv("MPSKERN_CPU_CONV", "session9")
        auto = mpskern.conv2d(x, w, b, stride, R // 2, activation="relu", backend="cpu")
        monkeypatch.setenv("MPSKERN_CPU_CONV", "gemm")
        one = mpskern.conv2d(x, w, b, stride, R // 2, activation="relu", backend="cpu")
    finally:
        mpskern.set_num_threads(old)
    refs.assert_close(auto, refs.conv2d(x, w, b, stride, R // 2, activation="relu"),
                      np.float32, terms=C * R * R)
    assert np.array_equal(auto, one) != split
