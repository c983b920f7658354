"""The tunable kernels' configuration spaces, one registry (SPACES: the declarations of
tuning/tiles.py and rows.py, and those a kernel family's GPU encoder declares itself,
Family.spaces(); tuning/space.py says what one declares), and what dispatch
asks of them: the rules that make a configuration valid on a device, the macros it compiles
with, the rule-based generic default, and select(), the call an encoder makes.

Validity (problems() lists every violation, in words):
  - the space's own rules: kernel divisibility (gemm/conv2d: BM % 8*WM, BN % 8*WN, BK % 8,
    which metal/mk_gemm_tile.h also static_asserts), known keys and values;
  - the device's limits from _native.Device.info(): threads per threadgroup <=
    max_threads_per_threadgroup (and <= a pipeline's maxTotalThreadsPerThreadgroup when
    given), a multiple of simd_width, threadgroup memory <= max_threadgroup_memory;
  - with the op's shape key, the rules that depend on the problem (a row held in
    registers must fit them).

The packaged per-family defaults (with provenance) are data: mpskern/tuning/defaults/
apple<N>.json; lookup.py picks among user database, family default and generic().
"""
import itertools
from collections.abc import Mapping

from mpskern.backends import family
from mpskern.tuning import lookup, rows, tiles
from mpskern.tuning.rows import stats_split  # noqa: F401
from mpskern.tuning.tiles import split_k  # noqa: F401


class _Registry(Mapping):
    """Every space by name. The families' own (an encoder module's SPACES) are read on the
    first lookup, which imports those encoders: only the GPU path and the tools look."""
    def __init__(self):
        self._all = None

    def _spaces(self):
        if self._all is None:
            found = {**tiles.SPACES, **rows.SPACES}
            for fam in family.families():
                found.update(fam.spaces())
            self._all = found
        return self._all

    def __getitem__(self, name):
        return self._spaces()[name]

    def __iter__(self):
        return iter(self._spaces())

    def __len__(self):
        return len(self._spaces())


SPACES = _Registry()


def space(op):
    try:
        return SPACES[op]
    except KeyError:
        raise ValueError(f"no tuning space for op {op!r}; known: {', '.join(SPACES)}") from None


def threads(op, config):
    """Threads per threadgroup of `config`."""
    return space(op).threads(config)


def threadgroup_memory(op, config):
    """Bytes of threadgroup memory one threadgroup of `config` uses."""
    return space(op).tg_memory(config)


def macros(op, config):
    """The preprocessor macros `config` compiles with ({"MK_BM": 64, ...})."""
    sp = space(op)
    return {f"MK_{k}": int(config[k]) for k in sp.params}


def problems(op, config, device_info, *, pipeline_max_threads=None, shape=None):
    """Why `config` cannot run on the device described by `device_info` (a list of
    sentences; empty when it can). With the op's `shape` key, also the rules that depend on
    the problem (e.g. a row held in registers must fit them)."""
    sp = space(op)
    want = {"variant", *sp.params}
    keys = set(config)
    out = []
    missing = want - keys
    extra = keys - want - set(sp.runtime)
    if missing:
        out.append(f"missing keys {sorted(missing)}")
    if extra:
        out.append(f"unknown keys {sorted(extra)}")
    if out:
        return out
    if config["variant"] not in sp.variants:
        out.append(f"variant {config['variant']!r} is not one of {list(sp.variants)}")
    for k in list(sp.params) + [k for k in sp.runtime if k in config]:
        v = config[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            out.append(f"{k}={v!r} is not a positive integer")
    if out:
        return out
    if "split_k" in config and config["split_k"] not in sp.runtime.get("split_k", ()):
        out.append(f"split_k={config['split_k']} is not one of {list(sp.runtime['split_k'])}")
    out += sp.rules(config)
    family = device_info.get("family") or 7
    if config["variant"] == "simd" and family < 7:
        out.append(f"variant 'simd' needs simdgroup matrices (Apple7 or newer); this GPU is Apple{family}")
    t = threads(op, config)
    simd = device_info.get("simd_width") or 32
    max_t = device_info.get("max_threads_per_threadgroup") or 1024
    if t % simd:
        out.append(f"{t} threads per threadgroup is not a multiple of the SIMD width {simd}")
    if t > max_t:
        out.append(f"{t} threads per threadgroup > the device's {max_t}")
    if pipeline_max_threads and t > pipeline_max_threads:
        out.append(f"{t} threads per threadgroup > the pipeline's {pipeline_max_threads}")
    mem = threadgroup_memory(op, config)
    max_mem = device_info.get("max_threadgroup_memory") or 32768
    if mem > max_mem:
        out.append(f"{mem} B of threadgroup memory > the device's {max_mem} B")
    if shape is not None:
        out += sp.fits(config, tuple(shape))
    return out


def valid_for(op, device_info, shape=None):
    """A `valid(config)` callable for lookup.choose and search.search: None when usable,
    else the reasons joined."""
    def valid(config):
        p = problems(op, config, device_info, shape=shape)
        return "; ".join(p) if p else None
    return valid


def require(op, config, device_info, *, pipeline_max_threads=None, shape=None):
    """Raise ValueError naming every problem of `config` on this device."""
    p = problems(op, config, device_info, pipeline_max_threads=pipeline_max_threads,
                 shape=shape)
    if p:
        raise ValueError(f"{op} configuration {config} is invalid on "
                         f"{device_info.get('name', 'this device')}: {'; '.join(p)}")


def candidates(op, device_info, *, variants=None):
    """Every valid configuration of the space on this device (tile parameters only; gemm's
    split_k follows its rule unless a caller adds it). Unordered by preference: the tuner
    (tuner.candidates_for) orders and prunes by problem shape."""
    sp = space(op)
    names = list(sp.params) or list(sp.runtime)
    values = [sp.params.get(n) or sp.runtime[n] for n in names]
    out = []
    for v in variants or sp.variants:
        for combo in itertools.product(*values):
            cfg = {"variant": v, **dict(zip(names, combo))}
            if not problems(op, cfg, device_info):
                out.append(cfg)
    return out


def generic(op, dtype, shape=None, device_info=None):
    """The generic default configuration of `op` for `dtype`: the first of the space's
    defaults that holds the problem (`shape`, its key) and fits the device (`device_info`);
    either may be None (not checked). When none fits, the space's fallback (select() says
    why)."""
    sp = space(op)
    choices = sp.defaults(dtype, shape)
    for c in choices:
        if ((shape is None or not sp.fits(c, tuple(shape)))
                and (device_info is None or not problems(op, c, device_info))):
            return dict(c)
    return dict(choices[0] if sp.fallback is None else sp.fallback(dtype, shape))


def shipped(op):
    """The configurations generic() can return for `op` (what tests must cover)."""
    return [dict(c) for c in space(op).shipped]


def select(op, dtype, shape, device_info):
    """The configuration a dispatch uses: a lookup.Choice (config, level, explain()).
    Levels: forced > user database (exact shape, bucket) > the family's packaged default >
    generic(); every level must pass problems() on this device. `shape` is the op's key:
    gemm (batch, M, N, K); conv2d its GEMM view (groups, Kg, N*P*Q, Cg*R*S);
    conv2d_depthwise (N, K, P, Q); softmax and softmax_cols (outer, n, inner); rownorm and
    group_norm (rows, n); batch_norm (N, C, HW); pool2d (N, C, P, Q); a space an encoder
    declares says its own (backends/gpu/<family>.py)."""
    return lookup.choose(op, dtype, shape, device_info,
                         generic=generic(op, dtype, shape, device_info),
                         valid=valid_for(op, device_info, shape))
