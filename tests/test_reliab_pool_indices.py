"""max_pool2d(return_indices=True) on windows that hold padding only (possible with
dilation > 1 although padding <= kernel/2): torch's value is -inf and its index is the
first tap at h, w >= 0 (torch steps a negative window start by the dilation), even when
that tap lies past the plane. Before: the reference said 0 and the simulator (so Metal) -1;
cpu had torch's. Found by tests/test_ops_properties.py::test_max_pool2d_indices."""
import itertools

import numpy as np
import pytest

import mpskern
from mpskern import backends
from mpskern import reference as R

BACKENDS = [pytest.param(b, marks=[] if backends.availability(b)[0] else
                         [pytest.mark.skip(reason=f"{b} unavailable")]) for b in ("cpu", "sim")]


@pytest.mark.parametrize("be", BACKENDS)
def test_a_window_of_padding_only_gives_torchs_index(be):
    x = np.array([[[[0.5]]]], np.float32)
    kw = dict(stride=1, padding=(0, 1), dilation=(1, 2))   # taps at w = -1 and w = 1 (W = 1)
    for y, i in (R.max_pool2d(x, (1, 2), return_indices=True, **kw),
                 mpskern.max_pool2d(x, (1, 2), return_indices=True, backend=be, **kw)):
        assert np.asarray(y).ravel().tolist() == [-np.inf]
        assert np.asarray(i).ravel().tolist() == [1]       # torch: w = -1 + 2


@pytest.mark.parametrize("be", BACKENDS)
def test_indices_equal_torchs_over_small_dilated_windows(be):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    n = 0
    for H, W, kh, kw, ph, dh, dw, sh, sw in itertools.product(
            [1, 2, 3], [1, 2], [1, 2, 3], [2, 3], [0, 1], [1, 2, 3], [2, 3], [1, 2], [1, 3]):
        if ph > kh // 2:
            continue
        x = rng.standard_normal((1, 2, H, W)).astype(np.float32)
        x[0, 1] = np.round(x[0, 1])                            # ties
        k = dict(stride=(sh, sw), padding=(ph, 1), dilation=(dh, dw))
        try:
            ty, ti = torch.nn.functional.max_pool2d(torch.from_numpy(x), (kh, kw),
                                                    return_indices=True, **k)
        except RuntimeError:                                   # an empty output
            continue
        n += 1
        for what, (y, i) in (("reference", R.max_pool2d(x, (kh, kw), return_indices=True, **k)),
                             (be, mpskern.max_pool2d(x, (kh, kw), return_indices=True, backend=be, **k))):
            assert np.array_equal(np.asarray(i), ti.numpy()), (what, x.shape, (kh, kw), k)
            assert np.array_equal(np.asarray(y, np.float32), ty.numpy()), (what, x.shape, (kh, kw), k)
    assert n > 200
