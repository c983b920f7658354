"""Seeded random conv2d / pooling configurations, valid and invalid: each call either
matches the float64 reference or raises ValueError for a configuration torch rejects too
(the reference's independent window enumeration decides). Nothing may crash."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)

COUNT = 60


def _pool_valid(H, W, k, s, p, d, ceil):
    if p > k // 2:
        return False
    return all(len(refs.window_starts(n, k, s, p, d, ceil)) >= 1 for n in (H, W))


@pytest.mark.parametrize("seed", range(COUNT))
def test_random_pool(backend, seed):
    rng = np.random.default_rng(1000 + seed)
    H, W = rng.integers(1, 9, 2)
    k, s, p, d = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(0, 3)), int(rng.integers(1, 3))
    ceil = bool(rng.integers(2))
    x = refs.rand((1, 2, H, W), np.float32, rng)
    valid = _pool_valid(H, W, k, s, p, d, ceil)
    if not valid:
        with pytest.raises(ValueError, match="max_pool2d"):
            mpskern.max_pool2d(x, k, s, p, d, ceil, backend=backend)
        return
    got = mpskern.max_pool2d(x, k, s, p, d, ceil, backend=backend)
    refs.assert_close(got, refs.max_pool2d(x, k, s, p, d, ceil), np.float32, what="max_pool2d")
    if _pool_valid(H, W, k, s, p, 1, ceil):
        cip, div = bool(rng.integers(2)), [None, 3][int(rng.integers(2))]
        got = mpskern.avg_pool2d(x, k, s, p, ceil, cip, div, backend=backend)
        refs.assert_close(got, refs.avg_pool2d(x, k, s, p, ceil, cip, div), np.float32,
                          what="avg_pool2d")


@pytest.mark.parametrize("seed", range(COUNT))
def test_random_conv(backend, seed):
    rng = np.random.default_rng(2000 + seed)
    g = int(rng.choice([1, 2, 3]))
    C, K = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    H, W = rng.integers(1, 8, 2)
    R, S = rng.integers(1, 4, 2)
    s, d = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    p = ["same", "valid", 0, 1, 2][int(rng.integers(5))]
    if p == "same":
        s = 1
    x = refs.rand((2, C, H, W), np.float32, rng)
    w = refs.rand((K, C // g, R, S), np.float32, rng)
    pad = 0 if p in ("same", "valid") else p
    fits = p == "same" or all(d * (k - 1) + 1 <= n + 2 * pad for n, k in ((H, R), (W, S)))
    if not fits:
        with pytest.raises(ValueError, match="larger than the padded input"):
            mpskern.conv2d(x, w, None, s, p, d, g, backend=backend)
        return
    got = mpskern.conv2d(x, w, None, s, p, d, g, backend=backend)
    refs.assert_close(got, refs.conv2d(x, w, None, s, p, d, g), np.float32, C * R * S, "conv2d")
