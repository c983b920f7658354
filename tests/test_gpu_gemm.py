"""gemm kernels (metal/gemm.metal) on the simulator, through the GPU encoder
(mpskern/backends/gpu/gemm.py): every kernel x dtype x shipped tile configuration against
float64, in two fiber orders (outputs bit-identical: the kernels use no atomics) and under
the checking mode; edge tiles, transposes, alpha/beta/C, broadcast batches, split-K.
Plus the tile space's rules (mpskern/tuning/spaces.py). Shapes stay small: the simulator
runs about 1000x slower than a GPU."""
import numpy as np
import pytest

from mpskern import _native
from simtools import checked, sim  # noqa: F401  (sim: fixture)
from mpskern.tuning import db, spaces

FAMILIES = ("apple7", "apple8", "apple9", "apple10")
DTYPES = (np.float32, np.float16)
CODE = {np.dtype(np.float32): _native.F32, np.dtype(np.float16): _native.F16}
UNIT = {np.dtype(np.float32): 2.0 ** -24, np.dtype(np.float16): 2.0 ** -11}
TILE_KEYS = ("BM", "BN", "BK", "WM", "WN")
APPLE8 = dict(name="test apple8", architecture="", family=8, is_simulator=True, simd_width=32,
              max_threads_per_threadgroup=1024, max_threadgroup_memory=32768)


def shipped_tiles(op):
    """The distinct tile parameter sets mpskern ships for `op`: every family's packaged
    defaults (mpskern/tuning/defaults/) for both dtypes and every configuration the generic
    rule can return (spaces.shipped)."""
    seen = []
    for dt in ("float32", "float16"):
        cfgs = [e.config for f in FAMILIES for e in db.family_defaults(f).for_op(op, dt)]
        cfgs += spaces.shipped(op)
        for c in cfgs:
            t = tuple(c[k] for k in TILE_KEYS)
            if t not in seen:
                seen.append(t)
    assert seen, f"no shipped {op} configurations"
    return seen


def tiles_id(t):
    return "{}x{}x{}_{}x{}".format(*t)


def variants_of(tiles):
    """The configurations of both kernel variants with these tile parameters."""
    return [dict(variant=v, **dict(zip(TILE_KEYS, tiles))) for v in ("simd", "tiled")]


# ------------------------------------------------------------------------------ helpers
def make_args(A, B, C, alpha, beta, trans_a, trans_b, out_shape):
    batch, M, N = out_shape
    ra, ca = A.shape[-2:]
    rb, cb = B.shape[-2:]
    K = ra if trans_a else ca
    return dict(batch=batch, M=M, N=N, K=K, lda=ca, ldb=cb, ldc=N,
                stride_a=ra * ca if A.shape[0] > 1 else 0,
                stride_b=rb * cb if B.shape[0] > 1 else 0,
                stride_c=M * N if C is not None and C.shape[0] > 1 else 0,
                stride_out=M * N, trans_a=int(trans_a), trans_b=int(trans_b),
                has_c=int(C is not None), alpha=float(alpha), beta=float(beta), split_k=1,
                activation=0)


def run(be, A, B, C=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, config=None,
        out=None):
    """out = alpha * op(A) @ op(B) + beta * C through the encoder; A, B, C are 3-D."""
    M = A.shape[2] if trans_a else A.shape[1]
    N = B.shape[1] if trans_b else B.shape[2]
    batch = max(A.shape[0], B.shape[0])
    if out is None:
        out = np.full((batch, M, N), np.nan, A.dtype)
    args = make_args(A, B, C, alpha, beta, trans_a, trans_b, (batch, M, N))
    be.execute("gemm", args, CODE[A.dtype], A, B, C, out, config=config)
    return out


def reference(A, B, C, alpha, beta, trans_a, trans_b):
    """(float64 result, error bound per element): float accumulation over K terms plus the
    rounding of the stored result."""
    a, b = A.astype(np.float64), B.astype(np.float64)
    if trans_a:
        a = np.swapaxes(a, 1, 2)
    if trans_b:
        b = np.swapaxes(b, 1, 2)
    y = alpha * (a @ b)
    mag = abs(alpha) * (np.abs(a) @ np.abs(b))
    if C is not None and beta != 0:
        y = y + beta * C.astype(np.float64)
        mag = mag + abs(beta) * np.abs(C.astype(np.float64))
    K = a.shape[2]
    bound = 4 * 2.0 ** -24 * (K + 2) * mag + UNIT[A.dtype] * np.abs(y) + 1e-30
    return y, bound


def check(got, ref, bound, what=""):
    assert got.shape == ref.shape, what
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)          # NaN (an element never written) counts as bad
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements wrong, first at "
                           f"{np.argwhere(bad)[0].tolist()}: got {got[bad][0]}, want {ref[bad][0]}")


def two_orders_or_checked(sim, A, B, C, ref, bound, what, **kw):
    """float32: the forward and reverse fiber orders give the same bits and match float64;
    float16: clean under the checking mode (it reports reads past a buffer) and matching."""
    if A.dtype == np.float32:
        outs = []
        try:
            for order in ("forward", "reverse"):
                sim.set_sim_options(order=order)
                outs.append(run(sim, A, B, C, **kw))
        finally:
            sim.set_sim_options()
        assert np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8)), what
        check(outs[0], ref, bound, what)
    else:
        for _ in checked(sim, [A.dtype.type]):
            check(run(sim, A, B, C, **kw), ref, bound, what + " checked")


def data(rng, shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


# ------------------------------------------------------------------------------ shipped configs
CASES = [(v, t, dt) for t in shipped_tiles("gemm") for v in ("simd", "tiled") for dt in DTYPES]


@pytest.mark.parametrize("variant,tiles,dtype", CASES,
                         ids=[f"{v}-{tiles_id(t)}-{np.dtype(d).name}" for v, t, d in CASES])
def test_shipped_config_two_orders(sim, variant, tiles, dtype):
    """Edge tiles in M, N and K, a batch of 2, a transpose, alpha/beta/C: forward and
    reverse fiber orders give the same bits and match float64."""
    cfg = dict(variant=variant, **dict(zip(TILE_KEYS, tiles)))
    rng = np.random.default_rng(sum(tiles))
    ta = dtype == np.float16
    tb = variant == "tiled"
    M, N, K = 37, 45, 29
    A = data(rng, (2, K, M) if ta else (2, M, K), dtype)
    B = data(rng, (2, N, K) if tb else (2, K, N), dtype)
    C = data(rng, (2, M, N), dtype)
    ref, bound = reference(A, B, C, 1.5, -0.5, ta, tb)
    outs = []
    try:
        for order in ("forward", "reverse"):
            sim.set_sim_options(order=order)
            outs.append(run(sim, A, B, C, alpha=1.5, beta=-0.5, trans_a=ta, trans_b=tb,
                            config=cfg))
    finally:
        sim.set_sim_options()
    assert sim.last_config["kernel"] == f"gemm_{variant}_{'f32' if dtype == np.float32 else 'f16'}"
    check(outs[0], ref, bound, f"{cfg} forward")
    assert np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8)), \
        "forward and reverse fiber orders differ"


@pytest.mark.parametrize("tiles", shipped_tiles("gemm"), ids=tiles_id)
def test_shipped_configs_pass_the_checking_mode(sim, tiles):
    """Races, barrier divergence, out-of-bounds and uninitialised threadgroup reads: none,
    for both kernels and dtypes, on a shape with edge tiles."""
    rng = np.random.default_rng(1)
    for dtype in checked(sim, DTYPES):
        for cfg in variants_of(tiles):
            A, B = data(rng, (1, 19, 21), dtype), data(rng, (1, 21, 35), dtype)
            ref, bound = reference(A, B, None, 1.0, 0.0, False, False)
            check(run(sim, A, B, config=cfg), ref, bound, f"{cfg} {dtype} checked")
            # split-K: partial sums in device scratch, then gemm_splitk_reduce_*
            A, B = data(rng, (2, 9, 40), dtype), data(rng, (2, 40, 11), dtype)
            C = data(rng, (2, 9, 11), dtype)
            ref, bound = reference(A, B, C, 1.0, 1.0, False, False)
            check(run(sim, A, B, C, beta=1.0, config=dict(cfg, split_k=2)), ref, bound,
                  f"{cfg} split_k=2 {dtype} checked")


# ------------------------------------------------------------------------------ semantics
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False),
                                             (True, True)])
def test_transposes(sim, trans_a, trans_b):
    rng = np.random.default_rng(2)
    M, N, K = 9, 70, 17
    A = data(rng, (1, K, M) if trans_a else (1, M, K), np.float32)
    B = data(rng, (1, N, K) if trans_b else (1, K, N), np.float32)
    ref, bound = reference(A, B, None, 1.0, 0.0, trans_a, trans_b)
    check(run(sim, A, B, trans_a=trans_a, trans_b=trans_b), ref, bound)


def test_broadcast_batch_and_c_aliasing_out(sim):
    """stride 0 broadcasts A over the batch; C may be the output array itself."""
    rng = np.random.default_rng(3)
    A = data(rng, (1, 12, 10), np.float32)
    B = data(rng, (3, 10, 8), np.float32)
    C = data(rng, (3, 12, 8), np.float32)
    ref, bound = reference(A, B, C, 2.0, 0.75, False, False)
    out = C.copy()
    got = run(sim, A, B, out, alpha=2.0, beta=0.75, out=out)
    assert got is out
    check(out, ref, bound)


def test_beta_zero_does_not_read_c_and_k_zero(sim):
    rng = np.random.default_rng(4)
    A, B = data(rng, (1, 5, 6), np.float32), data(rng, (1, 6, 7), np.float32)
    C = np.full((1, 5, 7), np.nan, np.float32)
    ref, bound = reference(A, B, None, 1.0, 0.0, False, False)
    check(run(sim, A, B, C, beta=0.0), ref, bound, "beta=0 with NaN in C")
    A0, B0 = np.zeros((1, 5, 0), np.float32), np.zeros((1, 0, 7), np.float32)
    C = data(rng, (1, 5, 7), np.float32)
    got = run(sim, A0, B0, C, alpha=3.0, beta=0.5)
    np.testing.assert_allclose(got, 0.5 * C, rtol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 1, 300), (65, 1, 3), (2, 67, 9)])
def test_thin_shapes(sim, shape):
    M, N, K = shape
    rng = np.random.default_rng(M * 100 + N)
    A, B = data(rng, (1, M, K), np.float16), data(rng, (1, K, N), np.float16)
    ref, bound = reference(A, B, None, 1.0, 0.0, False, False)
    check(run(sim, A, B), ref, bound, f"M,N,K={shape}")


@pytest.mark.parametrize("tiles", shipped_tiles("gemm"), ids=tiles_id)
def test_transposed_operands_whole_tiles_two_orders_and_checked(sim, tiles):
    """Whole interior tiles of transposed operands take the vector staging
    (mk_gemm_tile.h mk_stage_trans_vec: 4-wide along the operand's own rows, stored a
    column at a time): every layout, both variants, a batch of 2, several K slices and a
    split-K run with an uneven last chunk, against float64; bit-identical in both fiber
    orders (float32) and clean under the checking mode (float16)."""
    bm, bn, bk = tiles[:3]
    M, N, K = 2 * bm + 3, 2 * bn + 5, 3 * bk + 4
    rng = np.random.default_rng(sum(tiles))
    for cfg in variants_of(tiles):
        for ta, tb in ((True, False), (False, True), (True, True)):
            for dtype, split in ((np.float32, 1), (np.float16, 2)):
                A = data(rng, (2, K, M) if ta else (2, M, K), dtype)
                B = data(rng, (2, N, K) if tb else (2, K, N), dtype)
                C = data(rng, (2, M, N), dtype)
                ref, bound = reference(A, B, C, 1.5, -0.5, ta, tb)
                c = dict(cfg, split_k=split)
                what = f"{c} ta={ta} tb={tb} {np.dtype(dtype).name}"
                two_orders_or_checked(sim, A, B, C, ref, bound, what, alpha=1.5, beta=-0.5,
                                      trans_a=ta, trans_b=tb, config=c)


@pytest.mark.parametrize("tiles", shipped_tiles("gemm"), ids=tiles_id)
def test_partial_last_k_slice_two_orders_and_checked(sim, tiles):
    """The last, partial K slice of interior tiles: 4-wide with the cut where K's end is
    4-aligned (A's vectors wholly past K not loaded, B's rows past K not loaded; metal/
    gemm.metal mk_gemm_vec_at), element by element where it is not (K = 4 mod 8 and 3 mod
    4 past whole slices), split-K with an uneven last chunk too: against float64,
    bit-identical in both fiber orders (float32) and clean under the checking mode
    (float16, which reports reads past a buffer)."""
    bm, bn, bk = tiles[:3]
    M, N = 2 * bm + 3, 2 * bn + 5
    rng = np.random.default_rng(sum(tiles) + 7)
    for cfg in variants_of(tiles):
        for K, split in ((3 * bk + 4, 1), (3 * bk + 3, 1), (5 * bk + 4, 2)):
            for dtype in DTYPES:
                A, B = data(rng, (2, M, K), dtype), data(rng, (2, K, N), dtype)
                C = data(rng, (2, M, N), dtype)
                ref, bound = reference(A, B, C, 1.5, -0.5, False, False)
                c = dict(cfg, split_k=split)
                what = f"{c} K={K} {np.dtype(dtype).name}"
                two_orders_or_checked(sim, A, B, C, ref, bound, what, alpha=1.5, beta=-0.5,
                                      config=c)


@pytest.mark.parametrize("variant", ["simd", "tiled"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_split_k(sim, variant, dtype):
    """Forced split_k (uneven last chunk) and the rule's own choice for small M, N with a
    long K both match float64, alpha/beta/C included."""
    rng = np.random.default_rng(5)
    M, N, K = 10, 12, 600
    A, B = data(rng, (2, M, K), dtype), data(rng, (2, K, N), dtype)
    C = data(rng, (2, M, N), dtype)
    ref, bound = reference(A, B, C, 0.5, 2.0, False, False)
    tiles = dict(variant=variant, BM=32, BN=32, BK=16, WM=2, WN=2)
    got = run(sim, A, B, C, alpha=0.5, beta=2.0, config=dict(tiles, split_k=4))
    assert sim.last_config["split_k"] == 4
    check(got, ref, bound, "split_k=4")
    A, B = data(rng, (1, 8, 2048), dtype), data(rng, (1, 2048, 8), dtype)
    ref, bound = reference(A, B, None, 1.0, 0.0, False, False)
    got = run(sim, A, B, config=tiles)
    assert sim.last_config["split_k"] > 1, "the rule should split a 8x8x2048 gemm"
    check(got, ref, bound, f"rule split_k={sim.last_config['split_k']}")


def test_split_k_rule_follows_the_core_count():
    """Unpinned split-K fills the GPU: a 256x256x4096 gemm (16 tiles of 64x64) is split on
    a 32-core M1 Max (4 chunks: 64 threadgroups, 2 per core), not on an 8-core M1; tall or
    short K, and grids that fill the cores already, are not split."""
    from mpskern.backends.gpu.context import gpu_cores
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2)
    assert spaces.split_k(cfg, 1, 256, 256, 4096, cores=32) == 4
    assert spaces.split_k(cfg, 1, 256, 256, 4096, cores=8) == 1
    assert spaces.split_k(cfg, 1, 8, 8, 2048, cores=8) == 8        # 1 tile: 8 chunks of 256
    assert spaces.split_k(cfg, 1, 256, 256, 200, cores=32) == 1    # K < max(M, N)
    assert spaces.split_k(cfg, 4, 256, 256, 4096, cores=32) == 1   # 64 tiles already
    assert spaces.split_k(dict(cfg, split_k=2), 1, 8, 8, 8, cores=1) == 2
    assert gpu_cores(dict(name="Apple M1 Max", family=7)) == 32
    assert gpu_cores(dict(name="mpskern simulator", family=9)) == peaks_cores(9)
    assert gpu_cores({}) == 8


def peaks_cores(family):
    from mpskern import peaks
    return peaks.chip(family).cores


def test_default_choice_is_recorded(sim):
    rng = np.random.default_rng(6)
    A, B = data(rng, (1, 4, 4), np.float32), data(rng, (1, 4, 4), np.float32)
    run(sim, A, B)
    cfg = sim.last_config
    assert cfg["level"] in ("exact", "bucket", "family", "generic")
    assert not spaces.problems("gemm", {k: cfg[k] for k in ("variant",) + TILE_KEYS}, sim.info)


def test_invalid_config_is_refused_with_reasons(sim):
    A = np.ones((1, 4, 4), np.float32)
    bad = dict(variant="simd", BM=64, BN=64, BK=12, WM=4, WN=4)
    with pytest.raises(ValueError, match="BK=12 is not a multiple of 8"):
        run(sim, A, A, config=bad)


def test_kernel_static_asserts_agree_with_the_rules(sim):
    """A configuration the rules reject (BM not a multiple of 8*WM) also fails to compile:
    the kernel's static_asserts and spaces.py state the same divisibility."""
    from mpskern import KernelCompileError
    with pytest.raises(KernelCompileError, match="MK_BM must be a multiple"):
        sim.pipeline("gemm_simd_f32", file="gemm.metal",
                     macros=dict(MK_BM=24, MK_BN=32, MK_BK=8, MK_WM=2, MK_WN=1))


# ------------------------------------------------------------------------------ tile space
def test_shipped_configs_are_valid_on_every_family():
    for op in ("gemm", "conv2d"):
        for f in FAMILIES:
            for dt in ("float32", "float16"):
                for e in db.family_defaults(f).for_op(op, dt):
                    assert spaces.problems(op, e.config, APPLE8) == [], (f, op, e.config)
                    assert e.provenance.get("measured") is False


def test_rules_name_each_device_limit():
    cfg = dict(variant="simd", BM=128, BN=128, BK=32, WM=4, WN=4)
    p = spaces.problems("gemm", cfg, APPLE8)
    assert any("threadgroup memory" in s and "32768" in s for s in p), p
    small = dict(APPLE8, max_threads_per_threadgroup=256, max_threadgroup_memory=16384)
    p = spaces.problems("gemm", dict(cfg, BM=64, BN=64, BK=16), small)
    assert any("512 threads" in s and "256" in s for s in p), p
    p = spaces.problems("gemm", dict(cfg, BM=64, BN=64, BK=16, WM=2, WN=2), APPLE8,
                        pipeline_max_threads=64)
    assert any("pipeline's 64" in s for s in p), p
    assert spaces.problems("gemm", dict(cfg, BM=40), APPLE8)[0].startswith("BM=40")
    assert "unknown keys" in spaces.problems("gemm", dict(cfg, XX=1), APPLE8)[0]
    assert spaces.problems("conv2d", dict(cfg, split_k=2), APPLE8), "conv2d has no split_k"


def test_smaller_limits_give_a_smaller_space():
    full = spaces.candidates("gemm", APPLE8)
    small = spaces.candidates("gemm", dict(APPLE8, max_threadgroup_memory=8192,
                                           max_threads_per_threadgroup=256))
    assert small and len(small) < len(full)
    assert all(spaces.threadgroup_memory("gemm", c) <= 8192 for c in small)
    assert all(spaces.threads("gemm", c) <= 256 for c in small)
    assert dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2) in full


def test_macros_and_kernel_names():
    cfg = dict(variant="tiled", BM=32, BN=64, BK=16, WM=1, WN=2)
    assert spaces.macros("gemm", cfg) == dict(MK_BM=32, MK_BN=64, MK_BK=16, MK_WM=1, MK_WN=2)
    assert spaces.SPACES["gemm"].kernel(cfg, np.float16) == "gemm_tiled_f16"
    assert spaces.SPACES["conv2d_depthwise"].kernel({"variant": "depthwise"}, _native.F32) \
        == "conv2d_depthwise_f32"


# ------------------------------------------------------------------------------ defaults
@pytest.fixture
def no_user_db(monkeypatch, tmp_path):
    """Dispatch sees no user tuning database (only packaged and generic levels)."""
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(tmp_path / "none.json"))


@pytest.mark.parametrize("family,tiles", [(7, (64, 64, 16, 2, 2)), (9, (64, 64, 16, 2, 2))])
def test_simulated_family_uses_its_packaged_default(sim, no_user_db, family, tiles):
    rng = np.random.default_rng(family)
    A, B = data(rng, (1, 33, 20), np.float32), data(rng, (1, 20, 40), np.float32)
    ref, bound = reference(A, B, None, 1.0, 0.0, False, False)
    try:
        sim.set_sim_options(family=family)
        assert sim.info["family"] == family
        check(run(sim, A, B), ref, bound)
        cfg = sim.last_config
    finally:
        sim.set_sim_options()
    assert cfg["level"] == "family" and tuple(cfg[k] for k in TILE_KEYS) == tiles


def test_smaller_device_limits_fall_back_to_a_fitting_default(sim, no_user_db):
    """The family default needs 16 KiB of threadgroup memory; a simulated device with
    8 KiB gets a generic configuration that fits, and the answer stays right."""
    rng = np.random.default_rng(8)
    A, B = data(rng, (1, 40, 24), np.float16), data(rng, (1, 24, 50), np.float16)
    ref, bound = reference(A, B, None, 1.0, 0.0, False, False)
    try:
        sim.set_sim_options(family=8, max_threadgroup_memory=8192)
        info = sim.info
        assert info["max_threadgroup_memory"] == 8192
        check(run(sim, A, B), ref, bound)
        cfg = sim.last_config
    finally:
        sim.set_sim_options()
    assert cfg["level"] == "generic"
    assert spaces.threadgroup_memory("gemm", cfg) <= 8192


@pytest.mark.parametrize("dtype", DTYPES)
def test_random_shapes_with_the_default_choice(sim, dtype):
    """Shapes, batches, transposes and alpha/beta drawn at random, default configuration."""
    rng = np.random.default_rng(99)
    for _ in range(6):
        M, N, K = (int(v) for v in rng.integers(1, 90, 3))
        batch = int(rng.integers(1, 4))
        ta, tb = bool(rng.integers(2)), bool(rng.integers(2))
        A = data(rng, (batch, K, M) if ta else (batch, M, K), dtype)
        B = data(rng, (int(rng.choice([1, batch])), N, K) if tb else (1, K, N), dtype)
        C = data(rng, (batch, M, N), dtype)
        alpha, beta = float(rng.uniform(-2, 2)), float(rng.choice([0.0, 1.0, -0.3]))
        ref, bound = reference(A, B, C, alpha, beta, ta, tb)
        check(run(sim, A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb), ref, bound,
              f"M,N,K={M},{N},{K} batch={batch} ta={ta} tb={tb}")


def test_pipeline_thread_limit_steps_down_unless_pinned():
    """Metal may give a register-heavy pipeline fewer threads than the device maximum:
    an unpinned configuration then steps down to a generic one that fits; a pinned one
    is refused with the reason."""
    from types import SimpleNamespace

    from mpskern.backends.gpu.context import pipelines

    class Fake:
        limits = APPLE8
        built = []

        def compiled(self, kernel, file, macros=None):
            self.built.append((kernel, macros))
            return SimpleNamespace(name=kernel, max_threads=64)

    ctx = Fake()
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2)     # 128 threads

    def kernels(c):
        return [(spaces.SPACES["gemm"].kernel(c, np.float32), spaces.threads("gemm", c))]
    got, level, (pipe,) = pipelines(ctx, "gemm", np.float32, (1, 64, 64, 64), cfg, "family",
                                    kernels)
    assert level == "generic" and spaces.threads("gemm", got) <= 64
    assert pipe.name == "gemm_simd_f32" and len(ctx.built) == 2
    with pytest.raises(ValueError, match="pipeline's 64"):
        pipelines(ctx, "gemm", np.float32, (1, 64, 64, 64), cfg, "forced", kernels)


def test_simd_kernels_hold_no_output_tile(sim):
    """96x96x32 once fitted only the tiled kernel (the simd one staged its 36 KiB output
    tile in threadgroup memory); fragments now go straight to device memory, so the simd
    kernel needs only the padded A and B slices (26 KiB at float32) and runs it."""
    cfg = dict(variant="simd", BM=96, BN=96, BK=32, WM=2, WN=3)   # 48 accumulators per lane
    assert spaces.problems("gemm", cfg, sim.info) == []
    assert spaces.threadgroup_memory("gemm", cfg) == 4 * (96 * 36 + 32 * 100)
    rng = np.random.default_rng(10)
    for dtype in DTYPES:
        A, B = data(rng, (1, 100, 72), dtype), data(rng, (1, 72, 97), dtype)
        ref, bound = reference(A, B, None, 1.0, 0.0, False, False)
        check(run(sim, A, B, config=cfg), ref, bound)
        assert sim.last_config["kernel"].startswith("gemm_simd_")


# ------------------------------------------------------------------------------ public API
def test_public_api_runs_these_kernels_on_sim_checked(sim, no_user_db):
    """mpskern.matmul / mpskern.gemm with backend="sim" go through this encoder and kernels
    (the path backend="metal" takes), here under the checking mode."""
    import mpskern
    rng = np.random.default_rng(12)
    a, b = data(rng, (2, 3, 20, 17), np.float32), data(rng, (17, 30), np.float32)
    c = data(rng, (20, 30), np.float16)
    try:
        sim.set_sim_options(check_mode=True)
        got = mpskern.matmul(a, b, backend="sim")
        assert sim.last_config["kernel"].startswith("gemm_")
        ref = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        a16, b16 = a[0, 0].astype(np.float16), b.T.astype(np.float16).copy()
        got = mpskern.gemm(a16, b16, c, alpha=0.5, beta=2.0, trans_b=True, backend="sim")
        ref, bound = reference(a16[None], b16[None], c[None], 0.5, 2.0, False, True)
        check(got[None], ref, bound)
        assert sim.last_config["kernel"] == "gemm_simd_f16"
    finally:
        sim.set_sim_options()
