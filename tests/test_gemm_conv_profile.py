"""The gemm and conv2d kernels at their shipped defaults, measured by the simulator's
profiling mode (issue 16 part C's targets): no threadgroup bank conflicts under the
32 x 4-byte bank model, unchecked vector loads on interior tiles, no integer
division by a runtime value inside a loop, at most 64 accumulators per lane, and (model)
at least 8 resident SIMD-groups per core on Apple7/8. Shapes have interior threadgroups
(not first or last along a grid dimension) and stay small: every threadgroup is profiled."""
import numpy as np
import pytest

from mpskern import sim
from mpskern.profiling import run as prun
from mpskern.sim import profile_build
from mpskern.tuning import tiles

pytestmark = [pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler"),
              pytest.mark.skipif(profile_build.clang()[0] is None, reason="profiling needs clang")]

CASES = [(op, shape, fam, dt) for op, shape in (("gemm", "M=320,N=320,K=1024"),
                                                ("conv2d", "1,32,16,16,192,3,pad=1"),
                                                ("conv2d", "1,256,16,16,192,1"))
         for fam in (7, 9) for dt in ("float32", "float16")]


@pytest.fixture
def packaged_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(tmp_path / "none.json"))


@pytest.mark.parametrize("op,shape,family,dtype", CASES,
                         ids=[f"{o}-{s}-apple{f}-{d}" for o, s, f, d in CASES])
def test_shipped_defaults_meet_the_counters(packaged_defaults, op, shape, family, dtype):
    prof, info = prun.profile_op(op, shape, dtype, family=family, max_groups=0)
    cfg = info["config"]
    assert cfg["level"] == "family" and cfg["variant"] == "simd", cfg
    assert tiles.accumulators(cfg) <= tiles.MAX_ACCUMULATORS
    (d,) = prof.dispatches
    assert d["kernel"] == f"{op}_simd_{'f32' if dtype == 'float32' else 'f16'}"
    where = f"{op} {shape} apple{family} {dtype} {d['kernel']}"
    tg = d["threadgroup"]
    for kind in ("load", "store"):
        assert tg[kind]["bank_factor"] == pytest.approx(1.0), (where, kind, tg[kind])
    assert d["int_div"]["in_loops"] == 0, (where, d["int_div"])
    interior = d["device"]["interior"]
    assert interior["loads"] > 0, where
    # gemm: every A and B slice of an interior tile is loaded 4-wide, C 2-wide (float16: 4
    # bytes, not counted as vector: C's share of the loads is 64/K of the A and B ones); a
    # 1x1 stride-1 convolution's im2col is x itself, staged like B (bias: once per row);
    # 3x3 and 5x5: the weights 4-wide, x staged as the halo of 2-D tiles 4-wide (the 1-D
    # gather of the default before them: 13-15%)
    assert interior["vector"] >= 0.9, (where, interior)
    if op == "conv2d":
        assert cfg["tiles"] == (1 if shape.endswith(",1") else 2), (where, cfg)
    (est,) = prun.model_of(prof, info).dispatches
    if family in (7, 8):
        assert est.simdgroups_per_core >= 8, (where, est)


def test_staging_half_as_half_halves_threadgroup_memory(packaged_defaults):
    """float16 stages its slices as half: the measured threadgroup memory is that of the
    padded float32 staging (tiles._tg_memory) over two, with 8-half (16-byte) padding."""
    for dtype, elem, pad in (("float32", 4, 4), ("float16", 2, 8)):
        prof, info = prun.profile_op("gemm", "M=128,N=128,K=32", dtype, family=7, max_groups=0)
        c = info["config"]
        want = elem * (c["BM"] * (c["BK"] + pad) + c["BK"] * (c["BN"] + pad))
        assert prof.dispatches[0]["tg_memory"] == want, (dtype, c)
        assert np.dtype(dtype).itemsize == elem


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv2d_default_not_slower_than_the_gather(packaged_defaults, dtype):
    """The shipped conv2d default (2-D tiles from the halo where they pay) is modelled no
    slower than the 1-D gather it replaced (tiles=1, same tiles otherwise), on Apple7 and
    Apple9, at 3x3 stride 1 and at a 7x7/2 stem (C=3)."""
    for shape in ("1,32,16,16,192,3,pad=1", "1,3,40,40,64,7,stride=2,pad=3"):
        prof, info = prun.profile_op("conv2d", shape, dtype, family=7, max_groups=0)
        assert info["config"]["tiles"] == 2, info["config"]
        old = {k: info["config"][k] for k in ("variant", "BM", "BN", "BK", "WM", "WN")}
        prof1, info1 = prun.profile_op("conv2d", shape, dtype, config=dict(old, tiles=1),
                                       family=7, max_groups=0)
        for fam in (7, 9):
            new = prun.model_of(prof, dict(info, family=fam)).estimate_ms
            gather = prun.model_of(prof1, dict(info1, family=fam)).estimate_ms
            assert new <= gather, (shape, dtype, fam, new, gather)


HALO = [(shape, fam, dt) for shape in ("1,32,16,16,192,3,pad=1", "1,24,28,28,64,3,pad=1")
        for fam in (7, 9) for dt in ("float32", "float16")]


@pytest.mark.parametrize("shape,family,dtype", HALO,
                         ids=[f"{s}-apple{f}-{d}" for s, f, d in HALO])
def test_halo_tiles_load_x_at_vector_width(packaged_defaults, shape, family, dtype):
    """conv2d with 2-D tiles (tiles=2, metal/conv2d.metal MK_CONV_HALO): x is staged as an
    input halo with aligned 4-wide loads (and, with W a multiple of 4, 4-wide stores in
    place), so >= 90% of an interior tile's device loads are vectors (the 1-D gather:
    10-15%); the simd fragments read straight from the halo and the staging stores have no
    bank conflict (gpu/conv2d.py halo_layout chooses the pitches for it); no division in a
    loop; >= 8 SIMD-groups per core on Apple7."""
    cfg = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2, tiles=2)
    prof, info = prun.profile_op("conv2d", shape, dtype, config=cfg, family=family,
                                 max_groups=0)
    assert info["config"]["tiles"] == 2, info["config"]
    (d,) = prof.dispatches
    where = f"conv2d {shape} tiles=2 apple{family} {dtype}"
    tg = d["threadgroup"]
    for kind in ("load", "store"):
        assert tg[kind]["bank_factor"] == pytest.approx(1.0), (where, kind, tg[kind])
    assert d["int_div"]["in_loops"] == 0, (where, d["int_div"])
    assert d["device"]["interior"]["vector"] >= 0.9, (where, d["device"]["interior"])
    (est,) = prun.model_of(prof, info).dispatches
    if family in (7, 8):
        assert est.simdgroups_per_core >= 8, (where, est)


# (the stem at 80x80: 25 threadgroups of 64x64, enough for 10 cores, so tiles.small_grid keeps
# the family's tiles and some threadgroups are interior)
ODD = [(shape, fam, dt) for shape in ("1,3,80,80,64,7,stride=2,pad=3", "1,5,29,29,24,3,pad=1",
                                      "1,8,29,29,32,5,pad=2", "1,8,29,29,32,3,pad=2,dil=2")
       for fam in (7, 9) for dt in ("float32", "float16")]


@pytest.mark.parametrize("shape,family,dtype", ODD, ids=[f"{s}-apple{f}-{d}" for s, f, d in ODD])
def test_odd_weights_and_biases_load_at_vector_width(packaged_defaults, shape, family, dtype):
    """The shipped default where Kd = C*R*S is not a multiple of 4 (the 7x7/2 stem's 147, C=5
    at 3x3: 45) or the output channels fill no whole row tile (K=24, 32 < BM=64): weight rows
    padded to a multiple of 4 on the host (gpu/conv2d.py weight_rows) and rows past K not
    loaded, so the weight slices load 4-wide (they loaded scalar: 3-9% vector in all); the
    biases one float4 a lane (conv2d.metal mk_conv_biases, was one scalar per fragment row)."""
    prof, info = prun.profile_op("conv2d", shape, dtype, family=family, max_groups=0)
    assert info["config"]["tiles"] == 2, info["config"]
    (d,) = prof.dispatches
    where = f"conv2d {shape} apple{family} {dtype}"
    assert d["device"]["interior"]["loads"] > 0, where
    assert d["device"]["interior"]["vector"] >= 0.9, (where, d["device"]["interior"])
    assert d["int_div"]["in_loops"] == 0, (where, d["int_div"])


TRANS = [(ta, tb, fam, dt) for ta, tb in ((1, 0), (0, 1), (1, 1)) for fam in (7, 9)
         for dt in ("float32", "float16")]


@pytest.mark.parametrize("ta,tb,family,dtype", TRANS,
                         ids=[f"ta{a}-tb{b}-apple{f}-{d}" for a, b, f, d in TRANS])
def test_transposed_operands_load_at_vector_width(packaged_defaults, ta, tb, family, dtype):
    """gemm with A and/or B transposed, shipped default: the transposed slices load 4-wide
    along their own rows and are stored a column of 4 at a time, lanes on consecutive
    columns (mk_gemm_tile.h mk_stage_trans_vec), so interior loads stay >= 90% vectors
    (they were checked scalar loads: 0-22%) and those stores have no bank conflict (were
    1.5-3.0x)."""
    shape = f"M=320,N=320,K=1024,ta={ta},tb={tb}"    # (as CASES: no split-K)
    prof, info = prun.profile_op("gemm", shape, dtype, family=family, max_groups=0)
    assert info["config"]["variant"] == "simd", info["config"]
    (d,) = prof.dispatches
    where = f"gemm {shape} apple{family} {dtype}"
    assert d["device"]["interior"]["loads"] > 0, where
    assert d["device"]["interior"]["vector"] >= 0.9, (where, d["device"]["interior"])
    for kind in ("load", "store"):
        assert d["threadgroup"][kind]["bank_factor"] == pytest.approx(1.0), (where, kind)
    assert d["int_div"]["in_loops"] == 0, (where, d["int_div"])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_partial_k_slice_stages_at_vector_width(packaged_defaults, dtype):
    """gemm whose K (1000) ends in a partial 8-deep slice of the 16-deep default: that
    slice of A loads and stores 4-wide with the cut (metal/gemm.metal mk_gemm_vec_at),
    so its staging stores have no bank conflict (they were element by element, two
    16-element rows of A per instruction: 1.50x at those stores, 1.01x over the dispatch)."""
    shape = "M=320,N=320,K=1000"
    prof, info = prun.profile_op("gemm", shape, dtype, family=7, max_groups=0)
    assert info["config"]["level"] == "family", info["config"]
    (d,) = prof.dispatches
    where = f"gemm {shape} apple7 {dtype}"
    for kind in ("load", "store"):
        assert d["threadgroup"][kind]["bank_factor"] == pytest.approx(1.0), (where, kind)
    assert d["device"]["interior"]["vector"] >= 0.9, (where, d["device"]["interior"])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv2d_split_k_fills_the_cores(packaged_defaults, dtype):
    """A deep convolution with a small output (3x3 256->256 at 7x7: 4 threadgroups of 64x64
    for 8 Apple7 cores) splits its input channels by the core count (gpu/conv2d.py
    split_k): >= 8 resident SIMD-groups per core on Apple7 (it had 4: one threadgroup on
    half the cores), no division in a loop, the partials summed by conv2d_splitk_reduce_*,
    and modelled faster than the same tiles unsplit on Apple7 and Apple9."""
    shape = "1,256,7,7,256,3,pad=1"
    prof, info = prun.profile_op("conv2d", shape, dtype, family=7, max_groups=0)
    cfg = info["config"]
    assert cfg["level"] == "family" and cfg["split_k"] > 1, cfg
    sfx = "f32" if dtype == "float32" else "f16"
    assert [d["kernel"] for d in prof.dispatches] == [f"conv2d_simd_{sfx}",
                                                      f"conv2d_splitk_reduce_{sfx}"]
    for d in prof.dispatches:
        assert d["int_div"]["in_loops"] == 0, (d["kernel"], d["int_div"])
    est = prun.model_of(prof, info).dispatches[0]
    assert est.simdgroups_per_core >= 8, est
    pinned = {k: cfg[k] for k in ("variant", "BM", "BN", "BK", "WM", "WN", "tiles")}
    prof1, info1 = prun.profile_op("conv2d", shape, dtype, config=dict(pinned, split_k=1),
                                   family=7, max_groups=0)
    assert info1["config"]["split_k"] == 1 and len(prof1.dispatches) == 1
    assert prun.model_of(prof1, info1).dispatches[0].simdgroups_per_core < 8
    for fam in (7, 9):
        split = prun.model_of(prof, dict(info, family=fam)).estimate_ms
        whole = prun.model_of(prof1, dict(info1, family=fam)).estimate_ms
        assert split < whole, (dtype, fam, split, whole)



@pytest.mark.parametrize("family,dtype", [(f, d) for f in (7, 9) for d in ("float32", "float16")])
def test_conv2d_small_grid_fills_the_cores(packaged_defaults, family, dtype):
    """A convolution with a small output and a short K (3x3 20->24 at 13x13: K = 180,
    below split-K's 512; 4 threadgroups of 64x64) takes smaller tiles by the core count
    (tiles.small_grid): >= 8 resident SIMD-groups per core (it had 4) and modelled faster
    than the family's 64x64 pinned, no division in a loop, bank factor 1.0 on the loads."""
    shape = "1,20,13,13,24,3,pad=1"
    prof, info = prun.profile_op("conv2d", shape, dtype, family=family, max_groups=0)
    cfg = info["config"]
    assert cfg["level"] == "family" and cfg["BM"] * cfg["BN"] < 64 * 64, cfg
    (d,) = prof.dispatches
    assert d["int_div"]["in_loops"] == 0, d["int_div"]
    assert d["threadgroup"]["load"]["bank_factor"] == pytest.approx(1.0)
    (est,) = prun.model_of(prof, info).dispatches
    assert est.simdgroups_per_core >= 8, est
    big = dict(variant="simd", BM=64, BN=64, BK=16, WM=2, WN=2)
    prof1, info1 = prun.profile_op("conv2d", shape, dtype, config=big, family=family,
                                   max_groups=0)
    assert prun.model_of(prof1, info1).dispatches[0].simdgroups_per_core < 8
    assert prun.model_of(prof, info).estimate_ms < prun.model_of(prof1, info1).estimate_ms


UNALIGNED = [(shape, fam, dt) for shape in ("2,32,14,14,64,3,pad=1", "1,32,29,29,64,3,pad=1",
                                            "1,16,29,29,32,5,pad=2")
             for fam in (7, 9) for dt in ("float32", "float16")]


@pytest.mark.parametrize("shape,family,dtype", UNALIGNED,
                         ids=[f"{s}-apple{f}-{d}" for s, f, d in UNALIGNED])
def test_unaligned_rows_stage_the_halo_without_bank_conflicts(packaged_defaults, shape, family,
                                                              dtype):
    """Stride 1 with W not a multiple of 4 (each row of x at its own 4-alignment: W = 14,
    29): the halo's chunks load 4-wide and each 4-wide store is realigned from the lane's
    chunk and the next lane's (conv2d.metal VEC 2), so the staging stores have no bank
    conflict (element by element they had 1.18-1.36) and the loads stay vector."""
    prof, info = prun.profile_op("conv2d", shape, dtype, family=family, max_groups=0)
    _halo_without_bank_conflicts(prof, info)


def _halo_without_bank_conflicts(prof, info):
    """The one dispatch of a halo-tiled conv2d: no bank conflict, its loads (every one,
    edge threadgroups too: small grids may have no interior one) >= 90% vector, no
    division in a loop. Returns (its counters, a label)."""
    assert info["config"]["tiles"] == 2, info["config"]
    (d,) = prof.dispatches
    where = f"conv2d {info['shape']} apple{info['family']} {info['dtype']}"
    for kind in ("load", "store"):
        assert d["threadgroup"][kind]["bank_factor"] == pytest.approx(1.0), (where, kind)
    assert d["device"]["load"]["vector"] >= 0.9, (where, d["device"]["load"])
    assert d["int_div"]["in_loops"] == 0, (where, d["int_div"])
    return d, where


WIDE = [(shape, dt) for shape in ("1,8,29,29,32,5,pad=2", "1,8,29,29,32,3,pad=2,dil=2")
        for dt in ("float32", "float16")]


@pytest.mark.parametrize("shape,dtype", WIDE, ids=[f"{s}-{d}" for s, d in WIDE])
def test_wide_tap_fragment_reads_are_conflict_free(packaged_defaults, shape, dtype):
    """5x5 and dilated 3x3 (the layout search says their fragment reads from the halo have
    no bank conflict): the profiler counts 1.0 now that it pairs the lanes' executions from
    each barrier on (objc/sim/profile.cc; the lanes that skipped the rows past a channel
    slice had been paired with other lanes' next step: 1.01-1.02). The counter was wrong,
    not the kernel."""
    prof, info = prun.profile_op("conv2d", shape, dtype, family=7, max_groups=0)
    assert info["config"]["tiles"] == 2, info["config"]
    (d,) = prof.dispatches
    load = d["threadgroup"]["load"]
    assert load["bank_factor"] == pytest.approx(1.0), (shape, dtype, load)


SEVEN = [(shape, fam, dt) for shape in ("1,3,80,80,64,7,stride=2,pad=3", "1,3,79,79,64,7,stride=2,pad=3",
                                        "1,8,29,29,32,7,pad=3", "1,8,28,28,32,7,pad=3")
         for fam in (7, 9) for dt in ("float32", "float16")]


@pytest.mark.parametrize("shape,family,dtype", SEVEN,
                         ids=[f"{s}-apple{f}-{d}" for s, f, d in SEVEN])
def test_seven_by_seven_halos_stage_without_bank_conflicts(packaged_defaults, shape, family,
                                                           dtype):
    """The 7x7/2 stem (W = 80, a multiple of 4: conv2d.metal VEC 3, each aligned chunk split
    to the two column phases as two 2-wide stores), a 7x7/2 at W = 79 (VEC 4: realigned by
    shuffles first) and a 7x7 stride-1 at W = 29 (VEC 2 with rows of 5 chunks), SIMD-groups
    staging whole rows: no bank conflict on the staging stores (element by element they had
    1.06-1.50), the loads vector, no division in a loop, >= 8 SIMD-groups per core on
    Apple7; at W = 28 (VEC 1, in place) too: rows of 5 chunks over consecutive lanes had
    no conflict-free pitches (float16 1.04)."""
    prof, info = prun.profile_op("conv2d", shape, dtype, family=family, max_groups=0)
    d, where = _halo_without_bank_conflicts(prof, info)
    assert d["device"]["interior"]["loads"] > 0, where
    assert d["device"]["interior"]["vector"] >= 0.9, (where, d["device"]["interior"])
    (est,) = prun.model_of(prof, info).dispatches
    if family in (7, 8):
        assert est.simdgroups_per_core >= 8, (where, est)


@pytest.mark.parametrize("family", [7, 9])
def test_halo_channel_slices_keep_the_weights_4_aligned(packaged_defaults, family):
    """The halo layout search prefers pitches whose channel slices start the weights
    4-aligned (gpu/conv2d_halo.py: 5x5 dilation 2 with 8 channels at float32 had taken
    3-channel slices, 75 weight columns each, so the later slices' weights loaded
    scalar: 21-23% vector); the interior loads stay >= 90% vector. (Its staging stores
    keep a 1.04 factor: no 4-aligned slice of it has conflict-free pitches, and the search
    puts the weights' vector loads first.)"""
    shape = "1,8,28,28,32,5,pad=4,dil=2"
    prof, info = prun.profile_op("conv2d", shape, "float32", family=family, max_groups=0)
    assert info["config"]["tiles"] == 2, info["config"]
    (d,) = prof.dispatches
    assert d["device"]["interior"]["loads"] > 0
    assert d["device"]["interior"]["vector"] >= 0.9, d["device"]["interior"]
    assert d["threadgroup"]["load"]["bank_factor"] == pytest.approx(1.0)
