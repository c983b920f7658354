"""max_pool2d / avg_pool2d on the GPU backends (metal/pool.metal): one thread per output
element (pool_max_* or pool_avg_* by args["mode"]); the configuration ("pool2d" in
mpskern/tuning/spaces.py) is only the threads per threadgroup, so one compiled library
serves every configuration."""
from mpskern import _native
from mpskern.backends.gpu import rows as R
from mpskern.backends.gpu.context import configure, nothing, pipelines
from mpskern.tuning import spaces

SPACE = "pool2d"
MODES = {0: "max", 1: "avg"}      # MK_POOL_MAX / MK_POOL_AVG in metal/mk_args.h


def pool2d(ctx, args, dtype, x, y, config=None):
    """Encoder (see context.py): y (N, C, P, Q) = pooled x (N, C, H, W)."""
    mode = MODES.get(args["mode"])
    if mode is None:
        raise ValueError(f"pool2d: mode={args['mode']!r} is neither max (0) nor avg (1)")
    shape = (args["N"], args["C"], args["P"], args["Q"])
    if not all(shape):
        return nothing()
    cfg, level = configure(ctx, SPACE, dtype, shape, config)
    kernel = spaces.SPACES[SPACE].kernel(None, dtype, variant=mode)
    cfg, level, (pipe,) = pipelines(ctx, SPACE, dtype, shape, cfg, level,
                                    lambda c: [(kernel, c["threads"])])
    xb, yb = ctx.buffer(x), ctx.buffer(y, writable=True)
    run = [R.elementwise_dispatch(pipe, cfg["threads"], shape[0] * shape[1] * shape[2] * shape[3],
                                  [xb, yb, _native.pack_args("pool2d", args)])]
    return ctx.submit(run, dict(cfg, kernel=kernel, level=level), outputs=[yb])
