"""Dispatch geometry the row-reduction encoders (softmax.py, norm.py) and the elementwise
ones (pool.py, batch_norm's normalisation) share. Row configurations are described in
mpskern/tuning/spaces.py (TPR threads per row, RPG rows per threadgroup, VPT values per
thread in registers)."""


def row_threads(cfg):
    """Threads per threadgroup of a row configuration."""
    return cfg["TPR"] * cfg["RPG"]
from mpskern.backends.gpu.context import cdiv


def row_dispatch(pipe, cfg, rows, bindings):
    """One threadgroup per RPG rows (or channels), TPR*RPG threads each."""
    return {"pipeline": pipe, "grid": (cdiv(rows, cfg["RPG"]), 1, 1),
            "threadgroup": (row_threads(cfg), 1, 1), "bindings": bindings}


def elementwise_dispatch(pipe, threads, total, bindings):
    """`total` threads (one per element) in threadgroups of `threads`, the last one
    partial (dispatchThreads)."""
    return {"pipeline": pipe, "grid": (total, 1, 1), "threadgroup": (threads, 1, 1),
            "grid_units": "threads", "bindings": bindings}
