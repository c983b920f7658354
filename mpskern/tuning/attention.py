"""The attention space (metal/attention.metal).

A threadgroup of BQ/8 SIMD-groups (4*BQ threads) owns BQ query rows and walks the keys in
blocks of BK; D (compiled as MK_D) is the head-dimension capacity, D >= max(E, Ev). Staged
in threadgroup memory as float: Q (BQ x D), K and V (BK x D each), and for the scalar
variant the weights (BQ x BK). The shape key is (B*Hq, L, S, E, Ev). docs/attention.md
says why the blocks are what they are.
"""
from mpskern.tuning.space import FLOAT, Space

_PARAMS = dict(BQ=(8, 16, 32, 64), BK=(8, 16, 24, 32, 48, 64),
               D=(16, 32, 64, 96, 128, 160, 192, 256))
# generic(): the head's capacity, then the first (BQ, BK) that fits 32 KiB. MLX's steel
# attention (32-row query blocks; 32-key blocks for heads up to 64, 16 above) comes first,
# then smaller blocks for wide heads (256 needs 8 x 8 with the scalar variant's weights).
_LADDER = ((32, 32), (32, 16), (16, 16), (16, 8), (8, 8))


def _tg_memory(c):
    f = c["BQ"] * c["D"] + 2 * c["BK"] * c["D"]
    return FLOAT * (f + (c["BQ"] * c["BK"] if c["variant"] == "tiled" else 0))


def _rules(c):
    return [f"{k}={c[k]} is not a multiple of 8" for k in ("BQ", "BK", "D") if c[k] % 8]


def _fits(c, shape):
    need = max(shape[3], shape[4], 1)
    if c["D"] < need:
        return [f"head dimension capacity D={c['D']} < max(E, Ev) = {need}"]
    return []


def head_capacity(E, Ev):
    """The smallest D of the attention space that holds both head dimensions (None: more
    than the kernels hold)."""
    need = max(E, Ev, 1)
    return next((d for d in _PARAMS["D"] if d >= need), None)


def _ladder(shape):
    d = head_capacity(shape[3], shape[4]) if shape is not None else 64
    d = d or _PARAMS["D"][-1]
    return [{"variant": "simd", "BQ": bq, "BK": bk, "D": d} for bq, bk in _LADDER]


def _defaults(dtype, shape=None):
    """The ladder's blocks that fit the 32 KiB of threadgroup memory every Apple GPU has
    (the tiled variant's last, for GPUs without simdgroup matrices)."""
    simd = [c for c in _ladder(shape) if _tg_memory(c) <= 32768]
    tiled = [dict(c, variant="tiled") for c in _ladder(shape)]       # no simdgroup matrices
    return simd + [c for c in tiled if _tg_memory(c) <= 32768]


SPACES = {
    "attention": Space("attention", "attention.metal", ("simd", "tiled"), _PARAMS,
                       doc="BQ query rows per threadgroup (BQ/8 SIMD-groups), BK keys per "
                           "block, D head-dimension capacity (>= E and Ev)",
                       threads=lambda c: 4 * c["BQ"], tg_memory=_tg_memory, rules=_rules,
                       fits=_fits, defaults=_defaults,
                       # the generic choice at every head capacity
                       shipped=tuple(_defaults("float32", (1, 1, 1, d, d))[0]
                                     for d in _PARAMS["D"]),
                       fallback=lambda dtype, shape: _ladder(shape)[-1]),
}
