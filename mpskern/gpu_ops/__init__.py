"""Per-op encoders of the GPU backends ("metal" and "sim"): for each op, which kernel of
metal/<family>.metal, which tile configuration (mpskern/tuning/spaces.py), which grid and
bindings. mpskern/backends/gpu.py delegates `backend.<op>(...)` to `<module>.<op>(backend,
...)`; encoders compile and dispatch through the backend's `pipeline`, `wrap` and `run`.

    gemm.py     gemm                         metal/gemm.metal
    conv2d.py   conv2d                       metal/conv2d.metal (+ gemm.metal for 1x1)
    pool.py     pool2d                       metal/pool.metal
    softmax.py  softmax                      metal/softmax.metal
    norm.py     rownorm, group_norm, batch_norm   metal/norm.metal

Helpers every encoder shares live here.
"""
from mpskern import _native

SUFFIX = {_native.F32: "f32", _native.F16: "f16"}


def suffix(dtype):
    """The kernel-name suffix of a dtype code (_native.F32 -> "f32")."""
    try:
        return SUFFIX[dtype]
    except KeyError:
        raise TypeError(f"GPU kernels take float32 or float16 (dtype code {dtype!r})") from None


def cdiv(a, b):
    return -(-a // b)


def configure(backend, op, dtype, shape, config=None):
    """(config, lookup level) for a dispatch of `op`: the caller's `config` checked against
    the device's limits (level "forced"), else what mpskern.tuning.spaces.select picks for
    the op's shape key."""
    from mpskern.tuning import spaces
    info = backend.info
    if config is not None:
        cfg = dict(config)
        spaces.require(op, cfg, info)
        return cfg, "forced"
    choice = spaces.select(op, dtype, shape, info)
    return dict(choice.config), choice.level


def compile_config(backend, op, file, cfg, level, dtype, shape):
    """(cfg, level, pipeline): `cfg`'s kernel compiled. Metal may give a register-heavy
    pipeline fewer threads per threadgroup than the device's maximum; a configuration that
    needs more and was not pinned by the caller then steps down to the generic default
    that fits the pipeline. Raises ValueError naming the problem when nothing fits."""
    from mpskern.tuning import spaces
    sp = spaces.space(op)
    pipe = backend.pipeline(sp.kernel(cfg, dtype), file=file, macros=spaces.macros(op, cfg))
    if spaces.threads(op, cfg) > pipe.max_threads and level != "forced":
        fit = dict(backend.info, max_threads_per_threadgroup=pipe.max_threads)
        cfg, level = spaces.generic(op, dtype, shape, fit), "generic"
        pipe = backend.pipeline(sp.kernel(cfg, dtype), file=file, macros=spaces.macros(op, cfg))
    spaces.require(op, cfg, backend.info, pipeline_max_threads=pipe.max_threads)
    return cfg, level, pipe
