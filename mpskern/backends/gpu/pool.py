"""max_pool2d / avg_pool2d / adaptive_avg_pool2d on the GPU backends: metal/pool.metal
(pool_max_* or pool_avg_* by args["mode"]), adaptive_pool.metal (MK_POOL_ADAPTIVE_AVG) and
pool_indices.metal (max with the argmax indices, when `indices` is given). Every one walks
the tiles of metal/mk_pool_tile.h, which `tile` chooses here. Each has a space in
mpskern/tuning/rows.py ("pool2d", "adaptive_pool2d", "pool2d_indices") whose configuration
is only the threads per threadgroup, so one compiled library serves every configuration."""
import numpy as np

from mpskern import _native
from mpskern.backends.gpu.context import cdiv, configure, gpu_cores, nothing, pipelines
from mpskern.tuning import spaces

MODES = {0: "max", 1: "avg", 2: "adaptive"}   # MK_POOL_* in metal/mk_args.h
STAGE = 4096           # floats of input a tile may stage (MK_POOL_STAGE, metal/mk_pool_tile.h)
GROUPS_PER_CORE = 4    # tiles are cut smaller until the grid has this many per GPU core


def adaptive_windows(n, m):
    """torch's adaptive windows [lo, hi) of m outputs over n inputs: [i*n/m, ceil((i+1)*n/m))."""
    i = np.arange(m, dtype=np.int64)
    return i * n // m, ((i + 1) * n + m - 1) // m


def window_rows(args, mode):
    """(lo, hi): the input rows [lo, hi) each output row's windows read, clipped."""
    H, P = args["H"], args["P"]
    if mode == "adaptive":
        return adaptive_windows(H, P)
    p = np.arange(P, dtype=np.int64)
    h0 = p * args["stride_h"] - args["pad_h"]
    return np.maximum(h0, 0), np.minimum(h0 + (args["kh"] - 1) * args["dil_h"] + 1, H)


def tile(args, mode, threads, cores):
    """The tiling of metal/mk_pool_tile.h (its mk_pool_tile fields, int32 x 8): whole planes
    per threadgroup when a plane fits the stage, else as many output rows as fit; windows
    wider than the stage read device memory directly (staged = 0). Then smaller tiles
    while the grid has fewer than GROUPS_PER_CORE threadgroups per core."""
    NC, H, W, P, Q = args["N"] * args["C"], args["H"], args["W"], args["P"], args["Q"]
    lo, hi = window_rows(args, mode)

    def span(tp):          # input rows of the worst block of tp output rows
        ends = np.minimum(np.arange(0, P, tp) + tp, P) - 1
        return int(np.max(hi[ends] - lo[::tp]))

    want = GROUPS_PER_CORE * cores
    NP, TP, staged = 1, min(P, max(1, STAGE // W)), 1
    if H * W <= STAGE:
        TP = P
        NP = max(1, min(STAGE // (H * W), NC // want))
    else:
        while TP > 0 and span(TP) * W > STAGE:
            TP = TP - 1 if TP < 8 else TP * 7 // 8
    if TP == 0:            # not even one output row's windows fit: direct reads
        staged, TP = 0, P
        NP = max(1, min(NC, cdiv(threads, P * Q)))
        if P * Q >= threads:
            NP, TP = 1, min(P, cdiv(threads, Q))
    if NP == 1 and cdiv(NC, NP) * cdiv(P, TP) < want:
        TP = max(1, min(TP, cdiv(P, cdiv(want, NC))))
    step = threads // Q
    return dict(NP=NP, TP=TP, staged=staged, dq=threads % Q, dr=step % P, dpl=step // P)


def pool2d(ctx, args, dtype, x, y, indices=None, config=None):
    """Encoder (see context.py): y (N, C, P, Q) = pooled x (N, C, H, W); indices (int64,
    like y) = where each maximum came from (mode max only)."""
    mode = MODES.get(args["mode"])
    if mode is None:
        raise ValueError(f"pool2d: mode={args['mode']!r} is neither max (0), avg (1) nor "
                         f"adaptive avg (2)")
    if indices is not None and mode != "max":
        raise ValueError(f"pool2d: indices are for max pooling only (mode={args['mode']})")
    shape = (args["N"], args["C"], args["P"], args["Q"])
    if not all(shape):
        return nothing()
    # (space, kernel variant): the kernels of pool.metal, adaptive_pool.metal, pool_indices.metal
    space, variant = (("pool2d_indices", "max") if indices is not None else
                      ("adaptive_pool2d", "avg") if mode == "adaptive" else ("pool2d", mode))
    kernel = spaces.SPACES[space].kernel(None, dtype, variant=variant)
    cfg, level = configure(ctx, space, dtype, shape, config)
    cfg, level, (pipe,) = pipelines(ctx, space, dtype, shape, cfg, level,
                                    lambda c: [(kernel, c["threads"])])
    threads = cfg["threads"]
    t = tile(args, mode, threads, gpu_cores(ctx.limits))
    xb, yb = ctx.buffer(x), ctx.buffer(y, writable=True)
    bufs, outs = [xb, yb], [yb]
    if indices is not None:
        ib = ctx.buffer(indices, writable=True)
        bufs, outs = bufs + [ib], outs + [ib]
    bufs += [_native.pack_args("pool2d", args),
             np.array(list(t.values()) + [0, 0], np.int32).tobytes()]
    if mode == "adaptive":        # adaptive_pool.metal's window table: rows, then columns
        win = [np.stack(adaptive_windows(args[n], args[m]), 1) for n, m in (("H", "P"), ("W", "Q"))]
        bufs.append(ctx.buffer(np.concatenate(win).astype(np.int32)))
    grid = (cdiv(args["N"] * args["C"], t["NP"]), cdiv(args["P"], t["TP"]), 1)
    run = [{"pipeline": pipe, "grid": grid, "threadgroup": (threads, 1, 1),
            "bindings": bufs}]
    return ctx.submit(run, dict(cfg, kernel=kernel, level=level, tile=t), outputs=outs)
