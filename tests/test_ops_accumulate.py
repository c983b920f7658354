"""float16 accumulates in float32: sums of 4096 ones. A float16 accumulator stalls at 2048
(the spacing of float16 there is 2), so each case would be off by a factor of two."""
import numpy as np

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)

h = np.float16
N = 4096


def test_matmul(backend):
    got = mpskern.matmul(np.ones((1, N), h), np.ones((N, 2), h), backend=backend)
    assert np.array_equal(got, np.full((1, 2), N, h))


def test_conv2d(backend):
    x, w = np.ones((1, N // 4, 2, 2), h), np.ones((1, N // 4, 2, 2), h)
    assert mpskern.conv2d(x, w, backend=backend).item() == N


def test_avg_pool2d(backend):
    got = mpskern.avg_pool2d(np.ones((1, 1, 64, 64), h), 64, backend=backend)
    assert got.item() == 1.0


def test_softmax(backend):
    got = mpskern.softmax(np.zeros((2, N), h), backend=backend)
    assert np.array_equal(got, np.full((2, N), 1.0 / N, h))


def test_norms(backend):
    x = np.ones((2, N), h)
    x[:, ::2] = 3  # mean 2, variance 1 (a stalled sum gives another mean and variance)
    ref = np.where(x == 3, 1.0, -1.0).astype(np.float64) / np.sqrt(1 + 1e-5)
    refs.assert_close(mpskern.layer_norm(x, N, backend=backend), ref, h)
    ref = x / np.sqrt(5.0 + np.finfo(h).eps)
    refs.assert_close(mpskern.rms_norm(x, N, backend=backend), ref, h)
    x3 = x.reshape(2, 4, N // 4)
    refs.assert_close(mpskern.group_norm(x3, 2, backend=backend),
                      refs.group_norm(x3, 2), h)
    refs.assert_close(mpskern.batch_norm(x3, None, None, training=True, backend=backend),
                      refs.batch_norm(x3, None, None, training=True)[0], h)
