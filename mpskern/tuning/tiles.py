"""The tiled GEMM spaces (metal/gemm.metal, metal/conv2d.metal): gemm, conv2d's implicit
GEMM and its depthwise kernel, with their rules and rule-based defaults."""
from mpskern.tuning.space import FLOAT, Space


def _threads(c):
    return 32 * c["WM"] * c["WN"]


# Staged rows are padded by 16 bytes (4 floats) against bank conflicts (mk_gemm_tile.h MK_PAD)
PAD = 4


def _tg_memory(c):
    """Bytes of threadgroup memory of the variant at float32 (float16 stages half as half:
    about half of it): the A and B slices with padded rows (mk_gemm_tile.h MK_STAGE_BYTES,
    MK_TILED_STAGE_BYTES); the simd kernels store the output straight from the fragments."""
    if c["variant"] == "simd":
        return FLOAT * (c["BM"] * (c["BK"] + PAD) + c["BK"] * (c["BN"] + PAD))
    return FLOAT * (c["BK"] * (c["BM"] + PAD) + c["BK"] * (c["BN"] + PAD))


# The register rule: a lane holds at most this many output values. Apple GPUs give a thread
# up to ~128 32-bit registers before occupancy collapses (metal-benchmarks: register file
# ~208 KB per core, 384-3072 threads); 64 accumulators leave room for the operands,
# addresses and loop state (MLX's and MFA's GEMMs stay at or below 64).
MAX_ACCUMULATORS = 64


def accumulators(c):
    """Output values one lane holds (float registers): simd, 2 per 8x8 fragment of its
    (BM/WM) x (BN/WN) sub-tile; tiled, TM x TN (lanes as 4 rows x 8 columns)."""
    sm, sn = c["BM"] // c["WM"], c["BN"] // c["WN"]
    return (sm // 8) * (sn // 8) * 2 if c["variant"] == "simd" else (sm // 4) * (sn // 8)


def operands(c):
    """A and B values one lane holds per K step (simd: fragments of 2; tiled: TM + TN)."""
    sm, sn = c["BM"] // c["WM"], c["BN"] // c["WN"]
    return (sm // 8 + sn // 8) * 2 if c["variant"] == "simd" else sm // 4 + sn // 8


# conv2d's halo (metal/conv2d.metal MK_CONV_HALO; gpu/conv2d.py uses_halo, halo_layout):
# threadgroup elements for the input rows and columns a 2-D output tile reads, per slice of
# input channels (passed to the kernel as MK_CONV_HALO_CAP). 1788 hold 12 channels of a 3x3
# stride-1 tile of 8 x 8 outputs (10 rows of 10, pitch 122 against bank conflicts: 14 fit,
# rounded down to 4 channels; float16 16, whole BK slices) and keep a 64x64x16 float32 simd
# threadgroup at 12.3 KB: 5 resident per core on Apple7 (60 KB; 20 SIMD-groups, the
# register limit). A configuration whose staging leaves no room for it runs with 1-D tiles.
HALO_CAP = 1788
# conv2d's tile layout when a configuration does not say (its runtime key `tiles`): 2: 2-D
# tiles with the staged halo where they can run and pay (gpu/conv2d.py uses_halo), else
# 1-D; 1: 1-D; 3: 2-D wherever they can run.
DEFAULT_TILES = 2


def _conv_rules(c):
    """conv2d's gather (metal/conv2d.metal mk_conv_gather) gives each thread fixed columns:
    threads per threadgroup and BN must divide one another, and when threads are a multiple
    of BN, the rows one pass covers (threads / BN) divide BK or cover it."""
    out = _rules(c)
    if c.get("tiles", DEFAULT_TILES) not in (1, 2, 3):
        out.append(f"tiles={c['tiles']} is not 1 (1-D), 2 (2-D with a staged halo where it "
                   "pays) or 3 (2-D wherever it runs)")
    nt, bn, bk = _threads(c), c["BN"], c["BK"]
    if nt % bn == 0:
        if nt // bn < bk and bk % (nt // bn):
            out.append(f"{nt} threads cover {nt // bn} rows of the B slice per pass, which "
                       f"does not divide BK={bk}")
    elif bn % nt:
        out.append(f"{nt} threads per threadgroup and BN={bn} do not divide one another")
    return out


def _rules(c):
    out = []
    if c["BM"] % (8 * c["WM"]):
        out.append(f"BM={c['BM']} is not a multiple of 8*WM={8 * c['WM']}")
    if c["BN"] % (8 * c["WN"]):
        out.append(f"BN={c['BN']} is not a multiple of 8*WN={8 * c['WN']}")
    if c["BK"] % 8:
        out.append(f"BK={c['BK']} is not a multiple of 8")
    if not out and accumulators(c) > MAX_ACCUMULATORS:
        out.append(f"{accumulators(c)} accumulators per lane > {MAX_ACCUMULATORS} (they would "
                   "spill: use more SIMD-groups or a smaller tile)")
    return out


# Candidate values: multiples of 8 (fragments), up to what 32 KiB of float staging allows.
_TILES = dict(BM=(16, 32, 48, 64, 96, 128), BN=(16, 32, 48, 64, 96, 128),
              BK=(8, 16, 24, 32), WM=(1, 2, 4), WN=(1, 2, 4))

# Rule-based defaults, used when neither the user database nor the family's packaged
# defaults have a valid entry (an unknown GPU family, or a device with smaller limits).
# The first choice is a public heuristic, not measured by mpskern: MLX's steel GEMM uses
# 64x64x16 tiles with 2x2 SIMD-groups (mlx/backend/metal/matmul.cpp; MLX takes 1x2 for
# half, whose 64 accumulators per lane the model puts at 4 resident SIMD-groups per core on
# Apple7, so mpskern keeps 2x2); the rest step down until one fits the device.
_FALLBACKS = (dict(BM=32, BN=32, BK=16, WM=2, WN=2), dict(BM=32, BN=32, BK=8, WM=1, WN=1),
              dict(BM=16, BN=16, BK=8, WM=1, WN=1))


def _first(dtype):
    return dict(BM=64, BN=64, BK=16, WM=2, WN=2)


def _defaults(dtype, shape=None):
    # the tiled variant last: for GPUs without simdgroup matrices (spaces.problems)
    tiles = (_first(dtype),) + _FALLBACKS
    return [{"variant": "simd", **t} for t in tiles] + [{"variant": "tiled", **t} for t in tiles]


_SHIPPED = tuple([{"variant": "simd", **_first("float32")}]
                 + [{"variant": "simd", **t} for t in _FALLBACKS])
# depthwise: 256 threads, a common choice for one-thread-per-output kernels
_DEPTHWISE = tuple({"variant": "depthwise", "threads": t} for t in (256, 128, 64, 32))

SPACES = {
    "gemm": Space("gemm", "gemm.metal", ("simd", "tiled"), _TILES,
                  runtime=dict(split_k=(1, 2, 4, 8, 16)),
                  doc="BM x BN output tile per threadgroup, BK-deep K slices, WM x WN "
                      "SIMD-groups; split_k > 1 sums K chunks in a second pass",
                  threads=_threads, tg_memory=_tg_memory, rules=_rules, defaults=_defaults,
                  shipped=_SHIPPED),
    "conv2d": Space("conv2d", "conv2d.metal", ("simd", "tiled"), _TILES,
                    runtime=dict(tiles=(2, 1, 3), split_k=(1, 2, 4, 8, 16)),
                    doc="implicit GEMM: Kg x N*P*Q output per group, K = Cg*R*S; the "
                        "GEMM's tile parameters; tiles=2 (the default): 2-D output tiles, "
                        "fragments read from a staged input halo, where gpu/conv2d.py "
                        "uses_halo says it pays, else 1; 1: BN consecutive outputs, im2col "
                        "gathered from x; 3: 2-D wherever it runs; split_k > 1 sums input "
                        "channel chunks in a second pass (unpinned: tiles.split_k's rule)",
                    threads=_threads, tg_memory=_tg_memory,
                    rules=_conv_rules, defaults=_defaults, shipped=_SHIPPED),
    "conv2d_depthwise": Space("conv2d", "conv2d.metal", ("depthwise",), {},
                              runtime=dict(threads=(32, 64, 128, 256, 512, 1024)),
                              doc="one thread per output element; threads per threadgroup",
                              threads=lambda c: c.get("threads", 256), tg_memory=lambda c: 0,
                              defaults=lambda dtype, shape=None: list(_DEPTHWISE),
                              shipped=_DEPTHWISE),
}


def split_k(config, batch, M, N, K, cores=8, groups=None):
    """How many K chunks a gemm of this shape (or conv2d's implicit GEMM: M = Kg, N =
    N*P*Q, K = Cg*R*S, batch = groups) sums in parallel: the configuration's `split_k` when
    it has one, else a rule (mpskern's own, not measured; like MLX it splits only when the
    output has few tiles and K is at least max(M, N)): when the grid has fewer than 2
    threadgroups per GPU core (`cores`: gpu/context.py's gpu_cores; `groups`: the grid's
    threadgroups when they are not ceil(M/BM)*ceil(N/BN)*batch, as conv2d's 2-D tiles) and
    K is at least max(M, N) and 512, double the chunks while each keeps at least 256 of K,
    up to 16 chunks or 2 threadgroups per core."""
    if "split_k" in config:
        return int(config["split_k"])
    tiles = groups or -(-M // config["BM"]) * -(-N // config["BN"]) * batch
    target = 2 * max(1, int(cores))
    if tiles >= target or K < max(M, N) or K < 512:
        return 1
    s = 1
    while s < 16 and K // (2 * s) >= 256 and tiles * s < target:
        s *= 2
    return s


def small_grid(config, groups_of, cores=8, valid=lambda c: True):
    """Smaller tiles for a grid that would not fill the GPU (mpskern's own rule, not
    measured; for defaults, not for pinned or tuned configurations): when `groups_of(config)`
    (the grid's threadgroups) is below 2 per GPU core (`cores`), the BM x BN (each halved,
    kept a multiple of 8 x its SIMD-groups and at least 16; BK and the SIMD-groups stay)
    whose grid comes nearest that target, the largest tile among those, then the widest.
    Each SIMD-group keeps at least one 8x8 fragment; `valid(c)`: whether the space and the
    device accept c. A configuration with a `split_k` is returned as it is."""
    target = 2 * max(1, int(cores))
    if "split_k" in config or groups_of(config) >= target:
        return config

    def halvings(v, unit):
        out = [v]
        while v % 2 == 0 and v // 2 >= max(16, unit) and (v // 2) % unit == 0:
            v //= 2
            out.append(v)
        return out

    best = None
    for bm in halvings(config["BM"], 8 * config["WM"]):
        for bn in halvings(config["BN"], 8 * config["WN"]):
            c = dict(config, BM=bm, BN=bn)
            if c != config and not valid(c):
                continue
            key = (min(groups_of(c), target), bm * bn, bn)
            if best is None or key > best[0]:
                best = (key, c)
    return best[1]
