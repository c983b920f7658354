"""softmax / log_softmax on the GPU backends (metal/softmax.metal): which kernel, which
configuration, which grid. x is viewed as (outer, n, inner), softmax along n.

Variants (the kernels' comments say more):
  rows    one row per TPR threads, held in registers (n <= TPR*VPT)
  looped  any n: online max/sum per thread, then a write pass
  cols    one thread per row: for strided rows (inner > 1) when there are many of them
"""
from mpskern import _native
from mpskern.gpu_ops import rows as R

FILE = "softmax.metal"
PREFIX = "SM"

# The configurations mpskern ships (tests run every one of them).
SHIPPED = (
    {"variant": "rows", "TPR": 32, "RPG": 8, "VPT": 4},       # short rows: n <= 128
    {"variant": "rows", "TPR": 256, "RPG": 1, "VPT": 8},      # n <= 2048
    {"variant": "rows", "TPR": 1024, "RPG": 1, "VPT": 8},     # n <= 8192
    {"variant": "looped", "TPR": 256, "RPG": 1},
    {"variant": "looped", "TPR": 1024, "RPG": 1},
    {"variant": "cols", "TG": 256},
)

# cols pays off once the strided rows are many enough to fill the GPU thread by thread
COLS_MIN_ROWS = 1024


def problem(cfg, args, info):
    """Why `cfg` cannot run this softmax on this device, or None."""
    if cfg.get("variant") == "cols":
        return R.tg_config_problem(cfg, info)
    return R.row_config_problem(cfg, args["n"], info)


def generic(args, info):
    """The rule-based default: strided rows thread by thread when there are many, else
    the smallest register-resident configuration that holds the row, else looped."""
    rows, n = args["outer"] * args["inner"], args["n"]
    if args["inner"] > 1 and rows >= COLS_MIN_ROWS:
        return dict(SHIPPED[5])
    ordered = SHIPPED[:3] + (SHIPPED[4],)
    return R.first_valid(ordered, lambda c: problem(c, args, info))


def dispatches(backend, args, dtype, xb, yb, cfg):
    """The dispatch list of one softmax with configuration `cfg`."""
    sfx = R.suffix(dtype)
    packed = _native.pack_args("softmax", args)
    rows = args["outer"] * args["inner"]
    if cfg["variant"] == "cols":
        p = R.pipeline(backend, f"softmax_cols_{sfx}", FILE)
        return [R.elementwise_dispatch(p, cfg["TG"], rows, [xb, yb, packed])]
    p = R.pipeline(backend, f"softmax_{cfg['variant']}_{sfx}", FILE,
                   R.row_macros(PREFIX, cfg))
    return [R.row_dispatch(p, cfg, rows, [xb, yb, packed])]


def softmax(backend, args, dtype, x, y, config=None):
    """Backend method: fill y with softmax (args["log"] == 0) or log_softmax of x."""
    info = backend.info
    cfg = (R.resolve(config, lambda c: problem(c, args, info), "softmax") if config
           else generic(args, info))
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    return R.run(backend, dispatches(backend, args, dtype, xb, yb, cfg), [yb], cfg)

