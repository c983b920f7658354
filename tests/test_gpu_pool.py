"""metal/pool.metal on the simulator: max/avg pool2d with every option (kernel, stride,
padding, dilation, ceil_mode, count_include_pad, divisor_override), every kernel x dtype
x shipped configuration against the float64 references of mpskern/reference.py, in two fiber
orders, and under the checking mode (which must report nothing)."""
import numpy as np
import pytest

import refs
from simtools import DT, in_both_orders, sim, sim_mode
from mpskern import _native
from mpskern.tuning import spaces

MAX, AVG = 0, 1

# (x shape, kernel, stride, padding, dilation, ceil_mode)
WINDOWS = [
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 7, 9), (3, 2), (2, 3), (1, 1), (1, 1), True),      # ceil: partial last windows
    ((1, 2, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), True),      # ceil adds nothing
    ((1, 1, 6, 5), (5, 4), (1, 1), (2, 2), (1, 1), False),     # window covers the input
    ((2, 1, 9, 10), (3, 3), (1, 2), (1, 0), (2, 3), True),     # dilation (max only)
    ((1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (1, 1), False),
]
# (count_include_pad, divisor_override)
AVG_OPTIONS = [(True, None), (False, None), (True, 5), (False, 3)]


def _pool(be, mode, window, dtype, cfg, rng, count_include_pad=True, divisor=None):
    shape, k, s, p, d, ceil_mode = window
    if mode == AVG:
        d = (1, 1)
    x = refs.rand(shape, dtype, rng, -3, 3)
    if mode == MAX:
        ref = refs.max_pool2d(x, k, s, p, d, ceil_mode)
    else:
        ref = refs.avg_pool2d(x, k, s, p, ceil_mode, count_include_pad, divisor)
    n, c, h, w = shape
    args = {"N": n, "C": c, "H": h, "W": w, "P": ref.shape[2], "Q": ref.shape[3],
            "kh": k[0], "kw": k[1], "stride_h": s[0], "stride_w": s[1], "pad_h": p[0],
            "pad_w": p[1], "dil_h": d[0], "dil_w": d[1], "mode": mode,
            "count_include_pad": int(count_include_pad), "divisor": divisor or 0,
            "pad_h_end": p[0], "pad_w_end": p[1]}
    y = np.full(ref.shape, np.nan, dtype)
    be.execute("pool2d", args, DT[dtype], x, y, config=cfg)
    refs.assert_close(y, ref, dtype, terms=k[0] * k[1],
                      what=f"mode={mode} {window} cip={count_include_pad} div={divisor}")
    return y


def _all(be, dtype, cfg, rng):
    out = []
    for window in WINDOWS:
        out.append(_pool(be, MAX, window, dtype, cfg, rng))
        for cip, div in AVG_OPTIONS:
            out.append(_pool(be, AVG, window, dtype, cfg, rng, cip, div))
    return out


# the shipped configuration and a small threadgroup (several partial groups)
CONFIGS = spaces.shipped("pool2d") + [{"variant": "direct", "threads": 32}]
CFG_IDS = [f"threads{c['threads']}" for c in CONFIGS]


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
def test_pool_configs(sim, cfg, dtype):
    """forward and reverse fiber order: right and bit-identical (no atomics)."""
    in_both_orders(sim, lambda: _all(sim, dtype, cfg, np.random.default_rng(1)))


@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
def test_pool_checking_mode_is_clean(sim, cfg):
    with sim_mode(sim, "random", check=True):
        for dtype in refs.DTYPES:
            _all(sim, dtype, cfg, np.random.default_rng(2))


def test_max_pool_propagates_nan(sim):
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 1, 1] = np.nan
    args = {"N": 1, "C": 1, "H": 4, "W": 4, "P": 2, "Q": 2, "kh": 2, "kw": 2, "stride_h": 2,
            "stride_w": 2, "pad_h": 0, "pad_w": 0, "dil_h": 1, "dil_w": 1, "mode": MAX,
            "count_include_pad": 1, "divisor": 0, "pad_h_end": 0, "pad_w_end": 0}
    y = np.zeros((1, 1, 2, 2), np.float32)
    sim.execute("pool2d", args, _native.F32, x, y)
    assert np.isnan(y[0, 0, 0, 0])
    assert y[0, 0, 0, 1] == 7 and y[0, 0, 1, 0] == 13 and y[0, 0, 1, 1] == 15
