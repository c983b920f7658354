"""scaled_dot_product_attention (mk_attention_args), with torch.nn.functional's semantics and
argument rules: leading batch dimensions broadcast, heads broadcast (or, with enable_gqa,
key/value head counts that divide the query's), a bool or additive mask broadcastable to the
scores (..., H, L, S) without enlarging them, torch's top-left causal triangle, scale
defaulting to 1/sqrt(E). docs/attention.md has the semantics of the edge cases.

Its entry in the op table: ATTENTION. The kernels take one (B, H, L, E) problem: the broadcast batch dimensions are flattened into
B, and every operand is passed with its batch, head and row strides, a batch or head
dimension either full or 1 (stride 0). On the cpu backend an operand (or out=) whose rows
are contiguous is read (written) in place at its strides: the heads of one qkv projection,
out= the (B, L, H, E) merged heads seen as (B, H, L, E); other backends, other layouts and
batch dimensions that do not flatten without a copy take C-contiguous copies. An operand
whose batch dimensions broadcast only in part (shape (2, 1) against (2, 3)) is expanded
to the full batch first."""
import math

import numpy as np

import mpskern
from mpskern import _args
from mpskern import reference as ref
from mpskern import structs
from mpskern.backends.family import Family
from mpskern.ops.op import Check, Field, Op, normal
from mpskern.structs import ATTN_MASK_ADD as MASK_ADD, ATTN_MASK_BOOL as MASK_BOOL

OP = "scaled_dot_product_attention"


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None,
                                 enable_gqa=False, *, backend="auto", out=None):
    """softmax(scale * query @ key^T + mask) @ value over the last two dimensions, as
    torch.nn.functional.scaled_dot_product_attention (no dropout). A row with nothing to
    attend to gives 0 @ value, as torch.

    Parameters
    ----------
    query : array (..., Hq, L, E)
        The queries.
    key : array (..., Hk, S, E)
        query's dtype.
    value : array (..., Hv, S, Ev)
        query's dtype.
    attn_mask : array broadcastable to (..., Hq, L, S), optional
        bool (True = may attend) or float added to the scores (float32 or query's dtype).
    is_causal : bool
        Query i attends to keys 0..i only (no attn_mask with it).
    scale : float or None
        None (default): 1 / sqrt(E).
    enable_gqa : bool
        Grouped-query attention: key's and value's head counts divide Hq, each key/value
        head shared by that many query heads.

    out : array (..., Hq, L, Ev), optional
        Written with the result and returned. On the cpu backend a view whose last
        dimension is contiguous is written in place at its strides (e.g. merged heads:
        out=o.reshape(B, L, H, Ev).transpose(0, 2, 1, 3) for o of shape (B, L, H * Ev)).

    Returns
    -------
    numpy.ndarray
        (..., Hq, L, Ev) in query's dtype (out, when given).

    Example
    -------
        rng = np.random.default_rng(0)
        q = rng.standard_normal((2, 8, 16, 64)).astype(np.float32)
        kv = rng.standard_normal((2, 2, 16, 64)).astype(np.float32)
        o = mk.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
    """
    be = _args.backend(backend)
    strided = be.name == "cpu"              # the cpu kernel reads and writes row strides
    take = _args.rows if strided else _args.array
    q, code = take(query, "query", OP)
    k = _args.same_dtype(key, "key", q, "query", OP, take)
    v = _args.same_dtype(value, "value", q, "query", OP, take)
    causal = _args.flag(is_causal, "is_causal", OP)
    gqa = _args.flag(enable_gqa, "enable_gqa", OP)
    args, ops, shape = plan(q, k, v, attn_mask, causal, scale, gqa)
    inputs = (query, key, value, attn_mask)
    y, out = (_args.strided_output if strided else _args.output)(out, shape, q.dtype, OP, inputs)
    if y.size:
        y4 = _flat(y, (args["B"], args["Hq"], args["L"], args["Ev"]))
        if y4 is None:                      # batch dimensions that do not flatten in place
            y, out = _args.output(out, shape, q.dtype, OP, inputs)
            y4 = y.reshape(args["B"], args["Hq"], args["L"], args["Ev"])
        if not y4.flags.c_contiguous:
            st = [s // y.itemsize for s in y4.strides]
            args.update(o_sb=st[0], o_sh=st[1], o_sl=st[2])
            y4 = _args.span(y4)
        be.execute("attention", args, code, *ops, y4)
    return _args.finish(y, out)


def _flat(x, shape):
    """x reshaped to `shape` as a view (None when that needs a copy)."""
    r = x.reshape(shape)
    return r if np.may_share_memory(r, x) else None


def plan(q, k, v, attn_mask, causal, scale, gqa):
    """(mk_attention_args dict, (q, k, v, mask) as the kernels take them, output shape) for
    C-contiguous q, k, v of one dtype; ValueError / TypeError naming the argument."""
    shapes = f"query {q.shape}, key {k.shape}, value {v.shape}"
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise ValueError(f"{OP}: query, key and value need at least 2 dimensions (..., L, E); "
                         f"got {shapes}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{OP}: key's last dimension ({k.shape[-1]}) must equal query's "
                         f"embedding size E={q.shape[-1]}; got {shapes}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"{OP}: value has {v.shape[-2]} rows but key has S={k.shape[-2]}: "
                         f"one value per key; got {shapes}")
    if gqa and min(q.ndim, k.ndim, v.ndim) < 3:
        raise ValueError(f"{OP}: enable_gqa=True needs a heads dimension (..., H, L, E) in "
                         f"query, key and value; got {shapes}")
    nd = max(q.ndim, k.ndim, v.ndim, 3)
    qs, ks, vs = (_pad(x.shape, nd) for x in (q, k, v))
    Hq, Hk, Hv = qs[-3], ks[-3], vs[-3]
    if gqa:
        if Hq % Hk or Hq % Hv:
            raise ValueError(f"{OP}: with enable_gqa=True the key and value head counts "
                             f"({Hk}, {Hv}) must divide the query's ({Hq}); got {shapes}")
        H = Hq
    else:
        H = max(Hq, Hk, Hv)
        if any(h not in (1, H) for h in (Hq, Hk, Hv)):
            hint = (" (grouped-query heads: pass enable_gqa=True)"
                    if Hq == H and H % Hk == 0 and H % Hv == 0 else "")
            raise ValueError(f"{OP}: the head counts of query, key and value ({Hq}, {Hk}, "
                             f"{Hv}) do not broadcast{hint}; got {shapes}")
    try:
        batch = np.broadcast_shapes(qs[:-3], ks[:-3], vs[:-3])
    except ValueError:
        raise ValueError(f"{OP}: the batch dimensions of query, key and value do not "
                         f"broadcast; got {shapes}") from None
    L, E = qs[-2], qs[-1]
    S, Ev = ks[-2], vs[-1]
    B = math.prod(batch)
    out_shape = (batch + (H, L, Ev))[len(batch) + 3 - max(q.ndim, k.ndim, v.ndim):]
    _args.check_size(batch + (H, L, Ev), "the result", OP)
    q, (q_sb, q_sh, q_sl) = _batched(q, qs, batch, "query")
    k, (k_sb, k_sh, k_sl) = _batched(k, ks, batch, "key")
    v, (v_sb, v_sh, v_sl) = _batched(v, vs, batch, "value")
    if E == 0:
        sc = 1.0            # empty products: the scores are 0 whatever the scale (torch)
    else:
        sc = 1.0 / math.sqrt(E) if scale is None else _args.real(scale, "scale", OP)
    args = structs.attention_args(B, H, L, S, E, Ev, Hk=Hk, Hv=Hv, q_sb=q_sb, q_sh=q_sh,
                                  k_sb=k_sb, k_sh=k_sh, v_sb=v_sb, v_sh=v_sh, q_sl=q_sl,
                                  k_sl=k_sl, v_sl=v_sl, causal=int(causal), scale=sc)
    mask = None
    if attn_mask is not None:
        if causal:
            raise ValueError(f"{OP}: attn_mask and is_causal=True cannot be combined (as in "
                             "torch): fold the causal triangle into the mask, or pass "
                             "is_causal alone")
        mask = _mask(attn_mask, q.dtype, batch + (H, L, S), args)
    return args, (q, k, v, mask), out_shape


def _pad(shape, nd):
    return (1,) * (nd - len(shape)) + tuple(shape)


def _batched(x, padded, batch, name):
    """(x as a (B|1, H, rows, cols) array the kernels take: C-contiguous, or on the cpu
    path the 1-D span of a row-strided view; (batch, head, row) strides in elements, 0 for
    a dimension of 1)."""
    tail = padded[-3:]
    own = padded[:-3]
    if math.prod(own) == 1:
        x = x.reshape((1,) + tail)      # (a view: only dimensions of 1 go)
    elif own != batch:                  # broadcasts in some batch dimensions only: expand
        _args.check_size(batch + tail, name, OP)
        x = np.ascontiguousarray(np.broadcast_to(x.reshape(padded), batch + tail))
    else:
        x = x.reshape((math.prod(batch),) + tail)    # a C-order copy if it must
    dims = x.shape
    if x.flags.c_contiguous:
        st = (math.prod(tail), tail[1] * tail[2], tail[2])
    else:
        st = tuple(s // x.itemsize for s in x.strides[:3])
        x = _args.span(x)
    return x, tuple(s if n > 1 else 0 for s, n in zip(st, dims[:3]))


def _mask(m, dtype, scores, args):
    """The mask as the kernels read it (uint8 or `dtype`, C-contiguous with its broadcast
    dimensions of size 1), filling the mask fields of `args`."""
    if type(m) is not np.ndarray:         # subclasses too: a masked array is refused
        m = _args.any_array(m, "attn_mask", OP)
    if m.dtype == np.bool_:
        kind = MASK_BOOL
    elif m.dtype == dtype or m.dtype == np.float32:
        kind = MASK_ADD
    else:
        raise TypeError(f"{OP}: attn_mask has dtype {m.dtype}; it must be bool (True = may "
                        f"attend) or a float added to the scores ("
                        f"{'float32' if dtype == np.float32 else 'float32 or the query dtype float16'})")
    if m.ndim < 2:
        raise ValueError(f"{OP}: attn_mask with shape {m.shape} needs at least 2 dimensions "
                         f"(L, S), as in torch: pass attn_mask[None, :] for one row of keys")
    if m.ndim > len(scores) or any(a not in (1, b) for a, b in zip(_pad(m.shape, len(scores)), scores)):
        raise ValueError(f"{OP}: attn_mask with shape {m.shape} does not broadcast to the "
                         f"scores' shape {scores} (batch..., heads, L, S)")
    if m.size >= _args.INT32_LIMIT:
        _args.too_big("attn_mask", m.shape, OP)
    padded = _pad(m.shape, len(scores))
    batch = scores[:-3]
    own, tail = padded[:-3], padded[-3:]
    m = np.ascontiguousarray(m, dtype=np.uint8 if kind == MASK_BOOL else dtype)
    if math.prod(own) == 1:
        m_sb = 0
    else:
        if own != batch:
            m = np.ascontiguousarray(np.broadcast_to(m.reshape(padded), batch + tail))
        m_sb = math.prod(tail)
    mh, ml, ms = tail
    args.update(mask=kind, m_sb=m_sb, m_sh=ml * ms if mh > 1 else 0, m_sl=ms if ml > 1 else 0,
                m_ss=1 if ms > 1 else 0)
    return m.reshape((math.prod(batch) if m_sb else 1,) + tail)



class AttentionFamily(Family):
    """mk_attention_args: the native row 'attention'; on metal and sim mpskern/backends/gpu/attention.py."""
    name = "attention"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import attention     # the GPU path, loaded by its first call
        return attention.attention(ctx, args, dtype, *arrays, config=config)

    def spaces(self):
        from mpskern.backends.gpu import attention
        return attention.SPACES

# -- the op table's entry -------------------------------------------------------------------
_MODELS = [   # the attention layers of real models
    ("GPT-2 small: 12 heads x 64, L=1024, causal", dict(B=1, Hq=12, L=1024, E=64, causal=1)),
    ("Llama-style GQA: 32 q / 8 kv heads x 128, L=512, causal",
     dict(B=1, Hq=32, Hkv=8, L=512, E=128, causal=1)),
    ("SD UNet self-attn: 8 heads x 40, 64x64 latents", dict(B=2, Hq=8, L=4096, E=40)),
    ("SD UNet cross-attn: 8 heads x 40, 4096 x 77 text tokens",
     dict(B=2, Hq=8, L=4096, S=77, E=40)),
]


def _case(q, k, v, mask=None, **p):
    """A selftest case: shapes of q, k, v, a mask kind and shape, keyword options."""
    def make(rng, dt):
        m = None
        if mask is not None:
            kind, shape = mask
            m = rng.random(shape) > 0.3 if kind == "bool" else normal(rng, shape, dt)
        return dict(q=normal(rng, q, dt), k=normal(rng, k, dt), v=normal(rng, v, dt), mask=m,
                    p={"is_causal": False, "enable_gqa": False, **p})
    return make


class Attention(Op):
    name = "scaled_dot_product_attention"
    kernel, cost = "attention", staticmethod(structs.attention_cost)
    metric = "gflops"
    fields = (Field("B", None), Field("Hq", None, "query heads"), Field("L", None, "queries"),
              Field("E", None, "head size of q and k"), Field("S", "L", "keys"),
              Field("Hkv", "Hq", "key/value heads (fewer: grouped-query, enable_gqa)"),
              Field("Ev", "E", "head size of v"), Field("causal", 0, "1: is_causal"),
              Field("mask", 0, "1: a bool (L, S) mask, 2: an additive one"))
    example = "1,12,1024,64,causal=1"
    zero_ok = frozenset({"causal", "mask"})
    presets = {
        "small": [("GPT-2 block L=256 causal", dict(B=1, Hq=12, L=256, E=64, causal=1)),
                  ("GQA 8/2 x128 L=256 causal", dict(B=1, Hq=8, Hkv=2, L=256, E=128, causal=1)),
                  ("SD cross-attn 1024 x 77", dict(B=1, Hq=8, L=1024, S=77, E=40)),
                  ("bool mask 8x8 L=128", dict(B=1, Hq=8, L=128, E=64, mask=1))],
        "models": _MODELS,
        "targets": [(f"{B}x{H}x{L}x64{' causal' if c else ''}", dict(B=B, Hq=H, L=L, E=64, causal=c))
                    for B, H, L in ((1, 12, 1024), (8, 8, 512)) for c in (0, 1)],
        "tiny": [("tiny 1x2x16x16", dict(B=1, Hq=2, L=16, E=16))],
    }
    tune = {"metal": dict(B=1, Hq=12, L=1024, E=64), "sim": dict(B=1, Hq=2, L=64, E=32)}
    checks = (Check("(2,3,37,16) S=29 bool mask (37,29)",
                    _case((2, 3, 37, 16), (2, 3, 29, 16), (2, 3, 29, 12), ("bool", (37, 29)))),
              Check("(1,4,19,24) GQA 4/2 causal L>S", _case(
                  (1, 4, 19, 24), (1, 2, 11, 24), (1, 2, 11, 24), is_causal=True, enable_gqa=True)),
              Check("(2,2,9,8) additive mask (2,1,1,13)",
                    _case((2, 2, 9, 8), (2, 2, 13, 8), (2, 2, 13, 8), ("add", (2, 1, 1, 13)))),
              Check("(2,3,0,8) empty L", _case((2, 3, 0, 8), (2, 3, 5, 8), (2, 3, 5, 8))))

    def label(self, s):
        kv = f"/{s['Hkv']}" if s["Hkv"] != s["Hq"] else ""
        extra = (" causal" if s["causal"] else "") + {0: "", 1: " bool mask", 2: " add mask"}[s["mask"]]
        ev = f" Ev={s['Ev']}" if s["Ev"] != s["E"] else ""
        return f"{s['B']}x{s['Hq']}{kv}x{s['L']}x{s['S']}x{s['E']}{ev}{extra}"

    def inputs(self, s, dtype, rng):
        B, Hq, Hk, L, S, E, Ev = (s[n] for n in ("B", "Hq", "Hkv", "L", "S", "E", "Ev"))
        m = None
        if s["mask"] == 1:
            m = rng.random((L, S)) > 0.2
        elif s["mask"] == 2:
            m = rng.uniform(-4.0, 0.0, (L, S)).astype(dtype)
        return dict(q=normal(rng, (B, Hq, L, E), dtype), k=normal(rng, (B, Hk, S, E), dtype),
                    v=normal(rng, (B, Hk, S, Ev), dtype), mask=m,
                    p=dict(is_causal=bool(s["causal"]), enable_gqa=Hk != Hq))

    def call(self, i, backend, out=None):
        return mpskern.scaled_dot_product_attention(i["q"], i["k"], i["v"], i["mask"],
                                                    backend=backend, out=out, **i["p"])

    def torch_call(self, F, t):
        return F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=t["mask"], **t["p"])

    @staticmethod
    def mlx_call(mx, t):
        q, m = t["q"], t["mask"]
        if t["p"]["is_causal"]:   # torch's triangle is top-left aligned; MLX's "causal" is not
            L, S = q.shape[-2], t["k"].shape[-2]
            m = "causal" if L == S else mx.array(np.tri(L, S, dtype=bool))
        return mx.fast.scaled_dot_product_attention(q, t["k"], t["v"], scale=q.shape[-1] ** -0.5,
                                                    mask=m)

    def reference(self, i):
        with np.errstate(invalid="ignore"):
            return ref.scaled_dot_product_attention(i["q"], i["k"], i["v"], i["mask"], **i["p"])

    def reduction(self, i):
        return i["k"].shape[-2] + i["q"].shape[-1]

    def out_elements(self, s, inp):
        return s["B"] * s["Hq"] * s["L"] * s["Ev"]

    def scratch_elements(self, s, inp):
        """The reference's scores, their exponentials and the weights: (B, Hq, L, S) each."""
        return 3 * s["B"] * s["Hq"] * s["L"] * s["S"]

    def struct(self, s, out_shape):
        mask = {0: {}, 1: dict(mask=MASK_BOOL), 2: dict(mask=MASK_ADD)}[s["mask"]]
        if mask:
            mask.update(m_sl=s["S"], m_ss=1)
        return structs.attention_args(s["B"], s["Hq"], s["L"], s["S"], s["E"], s["Ev"],
                                      Hk=s["Hkv"], Hv=s["Hkv"], causal=s["causal"], **mask)


ATTENTION = Attention()
