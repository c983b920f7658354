"""max_pool2d / avg_pool2d on the GPU backends (metal/pool.metal): one thread per output
element, so the only configuration is the threadgroup size (no macros: one compile)."""
from mpskern import _native
from mpskern.gpu_ops import rows as R

FILE = "pool.metal"
SHIPPED = ({"TG": 256}, {"TG": 64})
_MODES = {0: "max", 1: "avg"}      # MK_POOL_MAX / MK_POOL_AVG in metal/mk_args.h


def problem(cfg, args, info):
    return R.tg_config_problem(cfg, info)


def generic(args, info):
    return dict(SHIPPED[0])


def dispatches(backend, args, dtype, xb, yb, cfg):
    mode = _MODES.get(args["mode"])
    if mode is None:
        raise ValueError(f"pool2d: mode {args['mode']!r} is neither max (0) nor avg (1)")
    p = R.pipeline(backend, f"pool2d_{mode}_{R.suffix(dtype)}", FILE)
    total = args["N"] * args["C"] * args["P"] * args["Q"]
    return [R.elementwise_dispatch(p, cfg["TG"], total,
                                   [xb, yb, _native.pack_args("pool2d", args)])]


def pool2d(backend, args, dtype, x, y, config=None):
    """Backend method: fill y (N, C, P, Q) with the pooled x (N, C, H, W)."""
    info = backend.info
    cfg = (R.resolve(config, lambda c: problem(c, args, info), "pool2d") if config
           else generic(args, info))
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    return R.run(backend, dispatches(backend, args, dtype, xb, yb, cfg), [yb], cfg)
