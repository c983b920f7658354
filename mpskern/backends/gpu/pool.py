"""max_pool2d / avg_pool2d / adaptive_avg_pool2d on the GPU backends, one thread per output
element: metal/pool.metal (pool_max_* or pool_avg_* by args["mode"]), adaptive_pool.metal
(MK_POOL_ADAPTIVE_AVG) and pool_indices.metal (max with the argmax indices, when `indices`
is given). Each has a space in mpskern/tuning/rows.py ("pool2d", "adaptive_pool2d",
"pool2d_indices") whose configuration is only the threads per threadgroup, so one compiled
library serves every configuration."""
from mpskern import _native
from mpskern.backends.gpu import rows as R
from mpskern.backends.gpu.context import configure, nothing, pipelines
from mpskern.tuning import spaces

MODES = {0: "max", 1: "avg", 2: "adaptive"}   # MK_POOL_* in metal/mk_args.h


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
    xb, yb = ctx.buffer(x), ctx.buffer(y, writable=True)
    bufs, outs = [xb, yb], [yb]
    if indices is not None:
        ib = ctx.buffer(indices, writable=True)
        bufs, outs = bufs + [ib], outs + [ib]
    run = [R.elementwise_dispatch(pipe, cfg["threads"], shape[0] * shape[1] * shape[2] * shape[3],
                                  bufs + [_native.pack_args("pool2d", args)])]
    return ctx.submit(run, dict(cfg, kernel=kernel, level=level), outputs=outs)
