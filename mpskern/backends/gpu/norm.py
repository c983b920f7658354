"""layer_norm / rms_norm (rownorm), group_norm and batch_norm on the GPU backends
(metal/norm.metal): which kernel, which configuration, which grid.

rownorm and group_norm are row reductions (spaces "rownorm", "group_norm": variants rows,
the row in registers, and looped, any length); group_norm's row is one (sample, group),
contiguous in NCHW. batch_norm (space "batch_norm"): inference is one elementwise dispatch
over the running statistics; training is a dispatch list run in one command buffer: the
moments of `split` chunks per channel (TPR threads per chunk; spaces.stats_split), their
exact combination per channel with the running-stat update, then the same elementwise
dispatch over those statistics (`threads` per threadgroup; 4 elements per thread; each
channel's parameters one float4, inference_params or norm_batch_finish). Channels
with |x| near 2^48 or more have their statistics taken of x times a power of two (norm.metal;
float32 sums of squares overflow from ~1e19), which the normalisation applies too.
"""
import numpy as np

from mpskern import _native
from mpskern.backends.gpu import rows as R
from mpskern.backends.gpu.context import cdiv, configure, helper_threads, nothing, pipelines
from mpskern.tuning import spaces

APPLY_PER_THREAD = 4     # norm_batch_apply_*: consecutive elements per thread (norm.metal)


def _optional(ctx, v, fallback):
    """Absent weight/bias: the kernel never reads it (has_weight/has_bias == 0), but the
    slot still needs a buffer."""
    return fallback if v is None else ctx.buffer(v)


def params4(p, n):
    """A rownorm weight or bias as norm.metal reads it (mk_rowvec.h mk_param_shift): where
    n % 4 != 0 (rows at every 4-alignment) 4 copies, copy h (a row's head) at h*C + (4 - h)
    % 4 with C = n rounded up to 4 plus 4, so that each row's vector columns load 4-wide
    from its copy; else p itself."""
    if p is None or n % 4 == 0:
        return p
    c = -(-n // 4) * 4 + 4
    out = np.zeros(4 * c, np.float32)
    for h in range(4):
        at = h * c + (4 - h) % 4
        out[at:at + n] = p.reshape(-1)
    return out


def inference_params(mean, var, weight, bias, eps):
    """norm_batch_apply's per-channel float4 (S, mean, k, bias) of the running statistics:
    S = 1, k = w / sqrt(var + eps) (in float64, then float32), so that a thread's parameters
    are one vector load. var + eps <= 0 gives NaN / inf as rsqrt would."""
    with np.errstate(all="ignore"):
        k = 1.0 / np.sqrt(np.asarray(var, np.float64).reshape(-1) + np.float64(eps))
        if weight is not None:
            k = k * np.asarray(weight, np.float64).reshape(-1)
    t = np.zeros((k.size, 4), np.float32)
    t[:, 0] = 1.0
    t[:, 1] = np.asarray(mean, np.float32).reshape(-1)
    t[:, 2] = k
    if bias is not None:
        t[:, 3] = np.asarray(bias, np.float32).reshape(-1)
    return t.reshape(-1)


def _rows_op(ctx, op, args, dtype, x, weight, bias, y, rows, n, config):
    if not (rows and n):
        return nothing()
    cfg, level = configure(ctx, op, dtype, (rows, n), config)
    cfg, level, (pipe,) = pipelines(ctx, op, dtype, (rows, n), cfg, level, lambda c: [
        (spaces.SPACES[op].kernel(c, dtype), R.row_threads(c))])
    xb, yb = ctx.buffer(x), ctx.buffer(y, writable=True)
    binds = [xb, _optional(ctx, weight, xb), _optional(ctx, bias, xb), yb,
             _native.pack_args(op, args)]
    return ctx.submit([R.row_dispatch(pipe, cfg, rows, binds)],
                   dict(cfg, kernel=pipe.name, level=level), outputs=[yb])


def rownorm(ctx, args, dtype, x, weight, bias, y, config=None):
    """Encoder: layer_norm (kind 0) or rms_norm (kind 1) of x viewed as (rows, n)."""
    n = args["n"]
    return _rows_op(ctx, "rownorm", args, dtype, x, params4(weight, n), params4(bias, n), y,
                    args["rows"], n, config)


def group_norm(ctx, args, dtype, x, weight, bias, y, config=None):
    """Encoder: group_norm of x (N, C, HW); a (sample, group) is one row."""
    if args["groups"] < 1 or args["C"] % args["groups"]:
        raise ValueError(f"group_norm: groups={args['groups']} must divide C={args['C']}")
    return _rows_op(ctx, "group_norm", args, dtype, x, weight, bias, y,
                    args["N"] * args["groups"], args["C"] // args["groups"] * args["HW"],
                    config)


def batch_norm(ctx, args, dtype, x, running_mean, running_var, weight, bias, y, config=None):
    """Encoder: batch_norm of x (N, C, HW); training updates the running statistics in
    place when present (has_running)."""
    training = bool(args["training"])
    if not training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm: inference (training=False) needs running_mean and "
                         "running_var")
    N, C, HW = args["N"], args["C"], args["HW"]
    if not (N and C and HW):
        return nothing()
    op = "batch_norm"
    sp = spaces.SPACES[op]
    cfg, level = configure(ctx, op, dtype, (N, C, HW), config)

    def kernels(c):             # the elementwise normalisation; training: the statistics
        apply = [(sp.kernel(c, dtype, variant="apply"), c.get("threads", 256))]
        return apply + [(sp.kernel(c, dtype), R.row_threads(c))] if training else apply
    cfg, level, pipes = pipelines(ctx, op, dtype, (N, C, HW), cfg, level, kernels)
    apply, threads = pipes[0], cfg.get("threads", 256)
    packed = _native.pack_args(op, args)
    xb, yb = ctx.buffer(x), ctx.buffer(y, writable=True)
    outputs = [yb]
    nvec = cdiv(N * C * HW, APPLY_PER_THREAD)
    if not training:
        table = ctx.buffer(inference_params(running_mean, running_var, weight, bias,
                                            args["eps"]))
        run = [R.elementwise_dispatch(apply, threads, nvec, [xb, table, yb, packed])]
    else:
        split = spaces.stats_split(cfg, N, C, HW)
        # per chunk (count, mean, M2, S); per channel apply's float4 (S, mean, k, bias)
        partial = ctx.buffer(np.empty(4 * C * split, np.float32), writable=True)
        table = ctx.buffer(np.empty(4 * C, np.float32), writable=True)
        if args["has_running"]:
            rm = ctx.buffer(running_mean, writable=True)
            rv = ctx.buffer(running_var, writable=True)
            outputs += [rm, rv]
        else:
            rm = rv = table       # never touched: has_running == 0
        nsplit = np.int32(split).tobytes()
        wb, bb = _optional(ctx, weight, xb), _optional(ctx, bias, xb)
        fin = ctx.compiled(sp.kernel(cfg, _native.F32, variant="finish"), sp.file,
                           spaces.macros(op, cfg))    # float32 statistics for either dtype
        run = [R.row_dispatch(pipes[1], cfg, C * split, [xb, partial, packed, nsplit]),
               R.elementwise_dispatch(fin, helper_threads(fin, 32), C,
                                      [partial, rm, rv, table, packed, nsplit, wb, bb]),
               R.elementwise_dispatch(apply, threads, nvec, [xb, table, yb, packed])]
        cfg = dict(cfg, split=split)
    return ctx.submit(run, dict(cfg, level=level), outputs=outputs)
