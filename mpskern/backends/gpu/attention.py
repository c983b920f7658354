"""scaled_dot_product_attention on the GPU backends (metal/attention.metal): which kernel,
which configuration, which grid. One threadgroup per (query block, head, batch entry):
grid (ceil(L / BQ), Hq, B), 4*BQ threads. The configuration ("attention" space,
declared below) fixes the query block BQ, the key block BK and the head capacity D
(>= E and Ev); `variant` picks attention_simd_* (simdgroup matrices) or attention_tiled_*.
The kernel reads the bool mask at [[buffer(3)]] and the additive one at [[buffer(4)]]; the
slot a call does not use is bound to q (never read).

The "attention" configuration space is declared here (SPACES, the tuning registry reads it
through AttentionFamily.spaces): a threadgroup of BQ/8 SIMD-groups (4*BQ threads) owns BQ
query rows and walks the keys in blocks of BK; D (compiled as MK_D) is the head-dimension
capacity, D >= max(E, Ev). Staged in threadgroup memory as float: Q (BQ x D), K and V
(BK x D each), and for the scalar variant the weights (BQ x BK). The shape key is
(B*Hq, L, S, E, Ev). docs/attention.md says why the blocks are what they are.
"""
from mpskern import _native
from mpskern._errors import Unsupported
from mpskern.backends.gpu.context import MAX_GRID_YZ, cdiv, configure, nothing, pipelines
from mpskern.tuning import spaces
from mpskern.tuning.space import FLOAT, Space

SPACE = "attention"
MASK_BOOL, MASK_ADD = 1, 2     # MK_ATTN_MASK_* (metal/mk_args.h)


def attention(ctx, args, dtype, q, k, v, mask, out, config=None):
    """Encoder (see context.py); `config` pins a configuration of the "attention" space."""
    B, Hq, L, S, E, Ev = (args[n] for n in ("B", "Hq", "L", "S", "E", "Ev"))
    if B * L * Ev == 0:
        return nothing()
    if head_capacity(E, Ev) is None:
        raise Unsupported(f"attention: head dimensions E={E}, Ev={Ev}; the Metal kernels hold "
                          f"up to {_PARAMS['D'][-1]} (use backend='cpu')")
    if Hq > MAX_GRID_YZ or B > MAX_GRID_YZ:
        raise Unsupported(f"attention: {B} batch entries x {Hq} heads: a grid dimension exceeds "
                          f"{MAX_GRID_YZ} threadgroups; split the batch into smaller calls")
    shape = (B * Hq, L, S, E, Ev)
    cfg, level = configure(ctx, SPACE, dtype, shape, config)
    cfg, level, (pipe,) = pipelines(ctx, SPACE, dtype, shape, cfg, level, lambda c: [
        (spaces.SPACES[SPACE].kernel(c, dtype), spaces.threads(SPACE, c))])
    bo = ctx.buffer(out, writable=True)
    bq = ctx.buffer(q) if q.size else bo          # E = 0 or S = 0: empty operands are never read
    bk = ctx.buffer(k) if k.size else bq
    bv = ctx.buffer(v) if v.size else bq
    bm = ctx.buffer(mask) if mask is not None and mask.size else bq
    kind = args["mask"]
    run = [dict(pipeline=pipe, grid=(cdiv(L, cfg["BQ"]), Hq, B),
                threadgroup=(spaces.threads(SPACE, cfg), 1, 1),
                bindings=[bq, bk, bv, bm if kind == MASK_BOOL else bq,
                          bm if kind == MASK_ADD else bq, bo,
                          _native.pack_args("attention", args)])]
    return ctx.submit(run, dict(cfg, kernel=pipe.name, level=level), outputs=[bo])


# -- the "attention" configuration space ------------------------------------------------
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
