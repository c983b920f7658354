"""conv2d on the GPU backends (metal/conv2d.metal, and metal/gemm.metal for 1x1).

Three paths, by the problem (route() says which, and so which tuning space applies):
  conv2d_depthwise  groups == C > 1: conv2d_depthwise_*, one thread per output element
  gemm              1x1, stride 1, no padding, one group, no bias: the image batch is a
                    batched GEMM  y[n] (K x H*W) = w (K x C) @ x[n] (C x H*W)
  conv2d            everything else: implicit GEMM (conv2d_simd_* / conv2d_tiled_*) per
                    group with im2col gathered into threadgroup memory, never stored
"""
import functools

import numpy as np

from mpskern import _native, structs
from mpskern._errors import Unsupported
from mpskern.backends.gpu import gemm as _gemm
from mpskern.backends.gpu.context import (MAX_GRID_YZ, activation_macros, cdiv, configure,
                                          gpu_cores, helper_threads, nothing, pipelines)
from mpskern.tuning import spaces, tiles
from mpskern.tuning.lookup import dtype_name

FILE = "conv2d.metal"
FLOAT_BYTES = 4
REDUCE_THREADS = 256       # conv2d_splitk_reduce's threadgroup (fewer if its pipeline says so)
INT32_LIMIT = 2 ** 31      # the kernels index in int32


def route(args):
    """The op whose kernels and tuning space run this convolution."""
    a = args
    if a["groups"] == a["C"] and a["C"] > 1:
        return "conv2d_depthwise"
    if (a["R"] == 1 and a["S"] == 1 and a["stride_h"] == 1 and a["stride_w"] == 1
            and a["pad_h"] == 0 and a["pad_w"] == 0 and a["groups"] == 1
            and not a["has_bias"] and a["P"] == a["H"] and a["Q"] == a["W"]):
        return "gemm"
    return "conv2d"


def gemm_args(args):
    """The batched GEMM a 1x1 stride-1 convolution is: w (K x C) shared, x[n] (C x H*W)."""
    a = args
    hw = a["H"] * a["W"]
    return structs.gemm_args(a["K"], hw, a["C"], batch=a["N"], stride_b=a["C"] * hw,
                             activation=a["activation"])


def key(args, op):
    """The shape key of the tuning lookup for path `op`: conv2d its GEMM view
    (groups, Kg, N*P*Q, Cg*R*S); conv2d_depthwise (N, K, P, Q)."""
    a = args
    if op == "conv2d_depthwise":
        return (a["N"], a["K"], a["P"], a["Q"])
    g = a["groups"]
    return (g, a["K"] // g, a["N"] * a["P"] * a["Q"], a["C"] // g * a["R"] * a["S"])


# mk_conv_layout: the halo's (halo_layout), the weights' and biases' pitches, split-K
LAYOUT_FIELDS = ("HLD", "PL", "H2", "ES", "CB", "HR", "NV", "SPAN", "VEC", "WLD", "BLD",
                 "SPLIT", "CHUNK")
BANKS = 32                # the bank model the layout is chosen for: 32 x 4 bytes


def _worst(words_sets):
    """Under the bank model, the largest (cycles the most-loaded bank needs / the minimum)
    over SIMD-group accesses given as sets of 4-byte words."""
    worst = 1.0
    for words in words_sets:
        if words:
            per = {}
            for w in words:
                per[w % BANKS] = per.get(w % BANKS, 0) + 1
            worst = max(worst, max(per.values()) / -(-len(words) // BANKS))
    return worst


def _fragment_reads(rs, taps, hld, pl, h2, es, word):
    """The word sets of mk_conv_halo_step's fragment reads: 8 consecutive im2col rows from
    any start x 4 consecutive pixels (.x: pixels 0-3, .y: 4-7); `taps`: im2col row ->
    (channel, halo row, tap column)."""
    for k0 in range(2 * rs):
        for e in (0, 4):
            words = set()
            for kd in range(k0, k0 + 8):
                c, r, u = taps(kd)
                col = (u & 1) * h2 + (u >> 1) if h2 else u
                words.update((c * pl + r * hld + col + (q + e) * es) // word for q in range(4))
            yield words


def _stage_stores(hr, nv, hld, pl, word, cb):
    """The word sets of VEC staging stores (mk_conv_halo_stage): 32 consecutive (row,
    channel, chunk) items per SIMD-group (chunks fastest, then cb channels), each a 4-wide
    store at its chunk's place."""
    items = cb * hr * nv
    for i0 in range(0, items, 32):
        words = set()
        for i in range(i0, min(i0 + 32, items)):
            row, ch = divmod(i, nv)
            r, cl = divmod(row, cb)
            words.update((cl * pl + r * hld + 4 * ch + e) // word for e in range(4))
        yield words


def _channels(pl, cap, bk, cg):
    """Channels per slice: whole BK slices of im2col rows where that fits, else a multiple
    of 4 channels (so every slice of the weights starts 4-aligned)."""
    cb = max(1, cap // pl)
    return min(cb - cb % bk if cb >= bk else (cb & ~3 if cb >= 4 else cb), cg)


def _rows(R, S, sh, sw, dh, dw, tp, vec):
    """(halo rows, columns, chunks per row, the stride-2 phase offset's least value, the
    least row width) of the halo of a tile of tp x 8 outputs; `vec`: chunks stored 4-wide in
    place (rows as whole chunks), else element by element (stride 2: two column phases)."""
    hr = (tp - 1) * sh + (R - 1) * dh + 1
    span = 7 * sw + (S - 1) * dw + 1
    nv = (span + 6) >> 2
    h2 = (span + 1) // 2 if sw == 2 and not vec else 0
    return hr, span, nv, h2, 2 * h2 if h2 else (4 * nv if vec else span)


def stage_mode(args, bn):
    """How the halo of a tile of bn/8 x 8 outputs is staged (mk_conv_layout VEC): 1 at
    stride 1 with W a multiple of 4 (every row of x 4-aligned alike: chunks stored 4-wide
    where they were loaded); 2 at stride 1 otherwise when a row's chunks divide a
    SIMD-group (each 4-wide store realigned from the lane's chunk and the next lane's);
    else 0 (element by element; stride 2 in two column phases)."""
    a = args
    if a["stride_w"] != 1:
        return 0
    if a["W"] % 4 == 0:
        return 1
    nv = _rows(a["R"], a["S"], 1, 1, a["dil_h"], a["dil_w"], bn // 8, 2)[2]
    return 2 if 32 % nv == 0 else 0


@functools.lru_cache(maxsize=256)
def _layout(R, S, sh, sw, dh, dw, tp, cg, bk, elem, cap, mode):
    vec = mode != 0
    hr, span, nv, h2, width = _rows(R, S, sh, sw, dh, dw, tp, vec)
    es = 1 if h2 else sw
    word = 4 // elem

    def taps(kd):
        c, rs = divmod(kd, R * S)
        return c, (rs // S) * dh, (rs % S) * dw

    def cost(hld, pl, ph):
        reads = _worst(_fragment_reads(R * S, taps, hld, pl, ph, es, word))
        stores = _channels(pl, cap, bk, cg)
        return (reads, _worst(_stage_stores(hr, nv, hld, pl, word, stores)) if vec else 1.0)

    # the first row pitch, channel pitch and phase offset (in that order) whose fragment
    # reads (and VEC staging stores) are conflict-free, else the one with the fewest
    # conflicts; within `cap` (VEC: pitches in whole chunks)
    step = 4 if vec else 1
    best = None
    for hld in range(width, width + 9 * step, step):
        for ph in ((0,) if not h2 else range(h2, h2 + (hld - width) // 2 + 1)):
            for pl in range(-(-hr * hld // step) * step, hr * hld + 32, step):
                if pl > cap and best is not None:
                    break
                c = cost(hld, pl, ph)
                if best is None or c < best[0]:
                    best = (c, hld, pl, ph)
                if c == (1.0, 1.0):
                    break
            if best[0] == (1.0, 1.0):
                break
        if best[0] == (1.0, 1.0):
            break
    _, hld, pl, h2 = best
    if pl > cap:
        raise ValueError(f"conv2d halo: one channel's plane of {pl} elements exceeds the {cap} "
                         "staged (uses_halo should have refused this call: halo_plane)")
    return dict(HLD=hld, PL=pl, H2=h2, ES=es, CB=_channels(pl, cap, bk, cg), HR=hr, NV=nv,
                SPAN=span, VEC=mode)


def halo_layout(args, cfg, dtype="float32"):
    """The halo layout of a 2-D tile of BN/8 x 8 outputs (metal/conv2d.metal
    mk_conv_layout, buffer 5): rows, row and channel pitches, stride-2 phase offset, pixel
    step, channels per slice, chunks per row, columns, the staging mode (stage_mode). The
    pitches are searched so that the simd kernel's fragment reads and the 4-wide staging
    stores (modes 1 and 2: aligned, at their chunk's place) have no bank conflict (32 x
    4-byte banks)."""
    a = args
    return _layout(a["R"], a["S"], a["stride_h"], a["stride_w"], a["dil_h"], a["dil_w"],
                   cfg["BN"] // 8, max(1, a["C"] // a["groups"]), cfg["BK"],
                   int(np.dtype(dtype_name(dtype)).itemsize), tiles.HALO_CAP,
                   stage_mode(a, cfg["BN"]))


def weight_rows(w, args):
    """The weights as the implicit-GEMM kernels read them: K rows of Kd = Cg*R*S, each
    padded with zeros to a multiple of 4 elements (packed per call when Kd is not one: the
    stem's 147, an odd C), so every weight slice loads 4-wide (conv2d.metal mk_conv_vec_a).
    Returns (array, row pitch)."""
    return _rows_of_4(w, w.shape[0])


def bias_rows(bias, groups):
    """The biases as conv2d_simd reads them (mk_conv_biases: one float4 a lane): each
    group's Kg padded with zeros to a multiple of 4. Returns (array, group pitch)."""
    return _rows_of_4(bias, groups)


def _rows_of_4(a, n):
    """a's elements as n rows, each padded with zeros to a multiple of 4 (a itself when its
    rows already are). Returns (array, row pitch)."""
    width = a.size // n if n else 0
    pitch = -(-width // 4) * 4
    if pitch == width:
        return a, width
    rows = np.zeros((n, pitch), a.dtype)
    rows[:, :width] = a.reshape(n, width)
    return rows, pitch


def split_k(args, cfg, groups, slice_channels, cores):
    """(splits, input channels per split) of an implicit-GEMM call whose grid has `groups`
    threadgroups: the configuration's `split_k` or tiles.split_k's core-count rule over the
    GEMM view (M = Kg, N = N*P*Q, K = Cg*R*S). Chunks are whole halo channel slices
    (`slice_channels`, 0 without the halo) where a split holds one and they are multiples
    of 4, else multiples of 4 channels (so each split's first weight column stays
    4-aligned: mk_conv_vec_a); every split non-empty; 1 where the float partials would
    pass int32 indexing."""
    a = args
    cg, kg = a["C"] // a["groups"], a["K"] // a["groups"]
    want = max(1, tiles.split_k(cfg, a["groups"], kg, a["N"] * a["P"] * a["Q"],
                                cg * a["R"] * a["S"], cores=cores, groups=groups))
    cb = slice_channels
    unit = cb if cb and cb % 4 == 0 and cdiv(cg, want) >= cb else 4
    chunk = cdiv(cdiv(cg, unit), want) * unit
    split = cdiv(cg, chunk) if cg else 1
    if split * a["N"] * a["K"] * a["P"] * a["Q"] >= INT32_LIMIT:
        return 1, chunk
    return split, chunk


def halo_plane(args, bn, used=False):
    """Threadgroup elements one input channel's halo takes for a 2-D tile of bn/8 x 8
    outputs: its rows x its least row width as halo_layout stages it (stage_mode 1 and 2:
    whole 4-wide chunks), so the layout fits tiles.HALO_CAP when this does; `used`: the rows x
    the columns the taps read (what AUTO_HALO_PER_TAP weighs)."""
    a = args
    hr, span, _, _, width = _rows(a["R"], a["S"], a["stride_h"], a["stride_w"], a["dil_h"],
                                  a["dil_w"], bn // 8, stage_mode(a, bn))
    return hr * (span + (span & 1 if a["stride_w"] == 2 else 0) if used else width)


# tiles=2 (the default) takes 2-D tiles where one channel's halo is at most this many elements per
# im2col row (tap) it serves: the staging then costs less than the gather it replaces (the
# model: 3x3 stride 1 stages 11 per tap and is 1.2-1.45x faster; 7x7/2 9 per tap, 1.4x;
# 3x3/2 32 per tap, 1.0-1.2x slower; docs/kernels-gemm-conv.md)
AUTO_HALO_PER_TAP = 24


def uses_halo(args, cfg, max_memory=32768):
    """Whether an implicit-GEMM call takes 2-D tiles with the staged halo (MK_CONV_HALO 1).
    Its configuration's `tiles`: 1 never, 3 wherever they can run, 2 (the default) where
    they can run and one channel's halo is at most AUTO_HALO_PER_TAP elements per tap.
    They can run when the call is not 1x1 stride-1 unpadded (its im2col is x, staged 4-wide
    as it is), one channel's halo fits in tiles.HALO_CAP, threads and BK*BN/8 divide one
    another, and the staging (counted at float32, as conv2d.metal does) leaves room for the
    halo within `max_memory` bytes."""
    a, bn = args, cfg["BN"]
    mode = cfg.get("tiles", tiles.DEFAULT_TILES)
    if mode == 1:
        return False
    items, threads = cfg["BK"] * (bn // 8), spaces.threads("conv2d", cfg)
    if items % threads and threads % items:       # mk_conv_halo_slice's thread layout
        return False
    staging = max(spaces.threadgroup_memory("conv2d", dict(cfg, variant=v))
                  for v in ("simd", "tiled"))   # both kernels compile, as conv2d.metal counts
    if staging + FLOAT_BYTES * tiles.HALO_CAP > max_memory:
        return False
    plain = (a["R"] == 1 and a["S"] == 1 and a["stride_h"] == 1 and a["stride_w"] == 1
             and a["pad_h"] == 0 and a["pad_w"] == 0)
    if mode == 2 and halo_plane(a, bn, used=True) > AUTO_HALO_PER_TAP * a["R"] * a["S"]:
        return False
    return not plain and halo_plane(a, bn) <= tiles.HALO_CAP


def tile_grid(args, cfg, halo):
    """An implicit-GEMM call's grid before split-K: 2-D tiles of BN/8 x 8 outputs (`halo`),
    else BN consecutive outputs; by BM output channels; by group."""
    a, bn = args, cfg["BN"]
    cols = (a["N"] * cdiv(a["P"], bn // 8) * cdiv(a["Q"], 8) if halo
            else cdiv(a["N"] * a["P"] * a["Q"], bn))
    return cols, cdiv(a["K"] // a["groups"], cfg["BM"]), a["groups"]


def grid_groups(args, cfg, max_memory=32768):
    """Threadgroups of that grid, with the tiles uses_halo gives cfg."""
    g = tile_grid(args, cfg, uses_halo(args, cfg, max_memory))
    return g[0] * g[1] * g[2]


# the lookup levels whose configuration is a rule, not a choice for this shape: a grid
# of them that would not fill the GPU takes smaller tiles (tiles.small_grid)
RULE_LEVELS = ("family", "generic")


def small_grid(ctx, args, cfg, shape):
    """cfg, or (a default on a grid below 2 threadgroups per core that split-K does not
    split) tiles.small_grid's smaller tiles for it."""
    a, info = args, ctx.limits
    mem = info.get("max_threadgroup_memory") or 32768
    cores = gpu_cores(info)
    kg, cg = a["K"] // a["groups"], a["C"] // a["groups"]
    if tiles.split_k(cfg, a["groups"], kg, a["N"] * a["P"] * a["Q"], cg * a["R"] * a["S"],
                     cores=cores, groups=grid_groups(a, cfg, mem)) > 1:
        return cfg
    return tiles.small_grid(cfg, lambda c: grid_groups(a, c, mem), cores,
                            lambda c: not spaces.problems("conv2d", c, info, shape=shape))


def conv2d(ctx, args, dtype, x, w, bias, y, config=None):
    """Encoder (see context.py); `config` pins a configuration of the path's space
    (route(args))."""
    if args["has_bias"] and bias is None:
        raise ValueError("conv2d: args has_bias=1 but no bias array was given")
    op = route(args)
    if op == "gemm":
        return _gemm.gemm(ctx, gemm_args(args), dtype, w, x, None, y, config=config)
    shape = key(args, op)
    cfg, level = configure(ctx, op, dtype, shape, config)
    a = args
    total = a["N"] * a["K"] * a["P"] * a["Q"]
    if total == 0:
        return nothing(dict(cfg, kernel=spaces.SPACES[op].kernel(cfg, dtype), level=level))
    if op == "conv2d" and level in RULE_LEVELS:
        cfg = small_grid(ctx, a, cfg, shape)
    halo = None
    while True:      # the tile layout follows BN, which pipelines() may step down
        want = op == "conv2d" and uses_halo(
            a, cfg, ctx.limits.get("max_threadgroup_memory") or 32768)
        if want == halo:
            break
        halo = want
        extra = dict(activation_macros(a))
        if halo:
            extra.update(MK_CONV_HALO=1, MK_CONV_HALO_CAP=tiles.HALO_CAP)
        cfg, level, (pipe,) = pipelines(ctx, op, dtype, shape, cfg, level, lambda c: [
            (spaces.SPACES[op].kernel(c, dtype), spaces.threads(op, c))], extra)
    threads = spaces.threads(op, cfg)
    if op == "conv2d_depthwise":
        grid = (cdiv(total, threads), 1, 1)
    else:
        grid = tile_grid(a, cfg, halo)
        lay = halo_layout(a, cfg, dtype) if halo else dict.fromkeys(LAYOUT_FIELDS, 0)
        split, chunk = split_k(a, cfg, grid[0] * grid[1] * grid[2], lay["CB"] if halo else 0,
                               gpu_cores(ctx.limits))
        grid = grid[:2] + (grid[2] * split,)
        if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
            raise Unsupported(f"conv2d: grid {grid} exceeds {MAX_GRID_YZ} threadgroups along "
                              "y or z; split the channels into smaller calls")
    record = dict(cfg, kernel=pipe.name, level=level)
    if op == "conv2d":
        record["tiles"] = 2 if halo else 1    # what ran (uses_halo)
        record["split_k"] = split
    wld = bld = 0
    unpadded_bias = bias
    if op == "conv2d":
        w, wld = weight_rows(w, a)
        if bias is not None:
            bias, bld = bias_rows(bias, a["groups"])
    by = ctx.buffer(y, writable=True)
    # C == 0 leaves x and w empty (never read; Metal has no zero-length buffers); a
    # missing bias is never read either
    bx = ctx.buffer(x) if x.size else by
    bw = ctx.buffer(w) if w.size else by
    bb = ctx.buffer(bias) if bias is not None else by
    packed = _native.pack_args("conv2d", args)
    bindings = [bx, bw, bb, by, packed]
    run = [dict(pipeline=pipe, grid=grid, threadgroup=(threads, 1, 1), bindings=bindings)]
    if op == "conv2d":        # the halo layout (zeros without the halo: not read), WLD, split
        lay = dict(lay, WLD=wld, BLD=bld, SPLIT=split, CHUNK=chunk)
        layout = np.array([lay[k] for k in LAYOUT_FIELDS], np.int32).tobytes()
        # split: float partials [split][N][K][P][Q], then conv2d_splitk_reduce_* adds them,
        # the bias and the activation in the same command buffer
        partial = ctx.scratch(FLOAT_BYTES * split * total) if split > 1 else by
        bindings += [layout, partial]
        if split > 1:
            red = ctx.compiled(spaces.SPACES[op].kernel(cfg, dtype, variant="splitk_reduce"),
                               FILE, dict(spaces.macros(op, cfg), **extra))
            t = helper_threads(red, REDUCE_THREADS)
            bb0 = ctx.buffer(unpadded_bias) if unpadded_bias is not None else by
            run.append(dict(pipeline=red, grid=(cdiv(total, t), 1, 1), threadgroup=(t, 1, 1),
                            bindings=[partial, bb0, by, packed, layout]))
    return ctx.submit(run, record, outputs=[by])
