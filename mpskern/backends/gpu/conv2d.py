"""conv2d on the GPU backends (metal/conv2d.metal, and metal/gemm.metal for 1x1).

Three paths, by the problem (route() says which, and so which tuning space applies):
  conv2d_depthwise  groups == C > 1: conv2d_depthwise_*, one thread per output element
  gemm              1x1, stride 1, no padding, one group, no bias: the image batch is a
                    batched GEMM  y[n] (K x H*W) = w (K x C) @ x[n] (C x H*W)
  conv2d            everything else: implicit GEMM (conv2d_simd_* / conv2d_tiled_*) per
                    group with im2col gathered into threadgroup memory, never stored
"""
import numpy as np

from mpskern import _native, structs
from mpskern._errors import Unsupported
from mpskern.backends.gpu import gemm as _gemm
from mpskern.backends.gpu.conv2d_halo import LAYOUT_FIELDS, halo_layout, halo_plane
from mpskern.backends.gpu.context import (MAX_GRID_YZ, activation_macros, cdiv, configure,
                                          gpu_cores, helper_threads, nothing, pipelines)
from mpskern.tuning import spaces, tiles

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
