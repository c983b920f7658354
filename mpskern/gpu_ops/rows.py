"""Shared by the row-reduction encoders (softmax.py, norm.py) and the elementwise ones
(pool.py, batch_norm's apply): configuration validity, macros, grids, dispatch helpers.

A row configuration is a dict {"variant", "TPR", "RPG"[, "VPT"]}: TPR threads per row (a
multiple of the SIMD width), RPG rows per threadgroup, VPT values per thread held in
registers by the "rows" variant (so it needs n <= TPR*VPT; "looped" takes any n). The
kernels take them as the macros <PREFIX>_TPR/_RPG/_VPT (metal/softmax.metal: SM_,
metal/norm.metal: NM_). Elementwise kernels take {"TG": threads per threadgroup} at
dispatch time only (no macro, so one compile serves every TG).
"""
from mpskern import _native

SIMD = 32
LOOPED_VPT = 8
MAX_VPT = 16                 # registers per thread: beyond this the rows variant spills
SUFFIX = {_native.F32: "f32", _native.F16: "f16"}


def suffix(dtype):
    try:
        return SUFFIX[dtype]
    except KeyError:
        raise TypeError(f"GPU kernels take float32 or float16 (dtype code {dtype!r})") from None


def cdiv(a, b):
    return -(-a // b)


def _limit(info, key, default):
    v = (info or {}).get(key) or 0
    return v if v > 0 else default


def row_config_problem(cfg, n, info):
    """Why a row configuration cannot run a row of n elements on the device described by
    `info` (Device.info()), or None when it can."""
    variant, tpr, rpg = cfg["variant"], int(cfg["TPR"]), int(cfg["RPG"])
    if variant not in ("rows", "looped"):
        return f"unknown variant {variant!r} (rows, looped)"
    if tpr < SIMD or tpr % SIMD:
        return f"TPR={tpr} is not a positive multiple of the SIMD width {SIMD}"
    if rpg < 1:
        return f"RPG={rpg} must be at least 1"
    max_threads = _limit(info, "max_threads_per_threadgroup", 1024)
    if tpr * rpg > max_threads:
        return f"TPR*RPG={tpr * rpg} threads exceeds the device's {max_threads} per threadgroup"
    # two float arrays of one entry per SIMD-group (mk_rowreduce.h)
    tg_mem = 2 * 4 * (tpr * rpg // SIMD)
    if tg_mem > _limit(info, "max_threadgroup_memory", 32768):
        return f"{tg_mem} bytes of threadgroup memory exceeds the device's limit"
    if variant == "rows":
        vpt = int(cfg.get("VPT", 0))
        if not 1 <= vpt <= MAX_VPT:
            return f"VPT={vpt} must be in 1..{MAX_VPT}"
        if n > tpr * vpt:
            return f"rows variant holds TPR*VPT={tpr * vpt} values, the row has {n}"
    return None


def tg_config_problem(cfg, info):
    tg = int(cfg["TG"])
    max_threads = _limit(info, "max_threads_per_threadgroup", 1024)
    if not 1 <= tg <= max_threads:
        return f"TG={tg} must be in 1..{max_threads}"
    return None


def row_macros(prefix, cfg):
    """The macros of a row configuration. "looped" ignores VPT; it gets LOOPED_VPT so that
    it shares one compiled library with the "rows" configuration of the same TPR/RPG."""
    vpt = int(cfg["VPT"]) if cfg["variant"] == "rows" else LOOPED_VPT
    return {f"{prefix}_TPR": int(cfg["TPR"]), f"{prefix}_RPG": int(cfg["RPG"]),
            f"{prefix}_VPT": vpt}


def row_dispatch(pipeline, cfg, rows, bindings):
    """One threadgroup per RPG rows, TPR*RPG threads each."""
    tg = int(cfg["TPR"]) * int(cfg["RPG"])
    check_threads(pipeline, tg)
    return {"pipeline": pipeline, "grid": (cdiv(rows, int(cfg["RPG"])), 1, 1),
            "threadgroup": (tg, 1, 1), "bindings": bindings}


def elementwise_dispatch(pipeline, tg, total, bindings):
    """`total` threads (one per element), threadgroups of `tg` (the last one partial)."""
    tg = min(int(tg), pipeline.max_threads or int(tg))
    return {"pipeline": pipeline, "grid": (total, 1, 1), "threadgroup": (tg, 1, 1),
            "grid_units": "threads", "bindings": bindings}


def check_threads(pipeline, tg):
    mt = pipeline.max_threads
    if mt and tg > mt:
        raise ValueError(f"kernel {pipeline.name}: the configuration needs {tg} threads per "
                         f"threadgroup, the compiled pipeline allows {mt}; pick a configuration "
                         f"with fewer threads (TPR*RPG)")


def first_valid(candidates, problem):
    """The first candidate configuration `problem(cfg)` has no objection to."""
    for c in candidates:
        if problem(c) is None:
            return dict(c)
    raise ValueError("no shipped configuration fits")   # the looped fallbacks always fit


def resolve(cfg, problem, op):
    """Validate a caller-given configuration (tests, tuner) with a clear error."""
    why = problem(cfg)
    if why:
        raise ValueError(f"{op} configuration {cfg} cannot run here: {why}")
    return dict(cfg)


def pipeline(backend, kernel, file, macros=None):
    """The compiled pipeline (cached by the backend); instrumented when the backend runs
    the simulator's checking mode."""
    return backend.pipeline(kernel, file=file, macros=macros,
                            check=bool(getattr(backend, "check", False)))


def run(backend, dispatches, outputs, config):
    """Run the dispatch list in one command buffer, then make the outputs' device writes
    visible in their numpy arrays (Metal may have copied them)."""
    t = backend.run(dispatches, config=config)
    for b in outputs:
        b.sync()
    return t
