"""layer_norm / rms_norm (rownorm), group_norm and batch_norm on the GPU backends
(metal/norm.metal): which kernel, which configuration, which grid.

rownorm and group_norm are row reductions (spaces "rownorm", "group_norm": variants rows,
the row in registers, and looped, any length); group_norm's row is one (sample, group),
contiguous in NCHW. batch_norm (space "batch_norm"): inference is one elementwise dispatch
over the running statistics; training is a dispatch list run in one command buffer: the
moments of `split` chunks per channel (TPR threads per chunk; spaces.stats_split), their
exact combination per channel with the running-stat update, then the same elementwise
dispatch over those statistics (`threads` per threadgroup).
"""
import numpy as np

from mpskern import _native
from mpskern.gpu_ops import rows as R
from mpskern.gpu_ops import suffix
from mpskern.tuning import spaces


def _optional(backend, v, fallback):
    """Absent weight/bias: the kernel never reads it (has_weight/has_bias == 0), but the
    slot still needs a buffer."""
    return fallback if v is None else backend.wrap(v)


def _rows_op(backend, op, kind, args, dtype, x, weight, bias, y, rows, n, config):
    if R.nothing_to_do(backend, rows, n):
        return None
    cfg, level = R.configure(backend, op, dtype, (rows, n), config)
    kernel = f"norm_{kind}_{cfg['variant']}_{suffix(dtype)}"
    pipe = R.pipeline(backend, op, kernel, cfg, cfg["TPR"] * cfg["RPG"])
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    binds = [xb, _optional(backend, weight, xb), _optional(backend, bias, xb), yb,
             _native.pack_args(op, args)]
    return R.run(backend, [R.row_dispatch(pipe, cfg, rows, binds)], [yb],
                 dict(cfg, kernel=kernel, level=level))


def rownorm(backend, args, dtype, x, weight, bias, y, config=None):
    """Backend method: layer_norm (kind 0) or rms_norm (kind 1) of x viewed as (rows, n)."""
    return _rows_op(backend, "rownorm", "rownorm", args, dtype, x, weight, bias, y,
                    args["rows"], args["n"], config)


def group_norm(backend, args, dtype, x, weight, bias, y, config=None):
    """Backend method: group_norm of x (N, C, HW); a (sample, group) is one row."""
    if args["groups"] < 1 or args["C"] % args["groups"]:
        raise ValueError(f"group_norm: groups={args['groups']} must divide C={args['C']}")
    return _rows_op(backend, "group_norm", "group", args, dtype, x, weight, bias, y,
                    args["N"] * args["groups"], args["C"] // args["groups"] * args["HW"],
                    config)


def batch_norm(backend, args, dtype, x, running_mean, running_var, weight, bias, y,
               config=None):
    """Backend method: batch_norm of x (N, C, HW); training updates the running statistics
    in place when present (has_running)."""
    training = bool(args["training"])
    if not training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm: inference (training=False) needs running_mean and "
                         "running_var")
    if R.nothing_to_do(backend, args["N"], args["C"], args["HW"]):
        return None
    op, sfx = "batch_norm", suffix(dtype)
    cfg, level = R.configure(backend, op, dtype, (args["N"], args["C"], args["HW"]), config)
    threads = cfg.get("threads", 256)
    packed = _native.pack_args(op, args)
    xb, yb = backend.wrap(x), backend.wrap(y, writable=True)
    wb, bb = _optional(backend, weight, xb), _optional(backend, bias, xb)
    outputs = [yb]
    apply = R.pipeline(backend, op, f"norm_batch_apply_{sfx}", cfg, threads)
    total = args["N"] * args["C"] * args["HW"]
    if not training:
        rm, rv = backend.wrap(running_mean), backend.wrap(running_var)
        run = [R.elementwise_dispatch(apply, threads, total, [xb, rm, rv, wb, bb, yb, packed])]
    else:
        split = spaces.stats_split(cfg, args["N"], args["C"], args["HW"])
        rows = args["C"] * split
        partial = backend.wrap(np.empty(3 * rows, np.float32), writable=True)
        stats = backend.wrap(np.empty(2 * args["C"], np.float32), writable=True)
        if args["has_running"]:
            rm = backend.wrap(running_mean, writable=True)
            rv = backend.wrap(running_var, writable=True)
            outputs += [rm, rv]
        else:
            rm = rv = stats       # never touched: has_running == 0
        nsplit = np.int32(split).tobytes()
        st = R.pipeline(backend, op, f"norm_batch_stats_{sfx}", cfg, cfg["TPR"] * cfg["RPG"])
        fin = R.pipeline(backend, op, "norm_batch_finish_f32", cfg, 32)
        mean, var = (stats, 0), (stats, 4 * args["C"])
        run = [R.row_dispatch(st, cfg, rows, [xb, partial, packed, nsplit]),
               R.elementwise_dispatch(fin, 32, args["C"], [partial, rm, rv, stats, packed, nsplit]),
               R.elementwise_dispatch(apply, threads, total, [xb, mean, var, wb, bb, yb, packed])]
        cfg = dict(cfg, split=split)
    return R.run(backend, run, outputs, dict(cfg, level=level))
