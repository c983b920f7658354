"""conv2d kernels (metal/conv2d.metal) on the simulator through the GPU encoder
(mpskern/backends/gpu/conv2d.py): implicit GEMM (simd and tiled) for every shipped tile
configuration and dtype, the depthwise kernel, and the 1x1-as-GEMM path, against the
float64 references of mpskern/reference.py, in two fiber orders (bit-identical) and under the
checking mode. Shapes stay small: the simulator is slow."""
import numpy as np
import pytest

from mpskern import _native
from simtools import checked, sim  # noqa: F401  (sim: fixture)
from mpskern.backends.gpu import conv2d as conv_op
from mpskern.backends.gpu import conv2d_halo as halo_op
from mpskern.tuning import spaces
from test_gpu_gemm import DTYPES, TILE_KEYS, UNIT, shipped_tiles, tiles_id, variants_of

import refs

CODE = {np.dtype(np.float32): _native.F32, np.dtype(np.float16): _native.F16}
SFX = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}
ACT = {"relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}     # metal/mk_args.h MK_ACT_*


def pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def make_args(x, w, bias, stride, padding, dilation, groups):
    """mk_conv2d_args; padding an int/pair (symmetric) or "same" (extra at the end)."""
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    if padding == "same":
        ph, pw = (dh * (R - 1)) // 2, (dw * (S - 1)) // 2     # torch: the extra one at the end
        P, Q = H, W
    else:
        ph, pw = pair(padding)
        P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
        Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    return dict(N=N, C=C, H=H, W=W, K=K, R=R, S=S, P=P, Q=Q, stride_h=sh, stride_w=sw,
                pad_h=ph, pad_w=pw, dil_h=dh, dil_w=dw, groups=groups,
                has_bias=int(bias is not None), activation=0)


def run(be, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, config=None,
        act=None):
    args = make_args(x, w, bias, stride, padding, dilation, groups)
    args["activation"] = ACT.get(act, 0)
    y = np.full((args["N"], args["K"], args["P"], args["Q"]), np.nan, x.dtype)
    be.execute("conv2d", args, CODE[x.dtype], x, w, bias, y, config=config)
    return y


def reference(x, w, bias, stride, padding, dilation, groups):
    """(float64 result, per-element error bound: float accumulation over the C/g*R*S
    products plus the rounding of the stored result)."""
    y = refs.conv2d(x, w, bias, stride, padding, dilation, groups)
    mag = refs.conv2d(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                      None if bias is None else np.abs(bias), stride, padding, dilation, groups)
    terms = w.shape[1] * w.shape[2] * w.shape[3]
    return y, 4 * 2.0 ** -24 * (terms + 2) * mag + UNIT[x.dtype] * np.abs(y) + 1e-30


def check(got, ref, bound, what=""):
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements wrong, first at "
                           f"{np.argwhere(bad)[0].tolist()}: got {got[bad][0]}, want {ref[bad][0]}")


def data(rng, shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def two_orders(be, *a, **kw):
    outs = []
    try:
        for order in ("forward", "reverse"):
            be.set_sim_options(order=order)
            outs.append(run(be, *a, **kw))
    finally:
        be.set_sim_options()
    assert np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8)), \
        "forward and reverse fiber orders differ"
    return outs[0]


# ------------------------------------------------------------------------------ implicit GEMM
CASES = [(v, t, dt) for t in shipped_tiles("conv2d") for v in ("simd", "tiled") for dt in DTYPES]
GENERAL = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)


@pytest.mark.parametrize("variant,tiles,dtype", CASES,
                         ids=[f"{v}-{tiles_id(t)}-{np.dtype(d).name}" for v, t, d in CASES])
def test_implicit_gemm_shipped_config_two_orders(sim, variant, tiles, dtype):
    """Groups, stride, padding, dilation and bias at once; edge tiles in every GEMM
    dimension (Kg=3, N*P*Q=70, Cg*R*S=36: several K slices)."""
    cfg = dict(variant=variant, **dict(zip(TILE_KEYS, tiles)))
    rng = np.random.default_rng(sum(tiles))
    x, w = data(rng, (2, 8, 9, 7), dtype), data(rng, (6, 4, 3, 3), dtype)
    bias = data(rng, (6,), np.float32)
    assert conv_op.route(make_args(x, w, bias, **GENERAL)) == "conv2d"
    got = two_orders(sim, x, w, bias, config=cfg, **GENERAL)
    assert sim.last_config["kernel"] == f"conv2d_{variant}_{SFX[np.dtype(dtype)]}"
    check(got, *reference(x, w, bias, **GENERAL), what=str(cfg))


@pytest.mark.parametrize("tiles", shipped_tiles("conv2d"), ids=tiles_id)
def test_shipped_configs_pass_the_checking_mode(sim, tiles):
    rng = np.random.default_rng(2)
    for dtype in checked(sim, DTYPES):
        for cfg in variants_of(tiles):
            x, w = data(rng, (1, 3, 6, 5), dtype), data(rng, (5, 3, 3, 3), dtype)
            got = run(sim, x, w, None, 1, 1, 1, 1, config=cfg)
            check(got, *reference(x, w, None, 1, 1, 1, 1), what=f"{cfg} checked")


def test_same_padding_with_an_even_kernel(sim):
    """'same' with a 2x4 kernel pads one more at the bottom/right than at the top/left."""
    rng = np.random.default_rng(4)
    x, w = data(rng, (1, 2, 5, 6), np.float32), data(rng, (3, 2, 2, 4), np.float32)
    check(run(sim, x, w, padding="same"), *reference(x, w, None, 1, "same", 1, 1))


def test_default_choice_without_config(sim):
    rng = np.random.default_rng(5)
    x, w = data(rng, (1, 3, 5, 5), np.float16), data(rng, (4, 3, 3, 3), np.float16)
    bias = data(rng, (4,), np.float32)
    check(run(sim, x, w, bias), *reference(x, w, bias, 1, 0, 1, 1))
    assert sim.last_config["level"] in ("exact", "bucket", "family", "generic")


# ------------------------------------------------------------------------------ depthwise
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [c["threads"] for c in spaces.shipped("conv2d_depthwise")])
def test_depthwise_two_orders(sim, dtype, threads):
    """groups == C with 2 outputs per channel, stride, padding, dilation, bias."""
    rng = np.random.default_rng(threads)
    x, w = data(rng, (2, 3, 8, 9), dtype), data(rng, (6, 1, 3, 3), dtype)
    bias = data(rng, (6,), np.float32)
    kw = dict(stride=2, padding=1, dilation=(2, 1), groups=3)
    assert conv_op.route(make_args(x, w, bias, **kw)) == "conv2d_depthwise"
    got = two_orders(sim, x, w, bias, config=dict(variant="depthwise", threads=threads), **kw)
    assert sim.last_config["kernel"] == f"conv2d_depthwise_{SFX[np.dtype(dtype)]}"
    check(got, *reference(x, w, bias, **kw))


def test_depthwise_passes_the_checking_mode(sim):
    rng = np.random.default_rng(6)
    try:
        sim.set_sim_options(check_mode=True)
        for dtype in DTYPES:
            x, w = data(rng, (1, 4, 5, 5), dtype), data(rng, (4, 1, 3, 3), dtype)
            check(run(sim, x, w, None, 1, 1, 1, 4), *reference(x, w, None, 1, 1, 1, 4))
    finally:
        sim.set_sim_options()


# ------------------------------------------------------------------------------ 1x1 as GEMM
@pytest.mark.parametrize("dtype", DTYPES)
def test_1x1_runs_as_gemm(sim, dtype):
    rng = np.random.default_rng(7)
    x, w = data(rng, (2, 5, 4, 6), dtype), data(rng, (7, 5, 1, 1), dtype)
    assert conv_op.route(make_args(x, w, None, 1, 0, 1, 1)) == "gemm"
    got = two_orders(sim, x, w)
    assert sim.last_config["kernel"].startswith("gemm_")
    check(got, *reference(x, w, None, 1, 0, 1, 1))


def test_1x1_with_bias_or_stride_uses_implicit_gemm(sim):
    rng = np.random.default_rng(8)
    x, w = data(rng, (1, 5, 4, 6), np.float32), data(rng, (7, 5, 1, 1), np.float32)
    bias = data(rng, (7,), np.float32)
    assert conv_op.route(make_args(x, w, bias, 1, 0, 1, 1)) == "conv2d"
    assert conv_op.route(make_args(x, w, None, 2, 0, 1, 1)) == "conv2d"
    check(run(sim, x, w, bias), *reference(x, w, bias, 1, 0, 1, 1))
    assert sim.last_config["kernel"].startswith("conv2d_")


def test_route():
    x = np.zeros((1, 4, 6, 6), np.float32)
    assert conv_op.route(make_args(x, np.zeros((4, 1, 3, 3)), None, 1, 1, 1, 4)) == "conv2d_depthwise"
    assert conv_op.route(make_args(x, np.zeros((8, 2, 3, 3)), None, 1, 1, 1, 2)) == "conv2d"
    assert conv_op.route(make_args(x, np.zeros((8, 4, 1, 1)), None, 1, 0, 1, 1)) == "gemm"
    assert conv_op.route(make_args(x, np.zeros((8, 4, 1, 1)), None, 1, 1, 1, 1)) == "conv2d"
    one = np.zeros((1, 1, 6, 6), np.float32)
    assert conv_op.route(make_args(one, np.zeros((3, 1, 3, 3)), None, 1, 0, 1, 1)) == "conv2d"


def test_simd_kernel_holds_no_output_tile(sim):
    """96x96x32 once fitted only the tiled kernel (the simd one staged its output tile and
    a column table); now both run it."""
    for variant in ("simd", "tiled"):
        cfg = dict(variant=variant, BM=96, BN=96, BK=32, WM=2, WN=3)   # 48 accumulators per lane
        assert spaces.problems("conv2d", cfg, sim.info) == []
        rng = np.random.default_rng(11)
        x, w = data(rng, (1, 4, 11, 10), np.float32), data(rng, (5, 4, 3, 3), np.float32)
        check(run(sim, x, w, None, 1, 1, 1, 1, config=cfg), *reference(x, w, None, 1, 1, 1, 1))


def test_public_api_runs_these_kernels_on_sim_checked(sim, monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(tmp_path / "none.json"))   # packaged defaults only
    import mpskern
    rng = np.random.default_rng(13)
    x, w = data(rng, (2, 4, 7, 8), np.float16), data(rng, (6, 2, 3, 3), np.float16)
    bias = data(rng, (6,), np.float32)
    xd, wd = data(rng, (1, 3, 6, 6), np.float32), data(rng, (3, 1, 3, 3), np.float32)
    try:
        sim.set_sim_options(check_mode=True)
        got = mpskern.conv2d(x, w, bias, stride=2, padding="valid", groups=2, backend="sim")
        assert sim.last_config["kernel"] == "conv2d_simd_f16"
        check(got, *reference(x, w, bias, 2, 0, 1, 2))
        got = mpskern.conv2d(xd, wd, None, padding="same", groups=3, backend="sim")
        assert sim.last_config["kernel"] == "conv2d_depthwise_f32"
        check(got, *reference(xd, wd, None, 1, "same", 1, 3))
    finally:
        sim.set_sim_options()


# ------------------------------------------------------------------------------ 2-D tiles + halo
# (shape of x, of w, stride, padding, dilation, whether the call takes the halo): W not a
# multiple of 4 (rows at every alignment, realigned 4-wide: VEC 2), more channels than one
# slice holds (C=20: 12 + 8 at 3x3), two images; W a multiple of 4 (chunks stored 4-wide in
# place: 8 + 8 + 4 channels, 5x5, dilation 2 with a partial last tile); stride 2 (column
# phases), a 7x7/2 stem, a dilation whose one channel just fits tiles.HALO_CAP (one channel
# per slice) and one that does not (1-D tiles instead), and one whose taps' columns fit but
# whose rows of whole 4-wide chunks (W a multiple of 4) do not (42 x 48 > 1788: 1-D tiles;
# the cap once counted its 42 x 42 columns and the staging overran Hs).
HALO_CASES = [((2, 20, 16, 13), (16, 20, 3, 3), 1, 1, 1, True),
              ((2, 20, 16, 16), (16, 20, 3, 3), 1, 1, 1, True),
              ((1, 5, 12, 12), (8, 5, 5, 5), 1, 2, 1, True),
              ((1, 3, 20, 20), (8, 3, 3, 3), 1, 1, 2, True),
              ((1, 6, 31, 30), (8, 6, 3, 3), 2, 1, 1, True),
              ((1, 3, 31, 30), (8, 3, 7, 7), 2, 3, 1, True),
              ((1, 2, 48, 47), (8, 2, 3, 3), 1, 0, 16, True),
              ((1, 2, 52, 52), (8, 2, 3, 3), 1, 0, 22, False),
              ((1, 2, 48, 48), (8, 2, 3, 3), 1, 0, 17, False)]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,halo", HALO_CASES,
                         ids=[f"{c[0]}-{c[1]}-s{c[2]}p{c[3]}d{c[4]}" for c in HALO_CASES])
def test_halo_tiles_two_orders_and_checked(sim, xs, ws, stride, padding, dilation, halo):
    """The 2-D tile path (metal/conv2d.metal MK_CONV_HALO) against float64, bit-identical in
    both fiber orders (float32) and clean under the checking mode (float16: every halo,
    staging and Bs access in bounds, no race)."""
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2, tiles=3)
    rng = np.random.default_rng(sum(xs) + dilation)
    bias = data(rng, (ws[0],), np.float32)
    args = make_args(np.zeros(xs), np.zeros(ws), bias, stride, padding, dilation, 1)
    assert conv_op.uses_halo(args, cfg) is halo
    assert (halo_op.halo_plane(args, 64) <= conv_op.tiles.HALO_CAP) is halo
    x, w = data(rng, xs, np.float32), data(rng, ws, np.float32)
    got = two_orders(sim, x, w, bias, stride, padding, dilation, 1, config=cfg)
    assert sim.last_config["tiles"] == (2 if halo else 1)
    check(got, *reference(x, w, bias, stride, padding, dilation, 1), what="float32")
    for dtype in checked(sim, [np.float16]):
        x, w = data(rng, xs, dtype), data(rng, ws, dtype)
        got = run(sim, x, w, bias, stride, padding, dilation, 1, config=cfg)
        check(got, *reference(x, w, bias, stride, padding, dilation, 1), what="float16 checked")


# Each staging mode of the halo (conv2d_halo.stage_mode) against float64, both variants (the
# simd kernel's fragments and the tiled kernel's B slices read the halo): stride 2 split to
# the column phases in place (3: W a multiple of 4, the first column at every 4-alignment
# al = -pad & 3, odd C, more channels than a slice, dilation 2) or realigned first (4: odd W,
# per-axis strides), stride-1 realigned rows of 5 chunks (2: 7x7, whole rows per SIMD-group,
# two images, several channel slices); bias and an activation; odd H everywhere.
MODES = [((1, 5, 19, 32), (8, 5, 3, 3), 2, 1, 1, 3, "relu"),
         ((2, 3, 33, 40), (12, 3, 7, 7), 2, 3, 1, 3, None),
         ((1, 3, 21, 36), (8, 3, 3, 3), 2, 2, 2, 3, "silu"),
         ((1, 9, 17, 24), (8, 9, 5, 5), 2, 0, 1, 3, None),
         ((1, 5, 23, 29), (8, 5, 3, 3), 2, 2, 2, 4, "gelu"),
         ((1, 3, 15, 21), (8, 3, 5, 5), (1, 2), 2, 1, 4, None),
         ((1, 3, 31, 39), (16, 3, 7, 7), 2, 3, 1, 4, "relu"),
         ((2, 5, 17, 19), (8, 5, 7, 7), 1, 3, 1, 2, None),
         ((1, 13, 15, 15), (8, 13, 7, 7), 1, 3, 1, 2, "gelu_tanh")]


@pytest.mark.parametrize("variant", ["simd", "tiled"])
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,mode,act", MODES,
                         ids=[f"{c[0]}-{c[1]}-s{c[2]}p{c[3]}d{c[4]}-vec{c[5]}" for c in MODES])
def test_halo_stage_modes_two_orders_and_checked(sim, variant, xs, ws, stride, padding,
                                                 dilation, mode, act):
    """float32 bit-identical in both fiber orders, float16 under the checking mode (races,
    bounds, barrier divergence, uninitialised halo reads) in random fiber order."""
    from mpskern.reference import activate
    cfg = dict(variant=variant, BM=32, BN=64, BK=16, WM=2, WN=2, tiles=3)
    rng = np.random.default_rng(sum(xs) + sum(ws) + mode)
    bias = data(rng, (ws[0],), np.float32)
    args = make_args(np.zeros(xs), np.zeros(ws), bias, stride, padding, dilation, 1)
    assert halo_op.stage_mode(args, cfg["BN"]) == mode and conv_op.uses_halo(args, cfg)
    conv = (stride, padding, dilation, 1)
    x, w = data(rng, xs, np.float32), data(rng, ws, np.float32)
    ref, bound = reference(x, w, bias, *conv)
    got = two_orders(sim, x, w, bias, *conv, config=cfg, act=act)
    assert sim.last_config["tiles"] == 2, sim.last_config
    check(got, activate(ref, act) if act else ref, bound, "float32")
    for dtype in checked(sim, [np.float16]):
        x, w = data(rng, xs, dtype), data(rng, ws, dtype)
        ref, bound = reference(x, w, bias, *conv)
        got = run(sim, x, w, bias, *conv, config=cfg, act=act)
        check(got, activate(ref, act) if act else ref, bound, "float16 checked")


def test_halo_stage_modes():
    """How the halo is staged (conv2d_halo.stage_mode, the layout's VEC): stride 1, 4-wide
    in place with W a multiple of 4 (1), else realigned when a row takes at most 32 chunks
    (2: 3x3, 5x5, dilation 2, 7x7's 5 chunks, dilation 16's 11); stride 2, split to the two
    column phases in place (3, W a multiple of 4) or realigned (4); element by element where
    a row takes more than 32 chunks (dilation 60) and at stride 3 (0)."""
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2, tiles=3)
    for xs, ws, stride, dil, mode in (((1, 4, 16, 16), (8, 4, 3, 3), 1, 1, 1),
                                      ((1, 4, 16, 13), (8, 4, 3, 3), 1, 1, 2),
                                      ((1, 4, 29, 29), (8, 4, 5, 5), 1, 1, 2),
                                      ((1, 4, 29, 30), (8, 4, 3, 3), 1, 2, 2),
                                      ((1, 4, 29, 29), (8, 4, 7, 7), 1, 1, 2),
                                      ((1, 2, 48, 47), (8, 2, 3, 3), 1, 16, 2),
                                      ((1, 1, 8, 135), (8, 1, 1, 3), 1, 60, 0),
                                      ((1, 4, 31, 32), (8, 4, 3, 3), 2, 1, 3),
                                      ((1, 3, 40, 40), (8, 3, 7, 7), 2, 1, 3),
                                      ((1, 4, 31, 30), (8, 4, 3, 3), 2, 1, 4),
                                      ((1, 3, 39, 39), (8, 3, 7, 7), 2, 1, 4),
                                      ((1, 4, 31, 32), (8, 4, 3, 3), 3, 1, 0)):
        args = make_args(np.zeros(xs), np.zeros(ws), None, stride, 1, dil, 1)
        assert halo_op.stage_mode(args, 64) == mode, (xs, ws, stride, dil)
        assert halo_op.halo_layout(args, cfg)["VEC"] == mode, (xs, ws, stride, dil)


def test_halo_layout_fits_the_cap_wherever_halo_tiles_run():
    """Every call that takes 2-D tiles gets a halo layout whose channel slice fits the
    threadgroup array the kernel declares (tiles.HALO_CAP elements): strides 1-3, dilations
    up to 24, W at every 4-alignment, 3x3/5x5/7x7/1x3, float32 and float16."""
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2, tiles=3)
    ran = 0
    for r, s_ in ((3, 3), (5, 5), (7, 7), (1, 3)):
        for stride in (1, 2, 3):
            for dil in range(1, 25):
                for w in (44, 45, 46, 47, 48):
                    args = make_args(np.zeros((1, 2, 64, w)), np.zeros((8, 2, r, s_)), None,
                                     stride, 0, dil, 1)
                    if args["P"] < 1 or args["Q"] < 1 or not conv_op.uses_halo(args, cfg):
                        continue
                    ran += 1
                    for dtype in ("float32", "float16"):
                        lay = halo_op.halo_layout(args, cfg, dtype)
                        assert lay["CB"] * lay["PL"] <= conv_op.tiles.HALO_CAP, (r, stride, dil,
                                                                               w, dtype, lay)
    assert ran > 500, ran


def test_halo_tiles_by_default_where_possible(sim):
    """2-D tiles run by default (tiles=2, also when a configuration does not say) where they
    can and pay: not for 1x1 stride-1 unpadded calls (plain staging), nor when the staging
    leaves no room for the halo, nor (2 only) where the halo stages more than
    AUTO_HALO_PER_TAP elements per tap; tiles=1 asks for the 1-D gather, tiles=3 for 2-D
    tiles wherever they run; tiles=4 is refused."""
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2)
    r56 = make_args(np.zeros((1, 4, 56, 56)), np.zeros((64, 4, 3, 3)), None, 1, 1, 1, 1)
    assert conv_op.uses_halo(r56, cfg)
    assert conv_op.uses_halo(r56, dict(cfg, tiles=2))
    assert conv_op.uses_halo(r56, dict(cfg, tiles=3))
    assert not conv_op.uses_halo(r56, dict(cfg, tiles=1))
    # 2: not where the halo costs more than the gather (3x3/2: 289 elements for 9 taps)
    s2 = make_args(np.zeros((1, 4, 56, 56)), np.zeros((64, 4, 3, 3)), None, 2, 1, 1, 1)
    assert not conv_op.uses_halo(s2, cfg) and conv_op.uses_halo(s2, dict(cfg, tiles=3))
    stem = make_args(np.zeros((1, 3, 64, 64)), np.zeros((8, 3, 7, 7)), None, 2, 3, 1, 1)
    assert conv_op.uses_halo(stem, cfg)
    one = make_args(np.zeros((1, 4, 9, 9)), np.zeros((8, 4, 1, 1)), np.zeros(8), 1, 0, 1, 1)
    assert not conv_op.uses_halo(one, dict(cfg, tiles=2))
    big = dict(cfg, BM=96, BN=96, BK=32, WM=2, WN=3, tiles=2)   # 26.6 KB of staging
    assert spaces.problems("conv2d", big, sim.info) == []
    assert not conv_op.uses_halo(r56, big)
    assert any("tiles=4" in p for p in spaces.problems("conv2d", dict(cfg, tiles=4), sim.info))
    rng = np.random.default_rng(3)
    x, w = data(rng, (1, 2, 9, 10), np.float32), data(rng, (4, 2, 3, 3), np.float32)
    check(run(sim, x, w, None, 1, 1, 1, 1), *reference(x, w, None, 1, 1, 1, 1))
    assert sim.last_config["tiles"] == 2
    check(run(sim, x, w, None, 1, 1, 1, 1, config=dict(cfg, tiles=1)),
          *reference(x, w, None, 1, 1, 1, 1))
    assert sim.last_config["tiles"] == 1


# ----------------------------------------------------------------------- weight rows and biases
# Kd = Cg*R*S not a multiple of 4 (27): each weight row padded to 28 on the host
# (conv_op.weight_rows) so slices load 4-wide; Kg = 35 per group (not a multiple of 4: an
# edge tile of rows past Kg, each group's biases padded to 36 by conv_op.bias_rows for the
# simd kernel's float4 bias reads); both variants, 1-D and 2-D tiles.
WROWS = [dict(variant=v, BM=32, BN=32, BK=16, WM=1, WN=1, tiles=t)
         for v, t in (("simd", 3), ("simd", 1), ("tiled", 1))]


def test_weight_rows_are_padded_to_4():
    w = np.arange(2 * 3 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 3)
    rows, pitch = conv_op.weight_rows(w, None)
    assert pitch == 28 and rows.shape == (2, 28)
    assert np.array_equal(rows[:, :27], w.reshape(2, 27)) and not rows[:, 27:].any()
    w4 = np.zeros((5, 4, 1, 1), np.float16)
    assert conv_op.weight_rows(w4, None)[0] is w4 and conv_op.weight_rows(w4, None)[1] == 4
    b = np.arange(1, 71, dtype=np.float32)          # 2 groups of 35 -> pitch 36
    rows, pitch = conv_op.bias_rows(b, 2)
    assert pitch == 36 and rows.shape == (2, 36) and not rows[:, 35:].any()
    assert np.array_equal(rows[:, :35].ravel(), b)
    b8 = np.ones(8, np.float32)
    got, pitch = conv_op.bias_rows(b8, 2)
    assert got is b8 and pitch == 4


@pytest.mark.parametrize("cfg", WROWS, ids=lambda c: f"{c['variant']}-tiles{c['tiles']}")
def test_padded_weight_rows_and_bias_rows_two_orders_and_checked(sim, cfg):
    rng = np.random.default_rng(7)
    x, w = data(rng, (1, 6, 11, 10), np.float32), data(rng, (70, 3, 3, 3), np.float32)
    bias = data(rng, (70,), np.float32)
    got = two_orders(sim, x, w, bias, 1, 1, 1, 2, config=cfg)
    assert sim.last_config["tiles"] == (2 if cfg["tiles"] == 3 else 1)
    check(got, *reference(x, w, bias, 1, 1, 1, 2), what=f"{cfg} float32")
    for dtype in checked(sim, [np.float16]):
        x, w = data(rng, x.shape, dtype), data(rng, w.shape, dtype)
        got = run(sim, x, w, bias, 1, 1, 1, 2, config=cfg)
        check(got, *reference(x, w, bias, 1, 1, 1, 2), what=f"{cfg} float16 checked")


# ------------------------------------------------------------------------------ split-K
# Input channels split over threadgroups (conv_op.split_k: float partials, then
# conv2d_splitk_reduce_* adds them, the bias once and the activation once, after the whole
# sum): C = 13 (chunks of 4: 4 + 4 + 4 + 1, an odd last one), a stride, padding and two
# groups; 2-D tiles from the halo and the 1-D gather, both variants.
SPLITS = [dict(variant=v, BM=32, BN=32, BK=16, WM=2, WN=2, tiles=t, split_k=4)
          for v, t in (("simd", 3), ("simd", 1), ("tiled", 3), ("tiled", 1))]


@pytest.mark.parametrize("cfg", SPLITS, ids=lambda c: f"{c['variant']}-tiles{c['tiles']}")
def test_split_k_two_orders_and_checked(sim, cfg):
    """Split-K against float64: every activation (applied after the full sum: relu of a
    sum of split sums differs from the sum of their relus), the bias once; bit-identical
    in both fiber orders (float32); float16 accumulates the partials in float (its bound
    allows one rounding of the result) and is clean under the checking mode."""
    from mpskern.reference import activate
    rng = np.random.default_rng(41)
    kw = dict(stride=(1, 2), padding=1, groups=2)
    x, w = data(rng, (2, 26, 9, 11), np.float32), data(rng, (10, 13, 3, 3), np.float32)
    bias = (4 * data(rng, (10,), np.float32)).astype(np.float32)   # visible if added per split
    ref, bound = reference(x, w, bias, kw["stride"], 1, 1, 2)
    for act in (None, "relu", "gelu", "gelu_tanh", "silu"):
        got = two_orders(sim, x, w, bias, config=cfg, act=act, **kw)
        assert sim.last_config["split_k"] == 4, sim.last_config
        want = activate(ref, act) if act else ref
        check(got, want, bound, f"{cfg} {act}")
    for dtype in checked(sim, [np.float16]):
        x16, w16 = data(rng, x.shape, dtype), data(rng, w.shape, dtype)
        ref16, bound16 = reference(x16, w16, bias, kw["stride"], 1, 1, 2)
        got = run(sim, x16, w16, bias, config=cfg, act="relu", **kw)
        check(got, activate(ref16, "relu"), bound16, f"{cfg} float16 checked")


def test_split_k_rows_past_a_split_read_as_zero(sim):
    """A 1x1 convolution with bias (the plain staging of x) split into chunks of 20
    channels inside 16-deep slices: the slice reaching past a split's last channel must
    read those rows as 0, not as the next split's x (an Inf there gave NaN where torch
    gives Inf)."""
    rng = np.random.default_rng(43)
    x, w = data(rng, (1, 40, 8, 8), np.float32), data(rng, (8, 40, 1, 1), np.float32)
    w = np.abs(w) + 0.1                           # every product with the Inf is +Inf
    x[0, 25, 3, 5] = np.inf                       # in the second split's channels
    bias = data(rng, (8,), np.float32)
    for variant in ("simd", "tiled"):
        cfg = dict(variant=variant, BM=32, BN=32, BK=16, WM=2, WN=2, tiles=1, split_k=2)
        got = run(sim, x, w, bias, config=cfg)
        assert sim.last_config["split_k"] == 2, sim.last_config
        ref, bound = reference(x, w, bias, 1, 0, 1, 1)
        fin = np.isfinite(ref)
        assert np.array_equal(got[~fin], ref[~fin]), (variant, got[~fin])
        assert not np.isnan(got).any(), variant
        check(np.where(fin, got, 0), np.where(fin, ref, 0), bound, variant)


def test_split_k_rule_follows_the_core_count():
    """Unpinned, conv2d splits its channels like gemm (tiles.split_k) when the grid leaves
    GPU cores idle and K = Cg*R*S is long: 512->512 3x3 at 7x7 (8 threadgroups of 64x64)
    in 2 on an 8-core GPU (16 threadgroups: 2 per core), 4 on 16 cores; a grid that fills
    the cores (3x3 64->64 at 56x56) or a short K (20 -> 24 channels at 13x13: K = 180)
    not; chunks are whole channel slices (multiples of 4 channels), none empty; a pinned
    split_k is kept (up to one split per 4-channel chunk)."""
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2)
    a512 = make_args(np.zeros((1, 512, 7, 7)), np.zeros((512, 512, 3, 3)), None, 1, 1, 1, 1)
    assert conv_op.split_k(a512, cfg, 8, 12, cores=8) == (2, 264)
    assert conv_op.split_k(a512, cfg, 8, 12, cores=16) == (4, 132)
    assert conv_op.split_k(a512, cfg, 8, 0, cores=8) == (2, 256)
    a56 = make_args(np.zeros((1, 64, 56, 56)), np.zeros((64, 64, 3, 3)), None, 1, 1, 1, 1)
    assert conv_op.split_k(a56, cfg, 49, 12, cores=8)[0] == 1
    odd = make_args(np.zeros((1, 20, 13, 13)), np.zeros((24, 20, 3, 3)), None, 1, 1, 1, 1)
    assert conv_op.split_k(odd, cfg, 4, 20, cores=8)[0] == 1
    assert conv_op.split_k(odd, dict(cfg, split_k=16), 4, 20, cores=8) == (5, 4)
    assert conv_op.split_k(odd, dict(cfg, split_k=2), 4, 20, cores=8) == (2, 12)


# ----------------------------------------------------------------------------- small grids
def test_small_grid_rule_takes_smaller_tiles():
    """A default configuration whose grid would leave GPU cores idle (fewer than 2
    threadgroups per core) and that split-K does not split (K = Cg*R*S below 512) takes
    smaller tiles (tiles.small_grid): 3x3 20->24 at 13x13 (4 threadgroups of 64x64) gets
    16 x 32 tiles on 8 cores (16 threadgroups), 16 x 16 on 10 (28, as near 20 as it gets);
    a grid that fills the cores, a call split-K splits (512->512 at 7x7), a configuration
    pinned by the caller or tuned for the shape keep theirs; every tile kept is valid."""
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2)
    odd = make_args(np.zeros((1, 20, 13, 13)), np.zeros((24, 20, 3, 3)), None, 1, 1, 1, 1)

    class Ctx:
        limits = dict(family=7, max_threadgroup_memory=32768, max_threads_per_threadgroup=1024)
    shape = conv_op.key(odd, "conv2d")
    assert conv_op.grid_groups(odd, cfg) == 4
    got = conv_op.small_grid(Ctx, odd, cfg, shape)
    assert (got["BM"], got["BN"], got["BK"], got["WM"], got["WN"]) == (16, 32, 16, 2, 2), got
    assert conv_op.grid_groups(odd, got) == 16 and spaces.problems("conv2d", got, Ctx.limits) == []
    assert conv_op.tiles.small_grid(cfg, lambda c: conv_op.grid_groups(odd, c), 10) == dict(
        cfg, BM=16, BN=16)
    a56 = make_args(np.zeros((1, 64, 56, 56)), np.zeros((64, 64, 3, 3)), None, 1, 1, 1, 1)
    assert conv_op.small_grid(Ctx, a56, cfg, conv_op.key(a56, "conv2d")) == cfg
    a512 = make_args(np.zeros((1, 512, 7, 7)), np.zeros((512, 512, 3, 3)), None, 1, 1, 1, 1)
    assert conv_op.small_grid(Ctx, a512, cfg, conv_op.key(a512, "conv2d")) == cfg
    assert conv_op.small_grid(Ctx, odd, dict(cfg, split_k=1), shape) == dict(cfg, split_k=1)
    # WM x WN SIMD-groups each keep at least one 8 x 8 fragment: 1x1 ones go down to 16
    one = dict(cfg, WM=1, WN=1)
    assert conv_op.tiles.small_grid(one, lambda c: 64 // c["BM"] * (64 // c["BN"]), 64) == dict(
        one, BM=16, BN=16)
    wide = dict(cfg, WN=4)          # BN stays a multiple of 8 x 4
    assert conv_op.tiles.small_grid(wide, lambda c: 64 // c["BM"] * (64 // c["BN"]), 64) == dict(
        wide, BM=16, BN=32)
    assert conv_op.tiles.small_grid(cfg, lambda c: 1, 8) == cfg     # nothing helps: kept


def test_small_grid_default_runs_two_orders_and_checked(sim):
    """The default on a small grid (3x3 20->24 at 13x13: smaller tiles than the family's
    64 x 64) is what runs, matches float64 bit-identically in both fiber orders (float32)
    and is clean under the checking mode (float16); a pinned 64 x 64 still runs as pinned."""
    rng = np.random.default_rng(61)
    x, w = data(rng, (1, 20, 13, 13), np.float32), data(rng, (24, 20, 3, 3), np.float32)
    bias = data(rng, (24,), np.float32)
    got = two_orders(sim, x, w, bias, 1, 1, 1, 1)
    c = sim.last_config
    assert c["level"] in conv_op.RULE_LEVELS and c["BM"] * c["BN"] < 64 * 64, c
    check(got, *reference(x, w, bias, 1, 1, 1, 1), what=str(c))
    for dtype in checked(sim, [np.float16]):
        x16, w16 = data(rng, x.shape, dtype), data(rng, w.shape, dtype)
        got = run(sim, x16, w16, bias, 1, 1, 1, 1)
        assert sim.last_config["BN"] == c["BN"], sim.last_config
        check(got, *reference(x16, w16, bias, 1, 1, 1, 1), what="float16 checked")
    pinned = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2)
    check(run(sim, x, w, bias, 1, 1, 1, 1, config=pinned), *reference(x, w, bias, 1, 1, 1, 1))
    assert (sim.last_config["BM"], sim.last_config["BN"]) == (64, 64)
