"""Dispatch geometry the row-reduction encoders (softmax.py, norm.py) and the elementwise
ones (pool.py, batch_norm's normalisation) share. Row configurations are described in
mpskern/tuning/spaces.py (TPR threads per row, RPG rows per threadgroup, VPT values per
thread in registers)."""
from mpskern.backends.gpu.context import cdiv
from mpskern.tuning import spaces


def pipeline(ctx, op, kernel, cfg, threads):
    """The compiled pipeline of `kernel` with the configuration's macros (none for the
    elementwise spaces); `threads` per threadgroup must fit the pipeline's own limit."""
    p = ctx.pipeline(kernel, spaces.SPACES[op].file, spaces.macros(op, cfg))
    if p.max_threads and threads > p.max_threads:
        raise ValueError(f"{kernel}: configuration {cfg} runs {threads} threads per "
                         f"threadgroup; the compiled pipeline allows {p.max_threads}. Pin a "
                         f"smaller configuration (or let the tuner pick one)")
    return p


def row_dispatch(pipe, cfg, rows, bindings):
    """One threadgroup per RPG rows (or channels), TPR*RPG threads each."""
    return {"pipeline": pipe, "grid": (cdiv(rows, cfg["RPG"]), 1, 1),
            "threadgroup": (cfg["TPR"] * cfg["RPG"], 1, 1), "bindings": bindings}


def elementwise_dispatch(pipe, threads, total, bindings):
    """`total` threads (one per element) in threadgroups of `threads`, the last one
    partial (dispatchThreads)."""
    return {"pipeline": pipe, "grid": (total, 1, 1), "threadgroup": (threads, 1, 1),
            "grid_units": "threads", "bindings": bindings}
