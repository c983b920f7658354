"""softmax / log_softmax on the GPU backends (metal/softmax.metal): which kernel, which
configuration, which grid. x is viewed as (outer, n, inner), softmax along n; a row is
(o, i), its elements inner apart.

Spaces (mpskern/tuning/spaces.py): "softmax" (variants rows: the row in registers, n <=
TPR*VPT; looped: any n, online max/sum) and "softmax_cols" (one thread per strided row).
Which space: cols when rows are strided (inner > 1) and there are at least COLS_MIN_ROWS
of them, so that neighbouring threads read neighbouring addresses and the GPU is full;
otherwise a threadgroup reduces each row.
"""
from mpskern import _native
from mpskern.backends.gpu import rows as R
from mpskern.backends.gpu.context import configure, nothing, pipelines
from mpskern.tuning import spaces

COLS_MIN_ROWS = 1024   # mpskern's own threshold, not measured yet


def space_of(args, config=None):
    if config is not None:
        return "softmax_cols" if config.get("variant") == "cols" else "softmax"
    rows = args["outer"] * args["inner"]
    return "softmax_cols" if args["inner"] > 1 and rows >= COLS_MIN_ROWS else "softmax"


def softmax(ctx, args, dtype, x, y, config=None):
    """Encoder (see context.py): y = softmax of x (args["log"] == 0) or log_softmax;
    `config` pins a configuration of "softmax" or (variant "cols") "softmax_cols"."""
    shape = (args["outer"], args["n"], args["inner"])
    if not all(shape):
        return nothing()
    op = space_of(args, config)
    cfg, level = configure(ctx, op, dtype, shape, config)
    cols = op == "softmax_cols"
    cfg, level, (pipe,) = pipelines(ctx, op, dtype, shape, cfg, level, lambda c: [
        (spaces.SPACES[op].kernel(c, dtype), c["threads"] if cols else R.row_threads(c))])
    xb, yb = ctx.buffer(x), ctx.buffer(y, writable=True)
    packed = _native.pack_args("softmax", args)
    rows = args["outer"] * args["inner"]
    if cols:
        run = [R.elementwise_dispatch(pipe, cfg["threads"], rows, [xb, yb, packed])]
    else:
        run = [R.row_dispatch(pipe, cfg, rows, [xb, yb, packed])]
    return ctx.submit(run, dict(cfg, kernel=pipe.name, level=level), outputs=[yb])
