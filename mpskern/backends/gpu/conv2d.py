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
from mpskern.tuning import spaces

FILE = "conv2d.metal"


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
    cfg, level, (pipe,) = pipelines(ctx, op, dtype, shape, cfg, level, lambda c: [
        (spaces.SPACES[op].kernel(c, dtype), spaces.threads(op, c))], activation_macros(a))
    threads = spaces.threads(op, cfg)
    if op == "conv2d_depthwise":
        grid = (cdiv(total, threads), 1, 1)
    else:
        grid = (cdiv(a["N"] * a["P"] * a["Q"], cfg["BN"]), cdiv(a["K"] // a["groups"], cfg["BM"]),
                a["groups"])
        if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
            raise Unsupported(f"conv2d: grid {grid} exceeds {MAX_GRID_YZ} threadgroups along "
                              "y or z; split the channels into smaller calls")
    record = dict(cfg, kernel=pipe.name, level=level)
    by = ctx.buffer(y, writable=True)
    # C == 0 leaves x and w empty (never read; Metal has no zero-length buffers); a
    # missing bias is never read either
    bx = ctx.buffer(x) if x.size else by
    bw = ctx.buffer(w) if w.size else by
    bb = ctx.buffer(bias) if bias is not None else by
    packed = _native.pack_args("conv2d", args)
    return ctx.submit([dict(pipeline=pipe, grid=grid, threadgroup=(threads, 1, 1),
                         bindings=[bx, bw, bb, by, packed])], record, outputs=[by])
