"""conv2d on the GPU backends (metal/conv2d.metal, and metal/gemm.metal for 1x1).

Three paths, by the problem (route() says which, and so which tuning space applies):
  conv2d_depthwise  groups == C > 1: conv2d_depthwise_*, one thread per output element
  gemm              1x1, stride 1, no padding, one group, no bias: the image batch is a
                    batched GEMM  y[n] (K x H*W) = w (K x C) @ x[n] (C x H*W)
  conv2d            everything else: implicit GEMM (conv2d_simd_* / conv2d_tiled_*) per
                    group with im2col gathered into threadgroup memory, never stored
"""
from mpskern import _native, structs
from mpskern._errors import Unsupported
from mpskern.backends.gpu import gemm as _gemm
from mpskern.backends.gpu.context import (MAX_GRID_YZ, activation_macros, cdiv, configure,
                                          nothing, pipelines)
from mpskern.tuning import spaces, tiles

FILE = "conv2d.metal"
FLOAT_BYTES = 4


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


def halo_plane(args, bn):
    """Threadgroup elements one input channel's halo takes for a 2-D tile of bn/8 x 8
    outputs (metal/conv2d.metal mk_conv_halo_at: the same arithmetic)."""
    a = args
    rows = (bn // 8 - 1) * a["stride_h"] + (a["R"] - 1) * a["dil_h"] + 1
    span = 7 * a["stride_w"] + (a["S"] - 1) * a["dil_w"] + 1
    chunks = (span + 6) >> 2
    return rows * ((4 * chunks) | 4)


def uses_halo(args, cfg, max_memory=32768):
    """Whether an implicit-GEMM call takes 2-D tiles with the staged halo (MK_CONV_HALO 1):
    when its configuration asks for them (tiles=2; the default is 1-D) and they can run it:
    not a 1x1 stride-1 unpadded call (its im2col is x, staged 4-wide as it is), one
    channel's halo fits in tiles.HALO_CAP, threads and BK*BN/8 divide one another, and the
    staging (counted at float32, as conv2d.metal does) leaves room for the halo within
    `max_memory` bytes. Not the default: the model puts them at 0.94-1.24x the time of the
    1-D gather (docs/kernels-gemm-conv.md) until a Mac measures them."""
    a, bn = args, cfg["BN"]
    if cfg.get("tiles", 1) != 2:
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
    return not plain and halo_plane(a, bn) <= tiles.HALO_CAP


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
        bn = cfg["BN"]
        cols = (a["N"] * cdiv(a["P"], bn // 8) * cdiv(a["Q"], 8) if halo
                else cdiv(a["N"] * a["P"] * a["Q"], bn))
        grid = (cols, cdiv(a["K"] // a["groups"], cfg["BM"]), a["groups"])
        if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
            raise Unsupported(f"conv2d: grid {grid} exceeds {MAX_GRID_YZ} threadgroups along "
                              "y or z; split the channels into smaller calls")
    record = dict(cfg, kernel=pipe.name, level=level)
    if op == "conv2d":
        record["tiles"] = 2 if halo else 1    # what ran (uses_halo)
    by = ctx.buffer(y, writable=True)
    # C == 0 leaves x and w empty (never read; Metal has no zero-length buffers); a
    # missing bias is never read either
    bx = ctx.buffer(x) if x.size else by
    bw = ctx.buffer(w) if w.size else by
    bb = ctx.buffer(bias) if bias is not None else by
    packed = _native.pack_args("conv2d", args)
    return ctx.submit([dict(pipeline=pipe, grid=grid, threadgroup=(threads, 1, 1),
                         bindings=[bx, bw, bb, by, packed])], record, outputs=[by])
