"""metal/norm.metal on the simulator: layer_norm / rms_norm, group_norm and batch_norm
(inference and training), every kernel x dtype x shipped configuration against the
float64 references of mpskern/reference.py, in two fiber orders, and under the checking mode
(which must report nothing). Shapes are small: the simulator is slow."""
import numpy as np
import pytest

import refs
from simtools import DT, checked, in_both_orders, sim, sim_mode
from mpskern import _native
from mpskern.tuning import spaces

LAYER, RMS = 0, 1

# Every row configuration mpskern ships (spaces.shipped) plus a looped one with several
# rows per threadgroup; per configuration, shapes that exercise its edges.
ROW_CONFIGS = spaces.shipped("rownorm") + [{"variant": "looped", "TPR": 64, "RPG": 4, "VPT": 8}]
assert spaces.shipped("group_norm") == spaces.shipped("rownorm")
# (rows, n)
# (rows, n); n % 4 != 0 puts the rows at every 4-alignment, each reading its own copy of
# the weight and bias (gpu/norm.py params4)
ROW_CASES = {
    ("rows", 32): [(5, 100), (9, 1), (3, 128)],
    ("rows", 256): [(3, 1500), (2, 2048), (5, 1001)],
    ("rows", 1024): [(1, 6000), (2, 1100)],
    ("looped", 1024): [(2, 2500), (1, 9000)],
    ("looped", 64): [(3, 700), (5, 10), (4, 333)],
}
# (N, C, HW, groups); a row is C/groups*HW long
GROUP_CASES = {
    ("rows", 32): [(2, 6, 10, 3), (3, 4, 1, 4)],
    ("rows", 256): [(2, 4, 300, 2)],
    ("rows", 1024): [(1, 8, 700, 2)],
    ("looped", 1024): [(1, 4, 900, 1)],
    ("looped", 64): [(2, 6, 500, 2), (1, 3, 7, 3)],
}
# the shipped one, and one cutting channels into 8 chunks (uneven, or of one element each)
BATCH_CONFIGS = spaces.shipped("batch_norm") + [
    {"variant": "stats", "TPR": 32, "RPG": 4, "threads": 64, "split": 8}]
# planes of HW % 4 == 2 (a thread's 4 elements in two channels), 1 and 3 (up to 4 channels,
# C wrapping to the next sample), 4-aligned, 7x7 (odd total: a scalar tail)
BATCH_CASES = [(2, 3, 50), (5, 9, 1), (1, 2, 300), (3, 5, 49), (2, 3, 3), (1, 7, 2)]


def _key(cfg):
    return (cfg["variant"], cfg["TPR"])


def _data(shape, dtype, rng, offset=0.0):
    # an offset makes E[x^2]-E[x]^2 lose every digit: the kernels must not use it
    return (offset + refs.rand(shape, dtype, rng, -2, 2).astype(np.float64)).astype(dtype)


def _vec(n, rng, present):
    return rng.uniform(0.5, 1.5, n).astype(np.float32) if present else None


def _rownorm(be, rows, n, dtype, cfg, kind, affine, rng, offset=0.0):
    x = _data((rows, n), dtype, rng, offset)
    w, b = _vec(n, rng, affine), _vec(n, rng, affine and kind == LAYER)
    y = np.full_like(x, np.nan)
    eps = 1e-5 if kind == LAYER else float(np.finfo(dtype).eps)
    args = {"rows": rows, "n": n, "kind": kind, "has_weight": int(w is not None),
            "has_bias": int(b is not None), "eps": eps}
    be.execute("rownorm", args, DT[dtype], x, w, b, y, config=cfg)
    ref = (refs.layer_norm(x, n, w, b, eps) if kind == LAYER else refs.rms_norm(x, n, w, eps))
    if offset:
        return y, ref
    refs.assert_close(y, ref, dtype, terms=n, what=f"{cfg} {(rows, n)} kind={kind}")
    return y


def _group_norm(be, shape, dtype, cfg, affine, rng):
    n_, c, hw, g = shape
    x = _data((n_, c, hw), dtype, rng, offset=3.0)
    w, b = _vec(c, rng, affine), _vec(c, rng, affine)
    y = np.full_like(x, np.nan)
    args = {"N": n_, "C": c, "HW": hw, "groups": g, "has_weight": int(affine),
            "has_bias": int(affine), "eps": 1e-5}
    be.execute("group_norm", args, DT[dtype], x, w, b, y, config=cfg)
    refs.assert_close(y, refs.group_norm(x, g, w, b, 1e-5), dtype, terms=c // g * hw,
                      what=f"{cfg} {shape}")
    return y


def _batch_norm(be, shape, dtype, cfg, training, running, affine, rng):
    n_, c, hw = shape
    x = _data(shape, dtype, rng, offset=2.0)
    rm = rng.uniform(-1, 1, c).astype(np.float32) if running or not training else None
    rv = rng.uniform(0.5, 2, c).astype(np.float32) if rm is not None else None
    rm0, rv0 = (None, None) if rm is None else (rm.copy(), rv.copy())
    w, b = _vec(c, rng, affine), _vec(c, rng, affine)
    y = np.full_like(x, np.nan)
    args = {"N": n_, "C": c, "HW": hw, "training": int(training), "has_running": int(rm is not None),
            "has_weight": int(affine), "has_bias": int(affine), "eps": 1e-5, "momentum": 0.1}
    be.execute("batch_norm", args, DT[dtype], x, rm, rv, w, b, y, config=cfg)
    ref, rm_ref, rv_ref = refs.batch_norm(x, rm0, rv0, w, b, training, 0.1, 1e-5)
    what = f"{cfg} {shape} training={training}"
    refs.assert_close(y, ref, dtype, terms=n_ * hw, what=what)
    if rm is not None:
        refs.assert_close(rm, rm_ref, np.float32, terms=n_ * hw, what=what + " running_mean")
        refs.assert_close(rv, rv_ref, np.float32, terms=n_ * hw, what=what + " running_var")
        return [y, rm, rv]
    return [y]


def test_every_config_has_cases():
    assert {_key(c) for c in ROW_CONFIGS} == set(ROW_CASES) == set(GROUP_CASES)


ROW_IDS = ["-".join(map(str, c.values())) for c in ROW_CONFIGS]
BATCH_IDS = ["-".join(map(str, c.values())) for c in BATCH_CONFIGS]
DT_IDS = ["f32", "f16"]


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", ROW_CONFIGS, ids=ROW_IDS)
def test_rownorm_configs(sim, cfg, dtype):
    def call(rng):
        return [_rownorm(sim, rows, n, dtype, cfg, kind, affine, rng)
                for rows, n in ROW_CASES[_key(cfg)] for kind in (LAYER, RMS)
                for affine in (False, True)]
    in_both_orders(sim, call, seed=1)


@pytest.mark.parametrize("cfg", ROW_CONFIGS, ids=ROW_IDS)
def test_layer_norm_large_offset_float32(sim, cfg):
    """mean 1000, spread 2: float32 E[x^2]-E[x]^2 would miss the variance (~1.3) by tens
    of percent; two-pass / Welford keep the output within float32 rounding of the mean."""
    rows, n = ROW_CASES[_key(cfg)][0]
    y, ref = _rownorm(sim, rows, n, np.float32, cfg, LAYER, False, np.random.default_rng(5),
                      1000.0)
    err = float(np.abs(y - ref).max())
    assert err < 5e-3, f"{cfg}: max error {err:.3g} with a large mean"


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", ROW_CONFIGS, ids=ROW_IDS)
def test_group_norm_configs(sim, cfg, dtype):
    def call(rng):
        return [_group_norm(sim, shape, dtype, cfg, affine, rng)
                for shape in GROUP_CASES[_key(cfg)] for affine in (False, True)]
    in_both_orders(sim, call, seed=2)


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", BATCH_CONFIGS, ids=BATCH_IDS)
def test_batch_norm_configs(sim, cfg, dtype):
    def call(rng):
        return [a for shape in BATCH_CASES
                for training, running in ((False, True), (True, True), (True, False))
                for a in _batch_norm(sim, shape, dtype, cfg, training, running, training, rng)]
    in_both_orders(sim, call, seed=3)


@pytest.mark.parametrize("cfg", ROW_CONFIGS, ids=ROW_IDS)
def test_norm_checking_mode_is_clean(sim, cfg):
    rng = np.random.default_rng(4)
    for dtype in checked(sim, refs.DTYPES):
        rows, n = ROW_CASES[_key(cfg)][0]
        _rownorm(sim, rows, n, dtype, cfg, LAYER, True, rng)
        _group_norm(sim, GROUP_CASES[_key(cfg)][0], dtype, cfg, True, rng)


@pytest.mark.parametrize("cfg", BATCH_CONFIGS, ids=BATCH_IDS)
def test_batch_norm_checking_mode_is_clean(sim, cfg):
    rng = np.random.default_rng(6)
    for order in ("forward", "random"):
        with sim_mode(sim, order, check=True):
            for dtype in refs.DTYPES:
                for training in (False, True):
                    for shape in (BATCH_CASES[0], BATCH_CASES[3], BATCH_CASES[4]):
                        _batch_norm(sim, shape, dtype, cfg, training, True, True, rng)


def test_default_choice_by_row_length(sim):
    rng = np.random.default_rng(7)
    for n, variant, tpr in [(100, "rows", 32), (2000, "rows", 256), (9000, "looped", 1024)]:
        _rownorm(sim, 2, n, np.float32, None, LAYER, True, rng)
        assert (sim.last_config["variant"], sim.last_config["TPR"]) == (variant, tpr)


def test_batch_norm_inference_without_running_stats_is_an_error(sim):
    x = np.zeros((2, 3, 4), np.float32)
    args = {"N": 2, "C": 3, "HW": 4, "training": 0, "has_running": 0, "has_weight": 0,
            "has_bias": 0, "eps": 1e-5, "momentum": 0.1}
    with pytest.raises(ValueError, match="running_mean"):
        sim.execute("batch_norm", args, _native.F32, x, None, None, None, None, x.copy())


def test_empty_inputs_dispatch_nothing(sim):
    x = np.zeros((0, 3, 4), np.float32)
    a = {"N": 0, "C": 3, "HW": 4, "training": 0, "has_running": 1, "has_weight": 0,
         "has_bias": 0, "eps": 1e-5, "momentum": 0.1}
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    sim.execute("batch_norm", a, _native.F32, x, rm, rv, None, None, x.copy())
    assert sim.last_config == {"empty": True}
    r = np.zeros((4, 0), np.float16)
    sim.execute("rownorm", {"rows": 4, "n": 0, "kind": LAYER, "has_weight": 0, "has_bias": 0,
                    "eps": 1e-5}, _native.F16, r, None, None, r.copy())
    assert sim.last_config == {"empty": True}


def test_batch_norm_default_split_for_few_channels(sim):
    """Few channels with many elements each: the statistics are cut into chunks (more
    threadgroups) and combined exactly."""
    rng = np.random.default_rng(8)
    cfg = spaces.shipped("batch_norm")[0]
    assert spaces.stats_split(cfg, 2, 2, 4200) > 1
    _batch_norm(sim, (2, 2, 4200), np.float32, None, True, True, True, rng)
    assert sim.last_config["split"] == spaces.stats_split(cfg, 2, 2, 4200)


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", ROW_CONFIGS, ids=ROW_IDS)
def test_rownorm_non_finite_rows(sim, cfg, dtype):
    """A +-Inf in an RMS row: finite entries 0, the Inf NaN (torch, the reference); a NaN:
    the whole row NaN; layer_norm with either: the whole row NaN. Rows without one stay
    finite. RMS derived from running-mean moments made every Inf row all NaN."""
    rng = np.random.default_rng(9)
    for rows, n in ROW_CASES[_key(cfg)]:
        x = _data((max(rows, 4), n), dtype, rng)
        x[0, n // 2] = np.inf
        x[1, n - 1] = -np.inf
        x[2, 0] = np.nan
        for kind in (LAYER, RMS):
            eps = 1e-5
            args = {"rows": x.shape[0], "n": n, "kind": kind, "has_weight": 0,
                    "has_bias": 0, "eps": eps}
            y = np.full_like(x, 7.0)
            sim.execute("rownorm", args, DT[dtype], x, None, None, y, config=cfg)
            with np.errstate(invalid="ignore"):
                ref = refs.layer_norm(x, n, None, None, eps) if kind == LAYER \
                    else refs.rms_norm(x, n, None, eps)
            refs.assert_close(y, ref, dtype, terms=n, what=f"{cfg} {(rows, n)} kind={kind}")


@pytest.mark.parametrize("cfg", BATCH_CONFIGS, ids=BATCH_IDS)
def test_batch_norm_training_huge_channels(sim, cfg):
    """Training statistics of channels with |x| up to near FLT_MAX: float32 sums of squared
    deviations overflow from |x| ~ 1e19 (normalised output 0 or NaN); each chunk's moments
    are taken of x times a power of two and combined at its channel's smallest scale, so the
    output and running mean match the float64 reference; a channel mixing huge and ordinary
    chunks (split 8) too, and the ordinary channel beside them is unaffected."""
    rng = np.random.default_rng(10)
    n_, c, hw = 2, 4, 300
    x = rng.standard_normal((n_, c, hw)).astype(np.float32)
    x[:, 1] *= 1e30                                   # all huge
    x[0, 2, :100] *= 3e37                             # huge chunks beside ordinary ones
    x[:, 3] = x[:, 3] * 1e19 + 1e20                   # an offset beyond 2^48 too
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    rm0, rv0 = rm.copy(), rv.copy()
    y = np.full_like(x, np.nan)
    args = {"N": n_, "C": c, "HW": hw, "training": 1, "has_running": 1, "has_weight": 0,
            "has_bias": 0, "eps": 1e-5, "momentum": 0.1}
    sim.execute("batch_norm", args, _native.F32, x, rm, rv, None, None, y, config=cfg)
    with np.errstate(over="ignore"):
        ref, rm_ref, rv_ref = refs.batch_norm(x, rm0, rv0, None, None, True, 0.1, 1e-5)
    refs.assert_close(y, ref, np.float32, terms=n_ * hw, what=f"{cfg} output")
    refs.assert_close(rm, rm_ref, np.float32, terms=n_ * hw, what=f"{cfg} running_mean")
    with np.errstate(over="ignore"):
        refs.assert_close(rv, rv_ref.astype(np.float32), np.float32, terms=n_ * hw,
                          what=f"{cfg} running_var (inf past FLT_MAX)")
