"""max_pool2d / avg_pool2d on the GPU backends (metal/pool.metal): one thread per output
element (pool_max_* or pool_avg_* by args["mode"]); the configuration ("pool2d" in
mpskern/tuning/spaces.py) is only the threads per threadgroup, so one compiled library
serves every configuration."""
from mpskern import _native
from mpskern.gpu_ops import rows as R
from mpskern.gpu_ops import suffix

OP = "pool2d"
MODES = {0: "max", 1: "avg"}      # MK_POOL_MAX / MK_POOL_AVG in metal/mk_args.h


def pool2d(backend, args, dtype, x, y, config=None):
    """Backend method: y (N, C, P, Q) = pooled x (N, C, H, W)."""
    mode = MODES.get(args["mode"])
    if mode is None:
        raise ValueError(f"pool2d: mode={args['mode']!r} is neither max (0) nor avg (1)")
    if R.nothing_to_do(backend, args["N"], args["C"], args["P"], args["Q"]):
        return None
    cfg, level = R.configure(backend, OP, dtype,
                             (args["N"], args["C"], args["P"], args["Q"]), config)
    kernel = f"pool_{mode}_{suffix(dtype)}"
    pipe = R.pipeline(backend, OP, kernel, cfg, cfg["threads"])
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    total = args["N"] * args["C"] * args["P"] * args["Q"]
    run = [R.elementwise_dispatch(pipe, cfg["threads"], total,
                                  [xb, yb, _native.pack_args("pool2d", args)])]
    return R.run(backend, run, [yb], dict(cfg, kernel=kernel, level=level))
