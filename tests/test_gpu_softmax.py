"""metal/softmax.metal on the simulator: every kernel x dtype x shipped configuration
against the float64 references of mpskern/reference.py, in two fiber orders, and under the
checking mode (which must report nothing). Shapes are small: the simulator is slow."""
import numpy as np
import pytest

import refs
from simtools import DT, checked, in_both_orders, sim
from mpskern import _native
from mpskern.tuning import spaces


# Every configuration mpskern ships (spaces.shipped), plus one looped configuration with
# several rows per threadgroup, each with (outer, n, inner) shapes that exercise its edges:
# rows absent from the last threadgroup, n below / at its capacity, strided rows.
CONFIGS = spaces.shipped("softmax") + spaces.shipped("softmax_cols") + [
    {"variant": "looped", "TPR": 64, "RPG": 4, "VPT": 8}]
CASES = {
    ("rows", 32): [(5, 1, 1), (3, 37, 1), (2, 128, 3)],
    ("rows", 256): [(2, 300, 1), (1, 2048, 1), (2, 129, 2)],
    ("rows", 1024): [(1, 5000, 1), (2, 1030, 2)],
    ("looped", 1024): [(1, 3000, 1), (2, 50, 2), (1, 9000, 1)],
    ("looped", 64): [(3, 1000, 1), (5, 70, 3), (4, 5, 1)],
    ("cols", None): [(2, 50, 7), (1, 3, 300), (1, 1, 1)],
}
IDS = ["-".join(map(str, c.values())) for c in CONFIGS]


def _key(cfg):
    return (cfg["variant"], cfg.get("TPR"))


def _run(be, shape, dtype, cfg, log, rng, scale=4.0):
    x = refs.rand(shape, dtype, rng, -scale, scale)
    y = np.full_like(x, np.nan)
    args = {"outer": shape[0], "n": shape[1], "inner": shape[2], "log": int(log)}
    be.execute("softmax", args, DT[dtype], x, y, config=cfg)
    ref = (refs.log_softmax if log else refs.softmax)(x, axis=1)
    refs.assert_close(y, ref, dtype, terms=shape[1], what=f"{cfg} {shape} log={log}")
    return y


def test_every_config_has_cases():
    assert {_key(c) for c in CONFIGS} == set(CASES)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_softmax_configs(sim, cfg, dtype, log):
    in_both_orders(sim, lambda rng: [_run(sim, shape, dtype, cfg, log, rng)
                                     for shape in CASES[_key(cfg)]], seed=1)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_softmax_checking_mode_is_clean(sim, cfg):
    rng = np.random.default_rng(2)
    for dtype in checked(sim, refs.DTYPES):
        _run(sim, CASES[_key(cfg)][0], dtype, cfg, True, rng)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_softmax_infinities(sim, cfg):
    """-inf entries contribute 0 (the online max/sum must not form exp(-inf - -inf)); a row
    of only -inf, or with a +inf, is NaN, as in torch; large magnitudes do not overflow."""
    shape = next(s for s in CASES[_key(cfg)] if s[1] >= 3)
    outer, n, inner = shape
    x = np.random.default_rng(3).uniform(-80, 80, shape).astype(np.float32)
    x[:, 1::2, :] = -np.inf
    x[0, :, 0] = -np.inf                      # one row of only -inf
    if outer * inner > 1:
        x[-1, 2, -1] = np.inf                 # a row with +inf: NaN throughout, as torch
    for log in (0, 1):
        y = np.zeros_like(x)
        args = {"outer": outer, "n": n, "inner": inner, "log": log}
        sim.execute("softmax", args, _native.F32, x, y, config=cfg)
        with np.errstate(invalid="ignore"):
            ref = (refs.log_softmax if log else refs.softmax)(x, axis=1)
        assert np.array_equal(np.isnan(y), np.isnan(ref)), f"{cfg} log={log}: NaN pattern"
        refs.assert_close(y, ref, np.float32, terms=n, what=f"{cfg} log={log}")


def test_default_choice_by_shape(sim):
    """Without a pinned configuration the lookup picks a space and configuration that fit
    each kind of shape (short, long, strided rows) and the result is right."""
    rng = np.random.default_rng(4)
    for shape, variant in [((3, 100, 1), "rows"), ((1, 9000, 1), "looped"),
                           ((2, 20, 600), "cols"), ((1, 40, 3), "rows")]:
        _run(sim, shape, np.float32, None, False, rng)
        assert sim.last_config["variant"] == variant, (shape, sim.last_config)


def test_bad_configuration_is_a_clear_error(sim):
    x = np.zeros((1, 300, 1), np.float32)
    args = {"outer": 1, "n": 300, "inner": 1, "log": 0}
    with pytest.raises(ValueError, match="TPR\\*VPT=128"):
        sim.execute("softmax", args, _native.F32, x, x.copy(),
                  config={"variant": "rows", "TPR": 32, "RPG": 8, "VPT": 4})
    with pytest.raises(ValueError, match="SIMD"):
        sim.execute("softmax", args, _native.F32, x, x.copy(),
                  config={"variant": "looped", "TPR": 48, "RPG": 1, "VPT": 8})


APPLE = dict(name="test device", architecture="", family=8, is_simulator=True, simd_width=32,
             max_threads_per_threadgroup=1024, max_threadgroup_memory=32768)


@pytest.mark.parametrize("op", ["softmax", "rownorm", "group_norm"])
def test_row_space_rules(op):
    """The row spaces (mpskern/tuning/spaces.py): shipped configurations are valid, the
    register-resident variant refuses rows it cannot hold, looped takes any length, and
    configurations beyond the device's limits are refused with a reason."""
    for cfg in spaces.shipped(op):
        assert spaces.problems(op, cfg, APPLE) == [], cfg
    rows = {"variant": "rows", "TPR": 32, "RPG": 8, "VPT": 4}
    assert spaces.problems(op, rows, APPLE, shape=(4, 128)) == []
    assert "does not fit" in " ".join(spaces.problems(op, rows, APPLE, shape=(4, 129)))
    looped = {"variant": "looped", "TPR": 32, "RPG": 8, "VPT": 8}
    assert spaces.problems(op, looped, APPLE, shape=(4, 10 ** 6)) == []
    assert spaces.problems(op, dict(looped, VPT=2), APPLE)            # VPT fixed for looped
    assert spaces.problems(op, dict(rows, TPR=1024, RPG=2), APPLE)    # 2048 threads
    small = dict(APPLE, max_threads_per_threadgroup=256)
    assert spaces.problems(op, dict(rows, TPR=512, RPG=1), small)
    assert spaces.macros(op, rows) == {"MK_TPR": 32, "MK_RPG": 8, "MK_VPT": 4}
    # every candidate the tuner would try is valid, and the generic rule picks by length
    assert all(not spaces.problems(op, c, APPLE) for c in spaces.candidates(op, APPLE))
    assert spaces.generic(op, "float32", (8, 100))["TPR"] == 32
    assert spaces.generic(op, "float32", (8, 10 ** 5))["variant"] == "looped"


def test_elementwise_space_rules():
    for op in ("softmax_cols", "pool2d"):
        (cfg,) = spaces.shipped(op)
        assert spaces.problems(op, cfg, APPLE) == []
        assert spaces.problems(op, dict(cfg, threads=48), APPLE)
        assert spaces.macros(op, cfg) == {}
    (bn,) = spaces.shipped("batch_norm")
    assert spaces.problems("batch_norm", bn, APPLE) == []
    assert spaces.problems("batch_norm", dict(bn, threads=100), APPLE)


def test_generic_steps_down_on_a_smaller_device():
    small = dict(APPLE, max_threads_per_threadgroup=256)
    for shape, want in [((4, 100), ("rows", 32)), ((4, 2000), ("rows", 256)),
                        ((4, 5000), ("looped", 256))]:
        cfg = spaces.generic("rownorm", "float32", shape, small)
        assert (cfg["variant"], cfg["TPR"]) == want
        assert spaces.problems("rownorm", cfg, small, shape=shape) == []
