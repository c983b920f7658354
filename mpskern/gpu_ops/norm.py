"""layer_norm / rms_norm (rownorm), group_norm and batch_norm on the GPU backends
(metal/norm.metal): which kernel, which configuration, which grid.

rownorm and group_norm are row reductions (configurations as in rows.py: "rows" holds a
row in registers, "looped" takes any length). batch_norm: inference is one elementwise
dispatch over the running statistics; training is a dispatch list run in one command
buffer: per-channel batch statistics (and the running-stat update), then the same
elementwise dispatch over those statistics. Its configuration is {"TPR", "RPG"} for the
statistics and {"TG"} for the elementwise pass.
"""
import numpy as np

from mpskern import _native
from mpskern.gpu_ops import rows as R

FILE = "norm.metal"
PREFIX = "NM"

ROW_SHIPPED = (
    {"variant": "rows", "TPR": 32, "RPG": 8, "VPT": 4},       # short rows: n <= 128
    {"variant": "rows", "TPR": 256, "RPG": 1, "VPT": 8},      # n <= 2048
    {"variant": "rows", "TPR": 1024, "RPG": 1, "VPT": 8},     # n <= 8192
    {"variant": "looped", "TPR": 256, "RPG": 1},
    {"variant": "looped", "TPR": 1024, "RPG": 1},
)
BATCH_SHIPPED = (
    {"TPR": 256, "RPG": 1, "TG": 256},
    {"TPR": 32, "RPG": 4, "TG": 64},
)


def _row_default(n, info):
    ordered = ROW_SHIPPED[:3] + (ROW_SHIPPED[4],)
    return R.first_valid(ordered, lambda c: R.row_config_problem(c, n, info))


def _row_config(config, n, info, op):
    if config:
        return R.resolve(config, lambda c: R.row_config_problem(c, n, info), op)
    return _row_default(n, info)


def _optional(backend, v, fallback):
    """Absent weight/bias: the kernel never reads it (has_weight/has_bias == 0), but the
    slot still needs a buffer."""
    return fallback if v is None else backend.wrap(v)


# ---------------------------------------------------------------- layer_norm / rms_norm

def rownorm_problem(cfg, args, info):
    return R.row_config_problem(cfg, args["n"], info)


def rownorm_dispatches(backend, args, dtype, bufs, cfg):
    """bufs: x, weight, bias, y (Buffers)."""
    p = R.pipeline(backend, f"rownorm_{cfg['variant']}_{R.suffix(dtype)}", FILE,
                   R.row_macros(PREFIX, cfg))
    return [R.row_dispatch(p, cfg, args["rows"],
                           list(bufs) + [_native.pack_args("rownorm", args)])]


def rownorm(backend, args, dtype, x, weight, bias, y, config=None):
    """Backend method: layer_norm (kind 0) or rms_norm (kind 1) of x viewed as (rows, n)."""
    cfg = _row_config(config, args["n"], backend.info, "rownorm")
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    bufs = (xb, _optional(backend, weight, xb), _optional(backend, bias, xb), yb)
    return R.run(backend, rownorm_dispatches(backend, args, dtype, bufs, cfg), [yb], cfg)


# ---------------------------------------------------------------- group_norm

def _group_len(args):
    return args["C"] // args["groups"] * args["HW"]


def group_norm_problem(cfg, args, info):
    return R.row_config_problem(cfg, _group_len(args), info)


def group_norm_dispatches(backend, args, dtype, bufs, cfg):
    p = R.pipeline(backend, f"group_norm_{cfg['variant']}_{R.suffix(dtype)}", FILE,
                   R.row_macros(PREFIX, cfg))
    return [R.row_dispatch(p, cfg, args["N"] * args["groups"],
                           list(bufs) + [_native.pack_args("group_norm", args)])]


def group_norm(backend, args, dtype, x, weight, bias, y, config=None):
    """Backend method: group_norm of x (N, C, HW); a (n, group) is one contiguous row."""
    if args["groups"] < 1 or args["C"] % args["groups"]:
        raise ValueError(f"group_norm: groups={args['groups']} must divide C={args['C']}")
    cfg = _row_config(config, _group_len(args), backend.info, "group_norm")
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    bufs = (xb, _optional(backend, weight, xb), _optional(backend, bias, xb), yb)
    return R.run(backend, group_norm_dispatches(backend, args, dtype, bufs, cfg), [yb], cfg)


# ---------------------------------------------------------------- batch_norm

def batch_norm_problem(cfg, args, info):
    return (R.row_config_problem(dict(cfg, variant="looped"), 0, info)
            or R.tg_config_problem(cfg, info))


def batch_norm_dispatches(backend, args, dtype, bufs, cfg):
    """bufs: x, running_mean, running_var, weight, bias, y, stats (float32[2C] scratch)."""
    x, rm, rv, w, b, y, stats = bufs
    sfx = R.suffix(dtype)
    packed = _native.pack_args("batch_norm", args)
    total = args["N"] * args["C"] * args["HW"]
    apply = R.pipeline(backend, f"batch_norm_apply_{sfx}", FILE)
    if not args["training"]:
        return [R.elementwise_dispatch(apply, cfg["TG"], total, [x, rm, rv, w, b, y, packed])]
    scfg = dict(cfg, variant="looped")
    st = R.pipeline(backend, f"batch_norm_stats_{sfx}", FILE, R.row_macros(PREFIX, scfg))
    mean, var = (stats, 0), (stats, 4 * args["C"])
    return [R.row_dispatch(st, scfg, args["C"], [x, rm, rv, stats, packed]),
            R.elementwise_dispatch(apply, cfg["TG"], total, [x, mean, var, w, b, y, packed])]


def batch_norm(backend, args, dtype, x, running_mean, running_var, weight, bias, y,
               config=None):
    """Backend method: batch_norm of x (N, C, HW); in training, updates the running
    statistics in place when present."""
    if not args["training"] and (running_mean is None or running_var is None):
        raise ValueError("batch_norm: inference (training=False) needs running_mean and "
                         "running_var")
    info = backend.info
    cfg = (R.resolve(config, lambda c: batch_norm_problem(c, args, info), "batch_norm")
           if config else dict(BATCH_SHIPPED[0]))
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    outputs = [yb]
    stats = backend.wrap(np.empty(2 * args["C"], np.float32), writable=True)
    if args["has_running"]:
        writable = bool(args["training"])
        rm, rv = backend.wrap(running_mean, writable), backend.wrap(running_var, writable)
        if writable:
            outputs += [rm, rv]
    else:
        rm = rv = stats       # never touched: has_running == 0
    bufs = (xb, rm, rv, _optional(backend, weight, xb), _optional(backend, bias, xb), yb, stats)
    return R.run(backend, batch_norm_dispatches(backend, args, dtype, bufs, cfg), outputs, cfg)
