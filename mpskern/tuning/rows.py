"""The row-reduction and elementwise spaces (metal/softmax.metal, norm.metal, pool.metal,
adaptive_pool.metal, pool_indices.metal):
softmax, softmax_cols, rownorm, group_norm, batch_norm, pool2d, adaptive_pool2d,
pool2d_indices, with their rules and rule-based defaults.

Row kernels: MK_TPR threads per row (whole SIMD-groups), MK_RPG rows per threadgroup,
MK_VPT values per thread held in registers by the "rows" variant (a row of n elements
needs n <= TPR*VPT); "looped" streams rows of any length. Threadgroup memory: two float
arrays of one entry per SIMD-group (metal/mk_rowreduce.h). The shape key of a row space is
(rows, n) (softmax: (outer, n, inner)).
"""
from mpskern.tuning.space import FLOAT, Space

_ROW_PARAMS = dict(TPR=(32, 64, 128, 256, 512, 1024), RPG=(1, 2, 4, 8, 16, 32),
                   VPT=(1, 2, 4, 8, 16))
_THREADS = dict(threads=(32, 64, 128, 256, 512, 1024))
_SPLITS = (1, 2, 4, 8, 16, 32, 64)
# looped holds nothing in registers; its VPT stays at this value so it shares one compiled
# library with the rows configuration of the same TPR and RPG (and is not searched twice)
LOOPED_VPT = 8

# What the row ops ship (mpskern's own choice, not measured yet): the smallest
# register-resident configuration that holds the row, else looped with 1024 threads.
# Short rows pack 8 per threadgroup so a 256-thread group still has work.
LADDER = (
    {"variant": "rows", "TPR": 32, "RPG": 8, "VPT": 4},        # n <= 128
    {"variant": "rows", "TPR": 256, "RPG": 1, "VPT": 8},       # n <= 2048
    {"variant": "rows", "TPR": 1024, "RPG": 1, "VPT": 8},      # n <= 8192
    {"variant": "looped", "TPR": 1024, "RPG": 1, "VPT": LOOPED_VPT},
)
BATCH_NORM_DEFAULT = {"variant": "stats", "TPR": 256, "RPG": 1, "threads": 256}


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


def _row_fits(c, shape):
    n = shape[1]
    if c["variant"] == "rows" and n > c["TPR"] * c["VPT"]:
        return [f"a row of {n} elements does not fit TPR*VPT={c['TPR'] * c['VPT']} registers "
                "(use a larger TPR or VPT, or the looped variant)"]
    return []


def _row_defaults(dtype, shape=None):
    """The first ladder entry that holds the row (and fits the device); on a device with
    fewer threads per threadgroup than the ladder assumes, looped with the most it allows."""
    return [dict(c) for c in LADDER] + [
        {"variant": "looped", "TPR": t, "RPG": 1, "VPT": LOOPED_VPT}
        for t in sorted(_ROW_PARAMS["TPR"], reverse=True)]


def _elementwise_rules(c):
    t = c.get("threads", 256)
    return [] if t in _THREADS["threads"] else [
        f"threads={t} is not one of {list(_THREADS['threads'])}"]


def _row_space(op, file, doc):
    return Space(op, file, ("rows", "looped"), _ROW_PARAMS, doc=doc, threads=_row_threads,
                 tg_memory=_row_tg_memory, rules=_row_rules, fits=_row_fits,
                 defaults=_row_defaults, shipped=LADDER,
                 fallback=lambda dtype, shape: LADDER[-1])


def _elementwise_space(op, file, variant, doc):
    choices = tuple({"variant": variant, "threads": t} for t in (256, 128, 64, 32))
    return Space(op, file, (variant,), {}, runtime=_THREADS, doc=doc,
                 threads=lambda c: c.get("threads", 256), tg_memory=lambda c: 0,
                 rules=_elementwise_rules, defaults=lambda dtype, shape=None: list(choices),
                 shipped=choices[:1])


SPACES = {
    "softmax": _row_space("softmax", "softmax.metal",
                          "softmax / log_softmax, TPR threads per row, RPG rows per "
                          "threadgroup, VPT values per thread (rows variant)"),
    "softmax_cols": _elementwise_space("softmax", "softmax.metal", "cols",
                                       "strided rows (inner > 1), one thread per row; threads "
                                       "per threadgroup"),
    "rownorm": _row_space("norm_rownorm", "norm.metal", "layer_norm / rms_norm rows; as softmax"),
    "group_norm": _row_space("norm_group", "norm.metal",
                             "a (sample, group) is one contiguous row; as softmax"),
    "batch_norm": Space("norm_batch", "norm.metal", ("stats",),
                        dict(TPR=_ROW_PARAMS["TPR"], RPG=_ROW_PARAMS["RPG"]),
                        runtime=dict(_THREADS, split=_SPLITS),
                        doc="training statistics: a chunk of a channel per TPR threads "
                            "(`split` chunks per channel, RPG chunks per threadgroup); "
                            "`threads` per threadgroup of the elementwise normalisation",
                        threads=_row_threads, tg_memory=_row_tg_memory, rules=_row_rules,
                        defaults=lambda dtype, shape=None: [dict(BATCH_NORM_DEFAULT)] + [
                            {"variant": "stats", "TPR": t, "RPG": 1, "threads": t}
                            for t in (128, 64, 32)],
                        shipped=(BATCH_NORM_DEFAULT,)),
    "pool2d": _elementwise_space("pool", "pool.metal", "direct",
                                 "pool_max / pool_avg by the mode, a tile of outputs per "
                                 "threadgroup (metal/mk_pool_tile.h; the variant keeps its "
                                 "old name); threads per threadgroup"),
    "adaptive_pool2d": _elementwise_space("adaptive_pool", "adaptive_pool.metal", "avg",
                                          "adaptive_avg_pool2d, a tile of outputs per "
                                          "threadgroup; threads per threadgroup"),
    "pool2d_indices": _elementwise_space("pool_indices", "pool_indices.metal", "max",
                                         "max_pool2d with return_indices, a tile of "
                                         "outputs per threadgroup; threads per threadgroup"),
}


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
