"""scaled_dot_product_attention on the GPU backends (metal/attention.metal): which kernel,
which configuration, which grid. One threadgroup per (query block, head, batch entry):
grid (ceil(L / BQ), Hq, B), 4*BQ threads. The configuration ("attention" space,
mpskern/tuning/spaces.py) fixes the query block BQ, the key block BK and the head capacity D
(>= E and Ev); `variant` picks attention_simd_* (simdgroup matrices) or attention_tiled_*.
The kernel reads the bool mask at [[buffer(3)]] and the additive one at [[buffer(4)]]; the
slot a call does not use is bound to q (never read).
"""
from mpskern import _native
from mpskern._errors import Unsupported
from mpskern.backends.gpu.context import MAX_GRID_YZ, cdiv, configure, nothing, pipelines
from mpskern.tuning import spaces

SPACE = "attention"
MASK_BOOL, MASK_ADD = 1, 2     # MK_ATTN_MASK_* (metal/mk_args.h)


def attention(ctx, args, dtype, q, k, v, mask, out, config=None):
    """Encoder (see context.py); `config` pins a configuration of the "attention" space."""
    B, Hq, L, S, E, Ev = (args[n] for n in ("B", "Hq", "L", "S", "E", "Ev"))
    if B * L * Ev == 0:
        return nothing()
    if spaces.head_capacity(E, Ev) is None:
        raise Unsupported(f"attention: head dimensions E={E}, Ev={Ev}; the Metal kernels hold "
                          f"up to {spaces.SPACES[SPACE].params['D'][-1]} (use backend='cpu')")
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
