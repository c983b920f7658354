"""The kernel argument structs of metal/mk_args.h on the Python side: for each struct one
builder (<struct>_args: its keyword arguments are exactly the struct's fields, the dict it
returns is what backends take and _native packs) and its FLOP and byte count
(<struct>_cost: the one place the benchmark, the roofline and the tuner take them from).
The constants the structs use (MK_POOL_MAX, MK_NORM_LAYER, ...) are here too.

Costs take the struct's fields (unknown keys are ignored, so an args dict can be passed as
**args) plus `itemsize`, the bytes per element of the op's dtype. Per-channel vectors
(weights, biases, running stats) are float32, as the kernels take them. Conventions,
stated once:
- FLOPs: a multiply-add is 2; exp, rsqrt, a compare and a divide count 1 each. For the
  reductions the count is nominal (what a straightforward kernel does per element); their
  throughput is read in GB/s, which is what limits them.
- conv2d counts direct-convolution FLOPs whatever the algorithm (the usual "effective
  FLOP/s"): the cpu backend's Winograd path does about 4x fewer multiplications, so its
  GFLOP/s can exceed the FMA peak (% of peak above 100). Only ops whose table entry says
  work_done (matmul, gemm) count what every implementation really executes.
- Bytes: the compulsory traffic, each input read once and each output written once, the
  least any kernel can move (caches and re-reads make real traffic larger). Memory-bound
  kernels can therefore reach at most 100 % of the bandwidth peak.
"""
from dataclasses import dataclass

F32 = 4
POOL_MAX, POOL_AVG, POOL_ADAPTIVE_AVG = 0, 1, 2   # MK_POOL_MAX / _AVG / _ADAPTIVE_AVG
# MK_ACT_*: the fused activations of gemm and conv2d, by the public name (None: none)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
NORM_LAYER, NORM_RMS = 0, 1     # MK_NORM_LAYER / MK_NORM_RMS


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    @property
    def intensity(self):
        """Arithmetic intensity, FLOP per byte."""
        return self.flops / self.bytes if self.bytes else float("inf")


# -- mk_gemm_args: out[b] = alpha*op(A[b]) @ op(B[b]) + beta*C[b], row-major -----------------
# the struct's fields in its order (_native.pyx reads a dict in that order fastest), at the
# defaults of gemm_args' keywords
_GEMM_DEFAULTS = {"batch": 1, "M": 0, "N": 0, "K": 0, "lda": 0, "ldb": 0, "ldc": 0,
                  "stride_a": 0, "stride_b": 0, "stride_c": 0, "stride_out": 0, "trans_a": 0,
                  "trans_b": 0, "has_c": 0, "alpha": 1.0, "beta": 0.0, "split_k": 0,
                  "activation": 0}


def gemm_args(M, N, K, *, batch=1, trans_a=0, trans_b=0, lda=None, ldb=None, ldc=None,
              stride_a=0, stride_b=0, stride_c=0, stride_out=None, has_c=0, alpha=1.0,
              beta=0.0, split_k=0, activation=0):
    """Leading dimensions default to the dense ones of op(A) (M x K), op(B) (K x N) and the
    M x N output; batch strides default to 0 (broadcast), the output's to M*N. Flags may be
    bools (a bool is an int: the struct gets 0/1). Every matmul call builds one: a copy of
    the defaults with the fields given set (an 18-key dict literal cost ~3x as much)."""
    a = _GEMM_DEFAULTS.copy()
    a["M"] = M
    a["N"] = N
    a["K"] = K
    a["lda"] = (M if trans_a else K) if lda is None else lda
    a["ldb"] = (K if trans_b else N) if ldb is None else ldb
    a["ldc"] = N if ldc is None else ldc
    a["stride_out"] = M * N if stride_out is None else stride_out
    if batch != 1:
        a["batch"] = batch
    if trans_a:
        a["trans_a"] = trans_a
    if trans_b:
        a["trans_b"] = trans_b
    if stride_a or stride_b or stride_c:
        a["stride_a"] = stride_a
        a["stride_b"] = stride_b
        a["stride_c"] = stride_c
    if has_c or split_k or activation:
        a["has_c"] = has_c
        a["split_k"] = split_k
        a["activation"] = activation
    if alpha != 1.0 or beta != 0.0:     # (-0.0 == 0.0: the kernels read beta == 0 alike)
        a["alpha"] = alpha
        a["beta"] = beta
    return a


def plain_gemm_args(M, N, K):
    """gemm_args(M, N, K) (A (M x K) @ B (K x N), dense, nothing else) at about half its cost:
    matmul's every 2-D call. (Calling gemm_args pays a lookup per keyword-only default.)"""
    a = _GEMM_DEFAULTS.copy()
    a["M"] = M
    a["N"] = N
    a["K"] = K
    a["lda"] = K
    a["ldb"] = a["ldc"] = N
    a["stride_out"] = M * N
    return a


def gemm_cost(*, batch, M, N, K, itemsize, has_c=0, **_):
    """2MNK per batch entry (+2MN with C)."""
    flops = batch * (2.0 * M * N * K + (2.0 * M * N if has_c else 0.0))
    elems = batch * (M * K + K * N + M * N + (M * N if has_c else 0))
    return Cost(flops, float(elems * itemsize))


# -- mk_conv2d_args: NCHW x, weight (K, C/groups, R, S), y (N, K, P, Q) ----------------------
def conv2d_args(N, C, H, W, K, R, S, P, Q, *, stride_h=1, stride_w=1, pad_h=0, pad_w=0,
                dil_h=1, dil_w=1, groups=1, has_bias=0, activation=0):
    """pad_h/pad_w are the top/left padding; the bottom/right padding is implied by P/Q."""
    return {"N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": S, "P": P, "Q": Q,
            "stride_h": stride_h, "stride_w": stride_w, "pad_h": pad_h, "pad_w": pad_w,
            "dil_h": dil_h, "dil_w": dil_w, "groups": groups, "has_bias": has_bias,
            "activation": activation}


def conv2d_cost(*, N, C, H, W, K, R, S, P, Q, itemsize, groups=1, has_bias=0, **_):
    """Direct convolution: 2 * (C/groups)*R*S FLOPs per output element (+1 for the bias)."""
    out = N * K * P * Q
    flops = 2.0 * out * (C // groups) * R * S + (out if has_bias else 0)
    elems = N * C * H * W + K * (C // groups) * R * S + out
    return Cost(flops, float(elems * itemsize + (K * F32 if has_bias else 0)))


# -- mk_pool2d_args: windows start at p*stride - pad --------------------------------------
def pool2d_args(N, C, H, W, P, Q, kh, kw, *, stride_h=1, stride_w=1, pad_h=0, pad_w=0,
                dil_h=1, dil_w=1, mode=POOL_MAX, count_include_pad=1, divisor=0,
                pad_h_end=None, pad_w_end=None):
    """divisor > 0: avg's divisor_override; the padded extent ends at H + pad_h_end (default
    pad_h), W + pad_w_end."""
    return {"N": N, "C": C, "H": H, "W": W, "P": P, "Q": Q, "kh": kh, "kw": kw,
            "stride_h": stride_h, "stride_w": stride_w, "pad_h": pad_h, "pad_w": pad_w,
            "dil_h": dil_h, "dil_w": dil_w, "mode": mode,
            "count_include_pad": count_include_pad, "divisor": divisor,
            "pad_h_end": pad_h if pad_h_end is None else pad_h_end,
            "pad_w_end": pad_w if pad_w_end is None else pad_w_end}


def pool2d_cost(*, N, C, H, W, P, Q, kh, kw, itemsize, **_):
    """One compare (max) or add (avg) per window element."""
    return Cost(float(N * C * P * Q * kh * kw), float((N * C * H * W + N * C * P * Q) * itemsize))


def adaptive_pool2d_cost(*, N, C, H, W, P, Q, itemsize, **_):
    """One add per element of every adaptive window (they overlap when H % P != 0): the
    window heights sum to sum_p (ceil((p+1)H/P) - floor(pH/P)), likewise the widths."""
    rows = sum(((p + 1) * H + P - 1) // P - p * H // P for p in range(P))
    cols = sum(((q + 1) * W + Q - 1) // Q - q * W // Q for q in range(Q))
    return Cost(float(N * C * rows * cols), float((N * C * H * W + N * C * P * Q) * itemsize))


# -- mk_softmax_args: x viewed as (outer, n, inner), softmax along n -----------------------
def softmax_args(outer, n, inner=1, log=0):
    return {"outer": outer, "n": n, "inner": inner, "log": log}


def softmax_cost(*, outer, n, inner, itemsize, **_):
    """max, subtract, exp, sum, scale (log: subtract a log) = 5 per element."""
    size = outer * n * inner
    return Cost(5.0 * size, float(2 * size * itemsize))


# -- mk_rownorm_args: layer_norm / rms_norm of x viewed as (rows, n) ----------------------
def rownorm_args(rows, n, *, kind=NORM_LAYER, has_weight=0, has_bias=0, eps=1e-5):
    return {"rows": rows, "n": n, "kind": kind, "has_weight": has_weight,
            "has_bias": has_bias, "eps": eps}


def rownorm_cost(*, rows, n, kind=0, has_weight=0, has_bias=0, itemsize, **_):
    """layer_norm (kind 0): mean 1, variance 3, normalise 2 per element; rms_norm (kind 1):
    square-sum 2, scale 1; plus 1 each for weight and bias."""
    size = rows * n
    per = (6 if kind == 0 else 3) + (1 if has_weight else 0) + (1 if has_bias else 0)
    vecs = (int(bool(has_weight)) + int(bool(has_bias))) * n * F32
    return Cost(float(per * size), float(2 * size * itemsize + vecs))


# -- mk_group_norm_args: x (N, C, HW), groups of C/groups channels --------------------------
def group_norm_args(N, C, HW, groups, *, has_weight=0, has_bias=0, eps=1e-5):
    return {"N": N, "C": C, "HW": HW, "groups": groups, "has_weight": has_weight,
            "has_bias": has_bias, "eps": eps}


def group_norm_cost(*, N, C, HW, has_weight=0, has_bias=0, itemsize, **_):
    """As layer_norm over each group."""
    size = N * C * HW
    per = 6 + (1 if has_weight else 0) + (1 if has_bias else 0)
    vecs = (int(bool(has_weight)) + int(bool(has_bias))) * C * F32
    return Cost(float(per * size), float(2 * size * itemsize + vecs))


# -- mk_batch_norm_args: x (N, C, HW); training updates running stats when has_running ------
def batch_norm_args(N, C, HW, *, training=0, has_running=1, has_weight=0, has_bias=0,
                    eps=1e-5, momentum=0.1):
    return {"N": N, "C": C, "HW": HW, "training": training,
            "has_running": has_running, "has_weight": has_weight,
            "has_bias": has_bias, "eps": eps, "momentum": momentum}


def batch_norm_cost(*, N, C, HW, training=0, has_weight=0, has_bias=0, itemsize, **_):
    """Inference: normalise 2 per element (+weight, bias); training adds the batch mean and
    variance (4 per element). Vectors: running mean and var, weight, bias."""
    size = N * C * HW
    per = 2 + (4 if training else 0) + (1 if has_weight else 0) + (1 if has_bias else 0)
    vecs = (2 + int(bool(has_weight)) + int(bool(has_bias))) * C * F32
    return Cost(float(per * size), float(2 * size * itemsize + vecs))


# -- mk_attention_args: out = softmax(scale * q k^T + mask) @ v per (batch, head) ------------
ATTN_MASK_NONE, ATTN_MASK_BOOL, ATTN_MASK_ADD = 0, 1, 2    # MK_ATTN_MASK_*


def attention_args(B, Hq, L, S, E, Ev, *, Hk=None, Hv=None, q_sb=None, q_sh=None, k_sb=None,
                   k_sh=None, v_sb=None, v_sh=None, mask=ATTN_MASK_NONE, m_sb=0, m_sh=0,
                   m_sl=0, m_ss=0, causal=0, scale=None, q_sl=None, k_sl=None, v_sl=None,
                   o_sb=None, o_sh=None, o_sl=None):
    """Key/value heads default to Hq; strides to the dense (B, H, rows, cols) layout (a
    batch or head stride of 0 broadcasts; the row strides and out's only the cpu kernel
    reads); scale to 1/sqrt(E), and 1.0 when E = 0 (the scores are then 0 whatever the
    scale)."""
    Hk = Hq if Hk is None else Hk
    Hv = Hq if Hv is None else Hv

    def dense(stride, n):
        return n if stride is None else stride
    if scale is None or E == 0:
        scale = 1.0 / E ** 0.5 if E else 1.0
    return {"B": B, "Hq": Hq, "Hk": Hk, "Hv": Hv, "L": L, "S": S, "E": E, "Ev": Ev,
            "q_sb": dense(q_sb, Hq * L * E), "q_sh": dense(q_sh, L * E),
            "k_sb": dense(k_sb, Hk * S * E), "k_sh": dense(k_sh, S * E),
            "v_sb": dense(v_sb, Hv * S * Ev), "v_sh": dense(v_sh, S * Ev),
            "mask": mask, "m_sb": m_sb, "m_sh": m_sh, "m_sl": m_sl, "m_ss": m_ss,
            "causal": causal, "scale": float(scale),
            "q_sl": dense(q_sl, E), "k_sl": dense(k_sl, E), "v_sl": dense(v_sl, Ev),
            "o_sb": dense(o_sb, Hq * L * Ev), "o_sh": dense(o_sh, L * Ev), "o_sl": dense(o_sl, Ev)}


def attention_pairs(L, S, causal):
    """(query, key) pairs that take part: L*S, or under causal sum_i min(i + 1, S)."""
    if not causal:
        return L * S
    full = min(L, S)                 # rows 0..full-1 see i + 1 keys, the rest all S
    return full * (full + 1) // 2 + (L - full) * S


def attention_cost(*, B, Hq, Hk, Hv, L, S, E, Ev, k_sb=1, v_sb=1, mask=0, m_sb=0, m_sh=0,
                   m_sl=0, m_ss=0, causal=0, itemsize, **_):
    """Per visible (query, key) pair: 2E (q.k) + 2Ev (weight * v) + 5 (scale, mask, max,
    exp, sum); causal counts only the pairs its triangle keeps. Bytes: q, k, v and the output
    once each (a broadcast batch of k or v once), and the mask once at its own size."""
    pairs = attention_pairs(L, S, causal)
    flops = B * Hq * pairs * (2.0 * E + 2.0 * Ev + 5.0)
    bk, bv = (B if k_sb else 1), (B if v_sb else 1)
    elems = B * Hq * L * E + bk * Hk * S * E + bv * Hv * S * Ev + B * Hq * L * Ev
    mbytes = 0
    if mask:
        n = (B if m_sb else 1) * (Hq if m_sh else 1) * (L if m_sl else 1) * (S if m_ss else 1)
        mbytes = n * (1 if mask == ATTN_MASK_BOOL else itemsize)
    return Cost(flops, float(elems * itemsize + mbytes))
