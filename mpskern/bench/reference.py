"""float64 references for the benchmark's correctness check (numpy only, vectorised).

They cover the argument subset the benchmark's shapes use (see mpskern/bench/ops.py): conv2d
with stride, padding, dilation and groups; pooling without ceil_mode (so every window lies
inside the padded input and the count_include_pad divisor is the window size); softmax over
the last axis; the norms with weight and bias; batch_norm in inference.
"""
import numpy as np


def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def conv2d(x, w, b, stride, pad, dil, groups):
    x, w, b = _f64(x), _f64(w), _f64(b)
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    P = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    Q = (W + 2 * pad - dil * (S - 1) - 1) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    xg = xp.reshape(N, groups, Cg, xp.shape[2], xp.shape[3])
    wg = w.reshape(groups, K // groups, Cg, R, S)
    y = np.zeros((N, groups, K // groups, P, Q))
    for r in range(R):
        for s in range(S):
            h0, w0 = r * dil, s * dil
            win = xg[:, :, :, h0:h0 + stride * (P - 1) + 1:stride, w0:w0 + stride * (Q - 1) + 1:stride]
            y += np.einsum("ngchw,gkc->ngkhw", win, wg[:, :, :, r, s], optimize=True)
    y = y.reshape(N, K, P, Q)
    if b is not None:
        y += b.reshape(1, K, 1, 1)
    return y


def pool2d(x, k, stride, pad, mode):
    x = _f64(x)
    N, C, H, W = x.shape
    P = (H + 2 * pad - k) // stride + 1
    Q = (W + 2 * pad - k) // stride + 1
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    win = win[:, :, :stride * (P - 1) + 1:stride, :stride * (Q - 1) + 1:stride]
    return win.max(axis=(-2, -1)) if mode == "max" else win.mean(axis=(-2, -1))


def softmax(x, log=False):
    x = _f64(x)
    z = x - x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def layer_norm(x, w, b, eps):
    x = _f64(x)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * _f64(w) + _f64(b)


def rms_norm(x, w, eps):
    x = _f64(x)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * _f64(w)


def batch_norm(x, mean, var, w, b, eps):
    sh = (1, -1, 1, 1)
    return ((_f64(x) - _f64(mean).reshape(sh)) / np.sqrt(_f64(var).reshape(sh) + eps)
            * _f64(w).reshape(sh) + _f64(b).reshape(sh))


def group_norm(x, groups, w, b, eps):
    x = _f64(x)
    N, C = x.shape[:2]
    g = x.reshape(N, groups, -1)
    mu = g.mean(axis=-1, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((g - mu) / np.sqrt(var + eps)).reshape(x.shape)
    sh = (1, C) + (1,) * (x.ndim - 2)
    return y * _f64(w).reshape(sh) + _f64(b).reshape(sh)


def gemm(a, b, c, alpha, beta, trans_a, trans_b):
    a, b = _f64(a), _f64(b)
    y = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
    return y + beta * _f64(c) if c is not None else y
