"""float64 numpy references of every op with torch semantics, and the one tolerance rule
every correctness check uses (the benchmark, the tuner, `mpskern selftest`, the tests).

The references take the op's inputs (already in the tested dtype) and compute in float64.
They are written independently of mpskern/shapes.py and of the kernels: output sizes come
from enumerating windows, not from the library's formulas, so a wrong shape rule shows up
as a mismatch. Keep it that way (a reference must not share the code it checks).
"""
import math

import numpy as np


# -- the tolerance rule -------------------------------------------------------------------------
_ULP = {"float32": 2.0 ** -23, "float16": 2.0 ** -10}
# ceiling of the normalised error whatever the reduction length: a correct kernel reduces
# in blocks or pairs, so its error does not keep growing with sqrt(terms)
_CAP = {"float32": 1e-4, "float16": 5e-3}


def tolerance(dtype, reduction=1):
    """The bound for max_error: 4 ulp of the dtype (the output's own rounding, GPU
    fast-math) + 16 float32 ulp x sqrt(terms summed per output) (float32 accumulation,
    float16 included, in any order), but never above _CAP."""
    d = np.dtype(dtype).name
    if d not in _ULP:
        raise ValueError(f"no tolerance for dtype {d}; kernels run float32 and float16")
    grown = 4 * _ULP[d] + 16 * _ULP["float32"] * math.sqrt(max(1, reduction))
    return min(grown, _CAP[d])


def max_error(out, ref):
    """max |out - ref| / max |ref| (inf for a non-finite result or a shape mismatch)."""
    out = np.asarray(out)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        return math.inf
    if ref.size == 0:
        return 0.0
    o = out.astype(np.float64)
    if not np.all(np.isfinite(o)):
        return math.inf
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    return float(np.max(np.abs(o - ref))) / scale


def f64(*xs):
    return [None if x is None else np.asarray(x, dtype=np.float64) for x in xs]


def _two(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


# -- fused activations (gemm, conv2d) ----------------------------------------------------------
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
_erf = np.vectorize(math.erf, otypes=[np.float64])


def activate(y, name):
    """torch's relu, gelu (erf), gelu(approximate="tanh") and silu of float64 `y` (NaN stays
    NaN, relu included; -inf gives NaN for the three smooth ones, as torch)."""
    y = np.asarray(y, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if name is None:
            return y
        if name == "relu":
            return np.where(y < 0, 0.0, y)
        if name == "gelu":
            return 0.5 * y * (1.0 + _erf(y / math.sqrt(2.0)))
        if name == "gelu_tanh":
            return 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))
        if name == "silu":
            return y / (1.0 + np.exp(-y))
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


# -- matmul / gemm ------------------------------------------------------------------------------
def matmul(a, b):
    a, b = f64(a, b)
    return np.asarray(a @ b)


def gemm(a, b, c=None, alpha=1.0, beta=None, trans_a=False, trans_b=False, activation=None):
    """beta=None: 1 with c, else 0 (torch.addmm); beta=0 ignores c (NaN in it too), and
    alpha=0 the product (torch.addmm and BLAS compute none: NaN/Inf in a or b are not read)."""
    a, b, c = f64(a, b, c)
    if beta is None:
        beta = 0.0 if c is None else 1.0
    if trans_a:
        a = np.swapaxes(a, -1, -2)
    if trans_b:
        b = np.swapaxes(b, -1, -2)
    y = alpha * (a @ b) if alpha != 0 else np.zeros(np.broadcast_shapes(
        a.shape[:-1] + (1,), b.shape[:-2] + (1, b.shape[-1])))
    if c is not None and beta != 0:
        y = y + beta * c
    return activate(y, activation)


def linear(x, weight, bias=None, activation=None):
    """x @ weight.T + bias (torch.nn.functional.linear), then the activation."""
    x, w, bias = f64(x, weight, bias)
    y = x @ w.T
    return activate(y if bias is None else y + bias, activation)


# -- conv2d -------------------------------------------------------------------------------------
def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None):
    x, w, bias = f64(x, w, bias)
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    sh, sw = _two(stride)
    dh, dw = _two(dilation)
    if padding == "valid":
        pads = ((0, 0), (0, 0))
    elif padding == "same":  # torch: total d*(k-1), the extra one at the end
        th, tw = dh * (R - 1), dw * (S - 1)
        pads = ((th // 2, th - th // 2), (tw // 2, tw - tw // 2))
    else:
        ph, pw = _two(padding)
        pads = ((ph, ph), (pw, pw))
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    Hp, Wp = xp.shape[2:]
    P = len(range(0, Hp - dh * (R - 1), sh))
    Q = len(range(0, Wp - dw * (S - 1), sw))
    y = np.zeros((N, K if C else 0, P, Q))   # no input channels: torch gives no channels
    if C == 0:
        return y[0] if unbatched else y
    Kg = K // groups
    for g in range(groups):
        xg = xp[:, g * Cg:(g + 1) * Cg]
        wg = w[g * Kg:(g + 1) * Kg]
        for r in range(R):
            for s in range(S):
                patch = xg[:, :, r * dh: r * dh + (P - 1) * sh + 1: sh,
                           s * dw: s * dw + (Q - 1) * sw + 1: sw]
                y[:, g * Kg:(g + 1) * Kg] += np.einsum("ncpq,kc->nkpq", patch, wg[:, :, r, s],
                                                    optimize=True)
    if bias is not None:
        y += bias[None, :, None, None]
    y = activate(y, activation)
    return y[0] if unbatched else y


# -- pooling ------------------------------------------------------------------------------------
def window_starts(n, k, s, p, d, ceil_mode):
    """Window starts (in unpadded coordinates) along one axis, by enumeration: a window
    must fit in the padded input, except that ceil_mode admits one more partial window
    as long as it starts inside the input or its left padding."""
    eff = d * (k - 1) + 1
    starts = []
    i = 0
    while True:
        st = i * s - p
        fits = st + eff <= n + p
        if fits or (ceil_mode and st < n and (i - 1) * s - p + eff < n + p):
            starts.append(st)
            i += 1
            if not fits:
                break
        else:
            break
    return starts


def _pool_windows(x, kernel_size, stride, padding, dilation, ceil_mode):
    """x as float64 (N, C, H, W), whether it came unbatched, and its pooling windows: their
    size (kh, kw), dilation (dh, dw), padding (ph, pw) and starts along H and along W."""
    x = np.asarray(x, np.float64)
    unbatched = x.ndim == 3
    xb = x[None] if unbatched else x
    k, d, p = _two(kernel_size), _two(dilation), _two(padding)
    s = _two(stride if stride is not None else kernel_size)
    starts = tuple(window_starts(n, k[a], s[a], p[a], d[a], ceil_mode)
                   for a, n in enumerate(xb.shape[2:]))
    return xb, unbatched, k, d, p, starts


def _pool(x, kernel_size, stride, padding, dilation, ceil_mode, reduce):
    x, unbatched, (kh, kw), (dh, dw), (ph, pw), (hs, ws) = _pool_windows(
        x, kernel_size, stride, padding, dilation, ceil_mode)
    N, C, H, W = x.shape
    y = np.empty((N, C, len(hs), len(ws)))
    for i, h0 in enumerate(hs):
        for j, w0 in enumerate(ws):
            y[:, :, i, j] = reduce(x, h0, w0, kh, kw, dh, dw, ph, pw, H, W)
    return y[0] if unbatched else y


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    if return_indices:
        return _max_pool2d_indices(x, kernel_size, stride, padding, dilation, ceil_mode)

    def taps(start, k, d, n):
        """The window's taps inside the input, as a slice (they are evenly spaced)."""
        inside = [start + a * d for a in range(k) if 0 <= start + a * d < n]
        return slice(inside[0], inside[-1] + 1, d) if inside else slice(0, 0)

    def red(x, h0, w0, kh, kw, dh, dw, ph, pw, H, W):
        rows, cols = taps(h0, kh, dh, H), taps(w0, kw, dw, W)
        # a window wholly in the padding (possible with dilation) is -inf, as torch
        return x[:, :, rows, cols].max(axis=(2, 3), initial=-np.inf)
    return _pool(x, kernel_size, stride, padding, dilation, ceil_mode, red)


def _first_tap(start, dilation):
    """The first of start, start + dilation, ... that is >= 0."""
    return start if start >= 0 else start + (-start + dilation - 1) // dilation * dilation


def _max_pool2d_indices(x, kernel_size, stride, padding, dilation, ceil_mode):
    """(values, int64 indices) by torch's rule, stated once here: tap by tap in row-major
    window order from -inf at the window's first tap inside the input, a tap wins when it
    is greater or NaN (so ties keep the first, the last NaN wins)."""
    xb, unbatched, (kh, kw), (dh, dw), _, (hs, ws) = _pool_windows(
        x, kernel_size, stride, padding, dilation, ceil_mode)
    N, C, H, W = xb.shape
    y = np.full((N, C, len(hs), len(ws)), -np.inf)
    idx = np.zeros(y.shape, np.int64)
    for i, h0 in enumerate(hs):
        for j, w0 in enumerate(ws):
            taps = [(h, w) for h in range(h0, h0 + kh * dh, dh) if 0 <= h < H
                    for w in range(w0, w0 + kw * dw, dw) if 0 <= w < W]
            m, at = y[:, :, i, j], idx[:, :, i, j]          # views
            # the seed: the first tap at h, w >= 0 (torch steps a negative start by the
            # dilation); a window of padding only (dilation > 1) keeps -inf and that index
            at[...] = _first_tap(h0, dh) * W + _first_tap(w0, dw)
            for h, w in taps:
                v = xb[:, :, h, w]
                win = (v > m) | np.isnan(v)
                m[win], at[win] = v[win], h * W + w
    return (y[0], idx[0]) if unbatched else (y, idx)


def adaptive_avg_pool2d(x, output_size):
    """torch's adaptive windows: output p covers [floor(p*H/P), ceil((p+1)*H/P))."""
    x = np.asarray(x, np.float64)
    unbatched = x.ndim == 3
    xb = x[None] if unbatched else x
    H, W = xb.shape[-2:]
    size = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * 2
    P, Q = (H if size[0] is None else size[0]), (W if size[1] is None else size[1])
    y = np.empty(xb.shape[:2] + (P, Q))
    for p in range(P):
        h0, h1 = (p * H) // P, -(-((p + 1) * H) // P)
        for q in range(Q):
            w0, w1 = (q * W) // Q, -(-((q + 1) * W) // Q)
            y[:, :, p, q] = xb[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return y[0] if unbatched else y


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    def red(x, h0, w0, kh, kw, dh, dw, ph, pw, H, W):
        # torch: the count_include_pad window is clipped to the padded extent only
        h1, w1 = min(h0 + kh, H + ph), min(w0 + kw, W + pw)
        padded_count = (h1 - h0) * (w1 - w0)
        a0, a1, b0, b1 = max(h0, 0), min(h1, H), max(w0, 0), min(w1, W)
        total = x[:, :, a0:a1, b0:b1].sum(axis=(2, 3))
        if divisor_override:
            div = divisor_override
        elif count_include_pad:
            div = padded_count
        else:
            div = (a1 - a0) * (b1 - b0)
        return total / div
    return _pool(x, kernel_size, stride, padding, 1, ceil_mode, red)


# -- softmax ------------------------------------------------------------------------------------
def softmax(x, axis=-1):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):     # a row of -inf: -inf - -inf is NaN, as torch's
        z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):     # (see softmax)
        z = x - x.max(axis=axis, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


# -- normalisation ------------------------------------------------------------------------------
def _last_axes(ndim, normalized_shape):
    k = len(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else 1
    return tuple(range(ndim - k, ndim))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    x, weight, bias = f64(x, weight, bias)
    axes = _last_axes(x.ndim, normalized_shape)
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """eps None: the machine epsilon of x's dtype, as torch."""
    dt = np.asarray(x).dtype
    x, weight = f64(x, weight)
    if eps is None:
        eps = float(np.finfo(dt).eps)
    axes = _last_axes(x.ndim, normalized_shape)
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y * weight if weight is not None else y


def _per_channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    x, weight, bias = f64(x, weight, bias)
    N, C = x.shape[:2]
    g = x.reshape(N, num_groups, -1)
    mu = g.mean(axis=2, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=2, keepdims=True)
    y = ((g - mu) / np.sqrt(var + eps)).reshape(x.shape)
    if weight is not None:
        y = y * _per_channel(weight, x.ndim)
    if bias is not None:
        y = y + _per_channel(bias, x.ndim)
    return y


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """(y, new_running_mean, new_running_var); the running stats are returned updated
    (training) or unchanged, never modified in place."""
    x, rm, rv, weight, bias = f64(x, running_mean, running_var, weight, bias)
    axes = (0,) + tuple(range(2, x.ndim))
    if training:
        n = x.size // x.shape[1]
        mu = x.mean(axis=axes)
        var = ((x - _per_channel(mu, x.ndim)) ** 2).mean(axis=axes)
        if rm is not None:
            rm = (1 - momentum) * rm + momentum * mu
            rv = (1 - momentum) * rv + momentum * var * n / (n - 1)
    else:
        mu, var = rm, rv
    y = (x - _per_channel(mu, x.ndim)) / np.sqrt(_per_channel(var, x.ndim) + eps)
    if weight is not None:
        y = y * _per_channel(weight, x.ndim)
    if bias is not None:
        y = y + _per_channel(bias, x.ndim)
    return y, rm, rv


# -- attention ----------------------------------------------------------------------------------
def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch's math formulation: scores = scale * q k^T, a bool mask / causal triangle added
    as 0 / -inf (so a NaN score stays NaN), a float mask added; a row whose scores are all
    -inf gets weights 0 (torch's safe softmax), so its output is 0 @ v."""
    q, k, v = f64(query, key, value)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and q.ndim >= 3:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    if E > 0:
        scores = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(E) if scale is None else scale)
    else:   # every product is empty: the scores are 0 whatever the scale (torch)
        scores = np.zeros(np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (L, S))
    if is_causal:
        scores = scores + np.where(np.tri(L, S, dtype=bool), 0.0, -np.inf)
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        scores = scores + (np.where(m, 0.0, -np.inf) if m.dtype == bool else m.astype(np.float64))
    with np.errstate(invalid="ignore"):
        empty = np.all(scores == -np.inf, axis=-1, keepdims=True)
        top = np.where(empty, 0.0, np.max(scores, axis=-1, keepdims=True, initial=-np.inf))
        e = np.exp(scores - top)
        w = np.where(empty, 0.0, e / np.where(empty, 1.0, e.sum(axis=-1, keepdims=True)))
    return w @ v
