"""What the row-reduction encoders (softmax.py, norm.py) and the elementwise ones (pool.py,
batch_norm's normalisation) share: configuration choice through mpskern/tuning/spaces.py,
grids, and running a dispatch list. Row configurations are described in spaces.py
(TPR threads per row, RPG rows per threadgroup, VPT values per thread in registers)."""
from mpskern.gpu_ops import cdiv
from mpskern.tuning import spaces


def configure(backend, op, dtype, shape, config=None):
    """(config, lookup level) for a dispatch of space `op` at the op's `shape` key: a
    caller's `config` checked against the device and the problem, or the one
    spaces.select picks (pinned, tuned, family default or generic)."""
    info = backend.info
    if config is not None:
        cfg = dict(config)
        spaces.require(op, cfg, info, shape=shape)
        return cfg, "forced"
    choice = spaces.select(op, dtype, shape, info)
    return dict(choice.config), choice.level


def pipeline(backend, op, kernel, cfg, threads):
    """The compiled pipeline of `kernel` with the configuration's macros (none for the
    elementwise spaces); `threads` per threadgroup must fit the pipeline's own limit."""
    p = backend.pipeline(kernel, file=spaces.SPACES[op].file, macros=spaces.macros(op, cfg))
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


def nothing_to_do(backend, *counts):
    """True (and recorded for bench) when a count is 0: no buffers, no dispatch (Metal
    cannot wrap empty arrays or run empty grids)."""
    if all(counts):
        return False
    backend._record(None, {"empty": True})
    return True


def run(backend, dispatches, outputs, record):
    """Run the dispatch list in one command buffer, then make the outputs' device writes
    visible in their numpy arrays (Metal may have copied them)."""
    t = backend.run(dispatches, config=record)
    for b in outputs:
        b.sync()
    return t
