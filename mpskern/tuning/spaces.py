"""The one place that declares mpskern's tunable kernels: each op's configuration space,
the rules that make a configuration valid on a device, the macros a configuration compiles
with, and the rule-based generic default.

A configuration is a flat JSON-friendly dict, e.g. for gemm

    {"variant": "simd", "BM": 64, "BN": 64, "BK": 16, "WM": 2, "WN": 2}

`variant` picks the kernel (`<op>_<variant>_<f32|f16>` in metal/<file>); the other keys
are tile parameters passed to the compiler as macros MK_<KEY> (the same dict goes to
Metal's preprocessorMacros and to the simulator's -D); keys listed in a space's `runtime`
(gemm's optional `split_k`) change the dispatch, not the compiled kernel.

Validity (problems() lists every violation, in words):
  - the space's own rules: kernel divisibility (gemm/conv2d: BM % 8*WM, BN % 8*WN, BK % 8,
    which metal/mk_gemm_tile.h also static_asserts), known keys and values;
  - the device's limits from _native.Device.info(): threads per threadgroup <=
    max_threads_per_threadgroup (and <= a pipeline's maxTotalThreadsPerThreadgroup when
    given), a multiple of simd_width, threadgroup memory <= max_threadgroup_memory.

The packaged per-family defaults (with provenance) are data: mpskern/tuning/defaults/
apple<N>.json; lookup.py picks among user database, family default and generic().
select() is the call an encoder makes.
"""
import itertools
from dataclasses import dataclass, field

from mpskern.tuning import lookup

FLOAT = 4   # bytes per staged element: tiles are staged in threadgroup memory as float


@dataclass(frozen=True)
class Space:
    op: str
    file: str                       # metal/ file holding the kernels
    variants: tuple                 # kernel variants (the config's "variant")
    params: dict                    # tile parameter -> candidate values (compiled as MK_<name>)
    runtime: dict = field(default_factory=dict)   # dispatch-time parameter -> candidates
    doc: str = ""

    def kernel(self, config, dtype):
        """The kernel's name: op_variant_dtype."""
        sfx = {"float32": "f32", "float16": "f16"}[lookup.dtype_name(dtype)]
        return f"{self.op}_{config['variant']}_{sfx}"


def _gemm_threads(c):
    return 32 * c["WM"] * c["WN"]


def _gemm_tg_memory(c):
    """Bytes of threadgroup memory of the variant (mk_gemm_tile.h: MK_AB_FLOATS for tiled,
    MK_SMEM_FLOATS for simd, which reuses the staging area for the output tile)."""
    ab = c["BM"] * c["BK"] + c["BK"] * c["BN"]
    if c["variant"] == "simd":
        return FLOAT * max(ab, c["BM"] * c["BN"])
    return FLOAT * ab


def _gemm_rules(c):
    out = []
    if c["BM"] % (8 * c["WM"]):
        out.append(f"BM={c['BM']} is not a multiple of 8*WM={8 * c['WM']}")
    if c["BN"] % (8 * c["WN"]):
        out.append(f"BN={c['BN']} is not a multiple of 8*WN={8 * c['WN']}")
    if c["BK"] % 8:
        out.append(f"BK={c['BK']} is not a multiple of 8")
    return out


# Candidate values: multiples of 8 (fragments), up to what 32 KiB of float staging allows.
_TILES = dict(BM=(16, 32, 48, 64, 96, 128), BN=(16, 32, 48, 64, 96, 128),
              BK=(8, 16, 24, 32), WM=(1, 2, 4), WN=(1, 2, 4))

SPACES = {
    "gemm": Space("gemm", "gemm.metal", ("simd", "tiled"), _TILES,
                  runtime=dict(split_k=(1, 2, 4, 8, 16)),
                  doc="BM x BN output tile per threadgroup, BK-deep K slices, WM x WN "
                      "SIMD-groups; split_k > 1 sums K chunks in a second pass"),
    "conv2d": Space("conv2d", "conv2d.metal", ("simd", "tiled"), _TILES,
                    doc="implicit GEMM: Kg x N*P*Q output per group, K = Cg*R*S; the "
                        "GEMM's tile parameters"),
    "conv2d_depthwise": Space("conv2d", "conv2d.metal", ("depthwise",), {},
                              runtime=dict(threads=(32, 64, 128, 256, 512, 1024)),
                              doc="one thread per output element; threads per threadgroup"),
}

# How each space sizes a threadgroup: threads, threadgroup memory bytes, own rules.
_SIZING = {
    "gemm": (_gemm_threads, _gemm_tg_memory, _gemm_rules),
    # conv2d adds a 12-byte column table per tile column (metal/conv2d.metal)
    "conv2d": (_gemm_threads, lambda c: _gemm_tg_memory(c) + 12 * c["BN"], _gemm_rules),
    "conv2d_depthwise": (lambda c: c.get("threads", 256), lambda c: 0, lambda c: []),
}


def space(op):
    try:
        return SPACES[op]
    except KeyError:
        raise ValueError(f"no tuning space for op {op!r}; known: {', '.join(SPACES)}") from None


def threads(op, config):
    """Threads per threadgroup of `config`."""
    return _SIZING[op][0](config)


def threadgroup_memory(op, config):
    """Bytes of threadgroup memory one threadgroup of `config` uses."""
    return _SIZING[op][1](config)


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
    out += _SIZING[op][2](config)
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
    if shape is not None and op in _SHAPE_RULES:
        out += _SHAPE_RULES[op](config, tuple(shape))
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


# Rule-based defaults, used when neither the user database nor the family's packaged
# defaults have a valid entry (an unknown GPU family, or a device with smaller limits).
# gemm/conv2d's first choice is a public heuristic, not measured by mpskern: MLX's steel
# GEMM uses 64x64x16 tiles with 2x2 SIMD-groups for float32 and 1x2 for half
# (mlx/backend/metal/matmul.cpp); the rest step down until one fits the device.
# Depthwise: 256 threads, a common choice for one-thread-per-output kernels.
_GEMM_FALLBACKS = (dict(BM=32, BN=32, BK=16, WM=2, WN=2), dict(BM=32, BN=32, BK=8, WM=1, WN=1),
                   dict(BM=16, BN=16, BK=8, WM=1, WN=1))


def generic(op, dtype, shape=None, device_info=None):
    """The generic default configuration of `op` for `dtype` (shape is the op's key;
    device_info, when given, lets the rule step down to what the device allows)."""
    dt = lookup.dtype_name(dtype)
    if op in ("gemm", "conv2d"):
        first = dict(BM=64, BN=64, BK=16, WM=2 if dt == "float32" else 1, WN=2)
        choices = [{"variant": "simd", **t} for t in (first,) + _GEMM_FALLBACKS]
    elif op == "conv2d_depthwise":
        choices = [{"variant": "depthwise", "threads": t} for t in (256, 128, 64, 32)]
    elif op in _ROW_OPS:
        return _row_generic(op, shape, device_info)
    elif op == "attention":
        return _att_generic(dtype, shape, device_info)
    elif op in ("softmax_cols", "pool2d"):
        choices = [{"variant": SPACES[op].variants[0], "threads": t} for t in (256, 128, 64, 32)]
    elif op == "batch_norm":
        choices = [dict(BATCH_NORM_DEFAULT)] + [
            {"variant": "stats", "TPR": t, "RPG": 1, "threads": t} for t in (128, 64, 32)]
    else:
        space(op)
        raise ValueError(f"no generic default for {op!r}")
    if device_info is not None:
        for c in choices:
            if not problems(op, c, device_info):
                return c
    return choices[0]


def split_k(config, batch, M, N, K):
    """How many K chunks a gemm of this shape sums in parallel: the configuration's
    `split_k` when it has one, else a rule (mpskern's own, not measured): when the output
    has fewer than 16 tiles but K is at least 16 times the larger of M and N, split K so
    each chunk keeps at least 256 of it (at most 16 chunks)."""
    if "split_k" in config:
        return int(config["split_k"])
    tiles = -(-M // config["BM"]) * -(-N // config["BN"]) * batch
    if tiles >= 16 or K < 16 * max(M, N) or K < 512:
        return 1
    s = 1
    while s < 16 and K // (2 * s) >= 256 and tiles * s < 16:
        s *= 2
    return s


def select(op, dtype, shape, device_info):
    """The configuration a dispatch uses: a lookup.Choice (config, level, explain()).
    Levels: forced > user database (exact shape, bucket) > the family's packaged default >
    generic(); every level must pass problems() on this device. `shape` is the op's key:
    gemm (batch, M, N, K); conv2d its GEMM view (groups, Kg, N*P*Q, Cg*R*S);
    conv2d_depthwise (N, K, P, Q); softmax and softmax_cols (outer, n, inner); rownorm and
    group_norm (rows, n); batch_norm (N, C, HW); pool2d (N, C, P, Q); attention
    (B*Hq, L, S, E, Ev)."""
    return lookup.choose(op, dtype, shape, device_info,
                         generic=generic(op, dtype, shape, device_info),
                         valid=valid_for(op, device_info, shape))


# -- row reductions and elementwise kernels (metal/softmax.metal, norm.metal, pool.metal) ----
# Row kernels: MK_TPR threads per row (whole SIMD-groups), MK_RPG rows per threadgroup,
# MK_VPT values per thread held in registers by the "rows" variant (a row of n elements
# needs n <= TPR*VPT); "looped" streams rows of any length. Threadgroup memory: two float
# arrays of one entry per SIMD-group (metal/mk_rowreduce.h).
_ROW_PARAMS = dict(TPR=(32, 64, 128, 256, 512, 1024), RPG=(1, 2, 4, 8, 16, 32),
                   VPT=(1, 2, 4, 8, 16))
_THREADS = dict(threads=(32, 64, 128, 256, 512, 1024))
_SPLITS = (1, 2, 4, 8, 16, 32, 64)
# looped holds nothing in registers; its VPT stays at this value so it shares one compiled
# library with the rows configuration of the same TPR and RPG (and is not searched twice)
LOOPED_VPT = 8
_ROW_OPS = ("softmax", "rownorm", "group_norm")

SPACES.update({
    "softmax": Space("softmax", "softmax.metal", ("rows", "looped"), _ROW_PARAMS,
                     doc="softmax / log_softmax, TPR threads per row, RPG rows per "
                         "threadgroup, VPT values per thread (rows variant)"),
    "softmax_cols": Space("softmax", "softmax.metal", ("cols",), {}, runtime=_THREADS,
                          doc="strided rows (inner > 1), one thread per row; threads per "
                              "threadgroup"),
    "rownorm": Space("norm_rownorm", "norm.metal", ("rows", "looped"), _ROW_PARAMS,
                     doc="layer_norm / rms_norm rows; as softmax"),
    "group_norm": Space("norm_group", "norm.metal", ("rows", "looped"), _ROW_PARAMS,
                        doc="a (sample, group) is one contiguous row; as softmax"),
    "batch_norm": Space("norm_batch", "norm.metal", ("stats",),
                        dict(TPR=_ROW_PARAMS["TPR"], RPG=_ROW_PARAMS["RPG"]),
                        runtime=dict(_THREADS, split=_SPLITS),
                        doc="training statistics: a chunk of a channel per TPR threads "
                            "(`split` chunks per channel, RPG chunks per threadgroup); "
                            "`threads` per threadgroup of the elementwise normalisation"),
    "pool2d": Space("pool", "pool.metal", ("direct",), {}, runtime=_THREADS,
                    doc="one thread per output element (pool_max / pool_avg by the mode); "
                        "threads per threadgroup"),
})


def _row_threads(c):
    return c["TPR"] * c["RPG"]


def _row_tg_memory(c):
    return FLOAT * 2 * max(1, c["TPR"] * c["RPG"] // 32)


def _row_rules(c):
    out = []
    if c["TPR"] % 32:
        out.append(f"TPR={c['TPR']} is not a whole number of SIMD-groups (32 threads)")
    if c.get("variant") == "looped" and c.get("VPT", LOOPED_VPT) != LOOPED_VPT:
        out.append(f"the looped variant keeps VPT={LOOPED_VPT} (it holds no values in "
                   "registers)")
    if "threads" in c and c["threads"] not in _THREADS["threads"]:
        out.append(f"threads={c['threads']} is not one of {list(_THREADS['threads'])}")
    if "split" in c and c["split"] not in _SPLITS:
        out.append(f"split={c['split']} is not one of {list(_SPLITS)}")
    return out


def _elementwise_rules(c):
    t = c.get("threads", 256)
    return [] if t in _THREADS["threads"] else [
        f"threads={t} is not one of {list(_THREADS['threads'])}"]


def _row_fits(c, shape):
    n = shape[1]
    if c["variant"] == "rows" and n > c["TPR"] * c["VPT"]:
        return [f"a row of {n} elements does not fit TPR*VPT={c['TPR'] * c['VPT']} registers "
                "(use a larger TPR or VPT, or the looped variant)"]
    return []


_SIZING.update({
    "softmax": (_row_threads, _row_tg_memory, _row_rules),
    "rownorm": (_row_threads, _row_tg_memory, _row_rules),
    "group_norm": (_row_threads, _row_tg_memory, _row_rules),
    "batch_norm": (_row_threads, _row_tg_memory, _row_rules),
    "softmax_cols": (lambda c: c.get("threads", 256), lambda c: 0, _elementwise_rules),
    "pool2d": (lambda c: c.get("threads", 256), lambda c: 0, _elementwise_rules),
})
_SHAPE_RULES = {op: _row_fits for op in _ROW_OPS}

# What the row ops ship (mpskern's own choice, not measured yet): the smallest
# register-resident configuration that holds the row, else looped with 1024 threads.
# Short rows pack 8 per threadgroup so a 256-thread group still has work.
ROW_LADDER = (
    {"variant": "rows", "TPR": 32, "RPG": 8, "VPT": 4},        # n <= 128
    {"variant": "rows", "TPR": 256, "RPG": 1, "VPT": 8},       # n <= 2048
    {"variant": "rows", "TPR": 1024, "RPG": 1, "VPT": 8},      # n <= 8192
    {"variant": "looped", "TPR": 1024, "RPG": 1, "VPT": LOOPED_VPT},
)
BATCH_NORM_DEFAULT = {"variant": "stats", "TPR": 256, "RPG": 1, "threads": 256}


def _row_generic(op, shape, device_info=None):
    """The first ladder entry that holds the row (and fits the device); on a device with
    fewer threads per threadgroup than the ladder assumes, looped with the most it allows."""
    for c in ROW_LADDER:
        if ((shape is None or not _row_fits(c, shape))
                and (device_info is None or not problems(op, c, device_info))):
            return dict(c)
    if device_info is None:
        return dict(ROW_LADDER[-1])
    for tpr in sorted(_ROW_PARAMS["TPR"], reverse=True):
        c = {"variant": "looped", "TPR": tpr, "RPG": 1, "VPT": LOOPED_VPT}
        if not problems(op, c, device_info):
            return c
    return dict(ROW_LADDER[-1])     # nothing fits: select() reports why


def stats_split(config, N, C, HW):
    """How many chunks batch_norm's training statistics cut each channel into: the
    configuration's `split` when it has one, else a rule (mpskern's own, not measured): at
    least ~64 threadgroups in all, each chunk at least 8 elements per thread; never an empty
    chunk."""
    count = N * HW
    if "split" in config:
        s = int(config["split"])
    else:
        s = 1
        while (s < _SPLITS[-1] and C * s < 64
               and count // (2 * s) >= 8 * config["TPR"]):
            s *= 2
    s = max(1, min(s, count))
    return -(-count // -(-count // s))      # chunks of ceil(count/s): none empty


def shipped(op):
    """The configurations generic() can return for `op` (what tests must cover)."""
    if op in _ROW_OPS:
        return [dict(c) for c in ROW_LADDER]
    if op == "batch_norm":
        return [dict(BATCH_NORM_DEFAULT)]
    if op in ("gemm", "conv2d"):
        firsts = [generic(op, dt) for dt in ("float32", "float16")]
        return firsts + [{"variant": "simd", **t} for t in _GEMM_FALLBACKS]
    if op == "conv2d_depthwise":
        return [{"variant": "depthwise", "threads": t} for t in (256, 128, 64, 32)]
    if op == "attention":     # the generic choice at every head capacity
        return [_att_generic("float32", (1, 1, 1, d, d), None) for d in _ATT_PARAMS["D"]]
    return [generic(op, "float32")]


# -- attention (metal/attention.metal) --------------------------------------------------------
# A threadgroup of BQ/8 SIMD-groups (4*BQ threads) owns BQ query rows and walks the keys in
# blocks of BK; D (compiled as MK_D) is the head-dimension capacity, D >= max(E, Ev). Staged
# in threadgroup memory as float: Q (BQ x D), K and V (BK x D each), and for the scalar
# variant the weights (BQ x BK). The shape key is (B*Hq, L, S, E, Ev). docs/attention.md
# says why the blocks are what they are.
_ATT_PARAMS = dict(BQ=(8, 16, 32, 64), BK=(8, 16, 24, 32, 48, 64),
                   D=(16, 32, 64, 96, 128, 160, 192, 256))
# generic(): the head's capacity, then the first (BQ, BK) that fits 32 KiB. MLX's steel
# attention (32-row query blocks; 32-key blocks for heads up to 64, 16 above) comes first,
# then smaller blocks for wide heads (256 needs 8 x 8 with the scalar variant's weights).
_ATT_LADDER = ((32, 32), (32, 16), (16, 16), (16, 8), (8, 8))

SPACES["attention"] = Space("attention", "attention.metal", ("simd", "tiled"), _ATT_PARAMS,
                            doc="BQ query rows per threadgroup (BQ/8 SIMD-groups), BK keys per "
                                "block, D head-dimension capacity (>= E and Ev)")


def _att_tg_memory(c):
    f = c["BQ"] * c["D"] + 2 * c["BK"] * c["D"]
    return FLOAT * (f + (c["BQ"] * c["BK"] if c["variant"] == "tiled" else 0))


def _att_rules(c):
    return [f"{k}={c[k]} is not a multiple of 8" for k in ("BQ", "BK", "D") if c[k] % 8]


def _att_fits(c, shape):
    need = max(shape[3], shape[4], 1)
    if c["D"] < need:
        return [f"head dimension capacity D={c['D']} < max(E, Ev) = {need}"]
    return []


def head_capacity(E, Ev):
    """The smallest D of the attention space that holds both head dimensions (None: more
    than the kernels hold)."""
    need = max(E, Ev, 1)
    return next((d for d in _ATT_PARAMS["D"] if d >= need), None)


def _att_generic(dtype, shape, device_info):
    d = head_capacity(shape[3], shape[4]) if shape is not None else 64
    d = d or _ATT_PARAMS["D"][-1]
    choices = [{"variant": "simd", "BQ": bq, "BK": bk, "D": d} for bq, bk in _ATT_LADDER]
    for c in choices:
        if not problems("attention", c, device_info or {}, shape=shape):
            return c
    return choices[-1]


_SIZING["attention"] = (lambda c: 4 * c["BQ"], _att_tg_memory, _att_rules)
_SHAPE_RULES["attention"] = _att_fits
