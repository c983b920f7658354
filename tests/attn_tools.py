"""What the attention kernel tests share: mk_attention_args from 4-D arrays (the layout
contract of metal/mk_args.h: C-contiguous operands whose batch or head dimension may be 1,
bound with stride 0 or a dividing head count), random cases with every mask form, and the
check against mpskern.reference."""
import math

import numpy as np

import refs
from mpskern import _native
from mpskern.reference import scaled_dot_product_attention as reference

MASK_KIND = {None: 0, "bool": 1, "add": 2}


def _strides(shape):
    """C-order element strides of `shape`, 0 where a dimension is 1 (broadcast)."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(0 if n == 1 else acc)
        acc *= n
    return out[::-1]


def args(q, k, v, mask=None, causal=False, scale=None):
    """(args dict, mask array or None) for 4-D q (B|1, Hq, L, E), k (B|1, Hk, S, E),
    v (B|1, Hv, S, Ev) and a mask of 4 dimensions, each 1 or full."""
    B = max(q.shape[0], k.shape[0], v.shape[0])
    _, Hq, L, E = q.shape
    _, Hk, S, _ = k.shape
    _, Hv, _, Ev = v.shape
    qs, ks, vs = _strides(q.shape), _strides(k.shape), _strides(v.shape)
    a = dict(B=B, Hq=Hq, Hk=Hk, Hv=Hv, L=L, S=S, E=E, Ev=Ev,
             q_sb=qs[0], q_sh=qs[1], k_sb=ks[0], k_sh=ks[1], v_sb=vs[0], v_sh=vs[1],
             mask=0, m_sb=0, m_sh=0, m_sl=0, m_ss=0, causal=int(causal),
             scale=float(1.0 / math.sqrt(E) if scale is None else scale) if E else 1.0,
             q_sl=E, k_sl=E, v_sl=Ev, o_sb=Hq * L * Ev, o_sh=L * Ev, o_sl=Ev)
    if mask is not None:
        assert mask.ndim == 4
        mask = np.ascontiguousarray(mask)
        a["mask"] = MASK_KIND["bool" if mask.dtype == bool else "add"]
        a["m_sb"], a["m_sh"], a["m_sl"], a["m_ss"] = _strides(mask.shape)
        if mask.dtype == bool:
            mask = mask.view(np.uint8)
    return a, mask


def run_cpu(q, k, v, mask=None, causal=False, scale=None):
    a, m = args(q, k, v, mask, causal, scale)
    out = np.full((a["B"], a["Hq"], a["L"], a["Ev"]), np.nan, q.dtype)
    _native.cpu_attention(a, refs_dtype(q.dtype), q, k, v, m, out)
    return out


def refs_dtype(dtype):
    return {np.dtype(np.float32): _native.F32, np.dtype(np.float16): _native.F16}[np.dtype(dtype)]


def case(rng, dtype, B, Hq, Hk, Hv, L, S, E, Ev, mask=None, mask_shape=None, kv_batch=None,
         lo=-1.0, hi=1.0):
    """Random q, k, v (k/v batch `kv_batch`, default B) and a mask of `mask_shape`
    ("bool": about a third of the keys hidden, "add": values in [-2, 2) with some -inf)."""
    kb = B if kv_batch is None else kv_batch
    q = refs.rand((B, Hq, L, E), dtype, rng, lo, hi)
    k = refs.rand((kb, Hk, S, E), dtype, rng, lo, hi)
    v = refs.rand((kb, Hv, S, Ev), dtype, rng, lo, hi)
    m = None
    if mask == "bool":
        m = rng.random(mask_shape) > 0.35
    elif mask == "add":
        m = rng.uniform(-2, 2, mask_shape)
        m[rng.random(mask_shape) < 0.2] = -np.inf
        m = m.astype(dtype)
    return q, k, v, m


def expected(q, k, v, mask=None, causal=False, scale=None):
    """The float64 reference, GQA heads repeated as the kernels index them."""
    return reference(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                     enable_gqa=k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1])


def check(got, q, k, v, mask=None, causal=False, scale=None, what=""):
    with np.errstate(invalid="ignore"):
        want = expected(q, k, v, mask, causal, scale)
    refs.assert_close(got, want, q.dtype, terms=k.shape[2] + q.shape[3], what=what)
    return want


def run_gpu(be, q, k, v, mask=None, causal=False, scale=None, variant="simd", BQ=16, BK=16, D=None):
    """The metal/attention.metal kernel `variant` through the GPU backend `be`'s encoder
    (mpskern/backends/gpu/attention.py), with that configuration pinned; D defaults to the
    space's head capacity for E and Ev."""
    from mpskern.backends.gpu.attention import head_capacity   # its space's rule
    a, m = args(q, k, v, mask, causal, scale)
    if D is None:
        D = head_capacity(a["E"], a["Ev"])
    out = np.full((a["B"], a["Hq"], a["L"], a["Ev"]), np.nan, q.dtype)
    be.execute("attention", a, refs_dtype(q.dtype), q, k, v, m, out,
                 config=dict(variant=variant, BQ=BQ, BK=BK, D=D))
    return out
