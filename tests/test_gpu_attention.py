"""metal/attention.metal on the simulator: both kernels (simdgroup_matrix and scalar) x dtype x
tile configurations against the float64 reference, bit-identical in forward and reverse
fiber order, and clean under the checking mode (races, bounds, barrier divergence) in a
random order. Shapes are small and odd (the simulator is slow): partial query and key
blocks, E and Ev below the head-dimension capacity, masks in broadcast forms, causal with
L < S and L > S, grouped-query heads, rows with nothing to attend to, NaN inputs."""
import numpy as np
import pytest

import attn_tools as T
import refs
from simtools import sim, sim_mode, in_both_orders  # noqa: F401  (sim is a fixture)
from mpskern import KernelCompileError, Unsupported
from mpskern.tuning import spaces

# (variant, BQ, BK, D): the smallest tiles, a middle set, MLX-like 32-row blocks, and
# 128-wide heads, one of them using exactly the 32 KiB of threadgroup memory
CONFIGS = [("simd", 8, 8, 16), ("tiled", 8, 8, 16), ("simd", 16, 16, 32), ("tiled", 16, 16, 32),
           ("simd", 32, 32, 64), ("tiled", 32, 16, 64), ("simd", 16, 16, 128),
           ("simd", 32, 16, 128)]
IDS = ["{}-{}x{}x{}".format(*c) for c in CONFIGS]


def _cfg(c):
    return dict(variant=c[0], BQ=c[1], BK=c[2], D=c[3])


def _cases(D):
    """(B, Hq, Hk, Hv, L, S, E, Ev), mask kind and shape, causal: within head capacity D."""
    E, Ev = min(D, 13) if D < 64 else D - 3, max(1, D // 2 + 1)
    return [((2, 2, 2, 2, 19, 37, E, Ev), None, None, False),
            ((1, 4, 2, 1, 11, 29, E, Ev), "bool", (1, 1, 11, 29), True),      # GQA, L < S
            ((2, 2, 1, 2, 41, 9, E, Ev), "add", (2, 1, 1, 9), True),          # L > S
            ((1, 2, 2, 2, 17, 23, E, Ev), "bool", (1, 2, 17, 1), False),      # whole rows
            ((1, 2, 2, 2, 9, 33, E, Ev), "add", (1, 1, 9, 33), False)]


def _run_all(be, cfg, dtype, seed):
    out = []
    rng = np.random.default_rng(seed)
    for dims, mk, ms, causal in _cases(cfg["D"]):
        q, k, v, m = T.case(rng, dtype, *dims, mask=mk, mask_shape=ms)
        got = T.run_gpu(be, q, k, v, m, causal, **cfg)
        T.check(got, q, k, v, m, causal, what=f"{cfg} {np.dtype(dtype)} {dims} {mk} {ms} {causal}")
        out.append(got)
    return out


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("conf", CONFIGS, ids=IDS)
def test_attention_configs(sim, conf, dtype):
    cfg = _cfg(conf)
    in_both_orders(sim, lambda: _run_all(sim, cfg, dtype, 1))


@pytest.mark.parametrize("conf", CONFIGS, ids=IDS)
def test_attention_checking_mode_is_clean(sim, conf):
    cfg = _cfg(conf)
    rng = np.random.default_rng(2)
    with sim_mode(sim, "random", check=True):
        for dtype in refs.DTYPES:
            for dims, mk, ms, causal in _cases(cfg["D"])[1:3]:
                q, k, v, m = T.case(rng, dtype, *dims, mask=mk, mask_shape=ms)
                T.check(T.run_gpu(sim, q, k, v, m, causal, **cfg), q, k, v, m, causal)


@pytest.mark.parametrize("variant", ["simd", "tiled"])
def test_rows_with_nothing_to_attend_to_and_nan(sim, variant):
    """Hidden rows are 0 @ v (0, or NaN under a NaN value); a NaN query row is NaN even
    when fully hidden (-inf is added, as torch); NaN keys/values that rows see, +inf and NaN
    in an additive mask make rows NaN; scores of +-thousands do not overflow."""
    cfg = dict(variant=variant, BQ=8, BK=8, D=16)
    rng = np.random.default_rng(3)
    q, k, v, _ = T.case(rng, np.float32, 1, 2, 2, 2, 13, 21, 16, 8)
    bm = rng.random((1, 1, 13, 21)) > 0.5
    bm[0, 0, [0, 12]] = False
    bm[0, 0, 4] = False
    bm[0, 0, 4, 20] = True                         # only the last key, in the last block
    am = np.where(bm, 0.0, -np.inf).astype(np.float32)
    for m in (bm, am):
        got = T.run_gpu(sim, q, k, v, m, **cfg)
        T.check(got, q, k, v, m)
        assert np.all(got[:, :, [0, 12]] == 0)
    v[0, 1, 15, 3] = np.nan                        # row 0 of head 1 cannot see key 15
    q[0, 0, 12, 1] = np.nan                        # a fully hidden row with a NaN query
    got = T.run_gpu(sim, q, k, v, bm, **cfg)
    T.check(got, q, k, v, bm)
    assert np.isnan(got[0, 1, 0, 3]) and np.isnan(got[0, 0, 12]).all()
    q, k, v, _ = T.case(rng, np.float32, 1, 2, 2, 2, 13, 21, 16, 8)
    k[0, 1, 3, 0] = np.nan
    am = np.zeros((1, 1, 13, 21), np.float32)
    am[0, 0, 2, 5] = np.inf
    am[0, 0, 7, 19] = np.nan
    T.check(T.run_gpu(sim, q, k, v, am, **cfg), q, k, v, am)
    big = q * np.float32(60)
    T.check(T.run_gpu(sim, big, k, v, **cfg), big, k, v)


@pytest.mark.parametrize("variant", ["simd", "tiled"])
def test_empty_head_dimension_and_no_keys(sim, variant):
    """E = 0: scores 0 whatever the scale, the mean of v (torch); S = 0: zeros."""
    cfg = dict(variant=variant, BQ=8, BK=8, D=8)
    rng = np.random.default_rng(4)
    for dims in [(1, 2, 2, 2, 9, 5, 0, 4), (1, 2, 2, 2, 9, 0, 4, 4)]:
        q, k, v, _ = T.case(rng, np.float32, *dims)
        for causal in (False, True):
            T.check(T.run_gpu(sim, q, k, v, None, causal, **cfg), q, k, v, None, causal)


def test_tiled_kernel_is_not_built_where_it_does_not_fit(sim):
    """32 x 128 queries, 2 x 16 x 128 keys/values and 32 x 16 weights are 34 KiB: only the
    simdgroup kernel (32 KiB, no weight staging) exists for that configuration."""
    with pytest.raises((KernelCompileError, ValueError, RuntimeError), match="attention_tiled_f32"):
        sim.pipeline("attention_tiled_f32", file="attention.metal",
                     macros={"MK_BQ": 32, "MK_BK": 16, "MK_D": 128})


@pytest.mark.parametrize("cfg", spaces.shipped("attention"), ids=lambda c: "{BQ}x{BK}x{D}".format(**c))
def test_every_shipped_configuration(sim, cfg):
    """What generic() can choose, at the widest head it holds and a narrower one."""
    rng = np.random.default_rng(5)
    for E, Ev in ((cfg["D"], cfg["D"] - 5), (cfg["D"] // 2 + 1, 3)):
        q, k, v, m = T.case(rng, np.float32, 1, 2, 1, 2, 21, 19, E, Ev, "bool", (1, 1, 21, 19))
        T.check(T.run_gpu(sim, q, k, v, m, True, variant=cfg["variant"], BQ=cfg["BQ"],
                          BK=cfg["BK"], D=cfg["D"]), q, k, v, m, True)


def test_encoder_chooses_and_refuses(sim):
    """Without a pinned configuration the encoder takes the space's choice for the head
    size; heads wider than the kernels hold are mpskern.Unsupported, not a wrong answer."""
    rng = np.random.default_rng(6)
    q, k, v, _ = T.case(rng, np.float16, 2, 2, 2, 2, 9, 12, 40, 40)
    a, _ = T.args(q, k, v)
    out = np.zeros((2, 2, 9, 40), np.float16)
    sim.execute("attention", a, T.refs_dtype(np.float16), q, k, v, None, out)
    T.check(out, q, k, v)
    assert sim.last_config["D"] == 64 and sim.last_config["kernel"] == "attention_simd_f16"
    q, k, v, _ = T.case(rng, np.float32, 1, 1, 1, 1, 3, 3, 300, 8)
    a, _ = T.args(q, k, v)
    with pytest.raises(Unsupported, match="E=300"):
        sim.execute("attention", a, T.refs_dtype(np.float32), q, k, v, None,
                    np.zeros((1, 1, 3, 8), np.float32))
