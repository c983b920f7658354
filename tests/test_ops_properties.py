"""Property tests (hypothesis): every op (attention, max_pool2d indices, adaptive_avg_pool2d
and activation= epilogues included) on cpu and sim against its float64 reference
(mpskern/reference.py, the one tolerance rule via refs.assert_close) over random shapes,
options (strides, paddings, dilations, groups, axes, transposes, ceil_mode, ...), dtypes,
non-contiguous inputs and a few NaN/+-Inf values. Near-max magnitudes are
tests/test_ops_nonfinite.py's (with its known findings).

Bounded for CI: the "ci" profile (default) runs EXAMPLES examples per op and backend,
derandomized (the same cases every run, no flaky CI); HYPOTHESIS_PROFILE=deep runs 400 with
fresh randomness, e.g.
    HYPOTHESIS_PROFILE=deep python -m pytest -q tests/test_ops_properties.py
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpskern
import mpskern.reference as R
import refs
from mpskern import backends

EXAMPLES = 40
settings.register_profile("ci", max_examples=EXAMPLES, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], database=None)
settings.register_profile("deep", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "ci"))

BACKENDS = ["cpu", "sim"]
SPECIAL = [np.nan, np.inf, -np.inf]


def _available(be):
    ok, why = backends.availability(be)
    return pytest.param(be, marks=[] if ok else [pytest.mark.skip(reason=f"{be}: {why}")])


# a parameter, not a fixture: hypothesis reruns the body, not function-scoped fixtures
on_backends = pytest.mark.parametrize("be", [_available(b) for b in BACKENDS])


@st.composite
def arrays(draw, shape, dtype, scale=2.0, specials=True):
    """A random array (values from a drawn seed), maybe a non-contiguous view (every other
    element along one axis, or a transpose of the last two), with up to 2 NaN/+-Inf."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    view = draw(st.sampled_from(["contiguous", "strided", "transposed"])) if shape else \
        "contiguous"
    if view == "strided":
        ax = draw(st.integers(0, len(shape) - 1))
        big = list(shape)
        big[ax] *= 2
        x = rng.uniform(-scale, scale, big).astype(dtype)
        x = x[(slice(None),) * ax + (slice(None, None, 2),)]
    elif view == "transposed" and len(shape) >= 2:
        t = shape[:-2] + (shape[-1], shape[-2])
        x = np.swapaxes(rng.uniform(-scale, scale, t).astype(dtype), -1, -2)
    else:
        x = rng.uniform(-scale, scale, shape).astype(dtype)
    if specials and x.size and draw(st.booleans()):
        x = x.copy() if not x.flags.writeable else x
        for _ in range(draw(st.integers(1, 2))):
            idx = tuple(draw(st.integers(0, n - 1)) for n in x.shape)
            x[idx] = draw(st.sampled_from(SPECIAL))
    assert x.shape == tuple(shape)
    return x


dtypes = st.sampled_from(refs.DTYPES)
small = st.integers(1, 9)


def _check(got, ref, dtype, terms, what, magnitude=None):
    refs.assert_close(got, ref, dtype, terms=terms, what=what, magnitude=magnitude)


def _abs(*xs):
    return [None if x is None else np.abs(np.asarray(x, np.float64)) for x in xs]


def _centred_magnitude(x, axes, w=None, b=None, eps=1e-5, mean=None, var=None):
    """What a normalisation's rounding error scales with: (|x| + |mean|) / sqrt(var + eps)
    (x - mean cancels when the spread is small next to the values), times |w|, plus |b|.
    mean/var given: inference's running statistics (broadcastable)."""
    x = np.asarray(x, np.float64)
    if mean is None:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    m = (np.abs(x) + np.abs(mean)) / np.sqrt(var + eps)
    m = m * np.abs(w) if w is not None else m
    return m + np.abs(b) if b is not None else m


def _channels(v, ndim):
    return None if v is None else np.asarray(v, np.float64).reshape((1, -1) + (1,) * (ndim - 2))


def _sizes(data, be, count, n_cpu=24, n_sim=12):
    """count sizes drawn from 1 up to n_cpu (n_sim on the slower simulator)."""
    size = st.integers(1, n_cpu if be == "cpu" else n_sim)
    return [data.draw(size) for _ in range(count)]


# -- matmul / gemm ----------------------------------------------------------------------
@on_backends
@given(data=st.data())
def test_matmul(be, data):
    dt = data.draw(dtypes)
    M, K, N = _sizes(data, be, 3)
    kind = data.draw(st.sampled_from(["2d", "vec-a", "vec-b", "batched", "broadcast"]))
    sa, sb = {"2d": ((M, K), (K, N)), "vec-a": ((K,), (K, N)), "vec-b": ((M, K), (K,)),
              "batched": ((2, M, K), (2, K, N)), "broadcast": ((3, 1, M, K), (2, K, N))}[kind]
    a, b = data.draw(arrays(sa, dt)), data.draw(arrays(sb, dt))
    with np.errstate(all="ignore"):
        _check(mpskern.matmul(a, b, backend=be), refs.matmul(a, b), dt, K, f"matmul {kind}",
               refs.matmul(*_abs(a, b)))


@on_backends
@given(data=st.data())
def test_gemm(be, data):
    dt = data.draw(dtypes)
    M, N, K = _sizes(data, be, 3)
    ta, tb = data.draw(st.booleans()), data.draw(st.booleans())
    alpha = data.draw(st.sampled_from([1.0, 0.5, -2.0]))
    a = data.draw(arrays((K, M) if ta else (M, K), dt))
    b = data.draw(arrays((N, K) if tb else (K, N), dt))
    c = data.draw(arrays((M, N), dt)) if data.draw(st.booleans()) else None
    beta = data.draw(st.sampled_from([0.0, 1.0, 0.25])) if c is not None else 0.0
    with np.errstate(all="ignore"):
        got = mpskern.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb, backend=be)
        ref = refs.gemm(a, b, c, alpha, beta, ta, tb)
        aa, ab, ac = _abs(a, b, c)
        mag = abs(alpha) * refs.gemm(aa, ab, None, 1.0, 0.0, ta, tb)
        mag = mag + abs(beta) * ac if c is not None else mag
    _check(got, ref, dt, K, f"gemm ta={ta} tb={tb} alpha={alpha} beta={beta} c={c is not None}",
           mag)


# -- conv2d -------------------------------------------------------------------------------
@on_backends
@given(data=st.data())
def test_conv2d(be, data):
    dt = data.draw(dtypes)
    g = data.draw(st.integers(1, 3))
    C, K = g * data.draw(st.integers(1, 3)), g * data.draw(st.integers(1, 3))
    R, S = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    dh, dw = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    form = data.draw(st.sampled_from(["ints", "same", "valid"]))
    sh, sw = (1, 1) if form == "same" else (data.draw(st.integers(1, 3)),
                                            data.draw(st.integers(1, 3)))
    ph, pw = (data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) if form == "ints" \
        else (0, 0)
    padding = (ph, pw) if form == "ints" else form
    extra = st.integers(0, 7 if be == "cpu" else 4)
    H = max(1, dh * (R - 1) + 1 - 2 * ph + data.draw(extra))
    W = max(1, dw * (S - 1) + 1 - 2 * pw + data.draw(extra))
    N = data.draw(st.integers(1, 2))
    x = data.draw(arrays((N, C, H, W), dt))
    # non-finite weights only without padding: 0 * Inf in the padding is test_ops_nonfinite's
    # known finding (conv2d-weights-padding)
    padded = form == "same" or ph or pw
    w = data.draw(arrays((K, C // g, R, S), dt, scale=1.0, specials=not padded))
    b = data.draw(arrays((K,), np.float32, specials=False)) if data.draw(st.booleans()) else None
    kw = dict(stride=(sh, sw), padding=padding, dilation=(dh, dw), groups=g)
    with np.errstate(all="ignore"):
        ref = refs.conv2d(x, w, b, **kw)
        _check(mpskern.conv2d(x, w, b, backend=be, **kw), ref, dt, C // g * R * S,
               f"conv2d x{x.shape} w{w.shape} {kw}", refs.conv2d(*_abs(x, w, b), **kw))


# -- pooling -------------------------------------------------------------------------------
@st.composite
def pool_params(draw, be, dilation):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))
    dh, dw = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    extra = st.integers(0, 8 if be == "cpu" else 5)
    H = max(1, dh * (kh - 1) + 1 - 2 * ph + draw(extra))
    W = max(1, dw * (kw - 1) + 1 - 2 * pw + draw(extra))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), H, W)
    if draw(st.booleans()):
        shape = shape[1:]                                   # unbatched (C, H, W)
    kw_ = dict(stride=(sh, sw), padding=(ph, pw), ceil_mode=draw(st.booleans()))
    if dilation:
        kw_["dilation"] = (dh, dw)
    return shape, (kh, kw), kw_


@on_backends
@given(data=st.data())
def test_max_pool2d(be, data):
    dt = data.draw(dtypes)
    shape, k, kw = data.draw(pool_params(be, True))
    x = data.draw(arrays(shape, dt))
    with np.errstate(all="ignore"):
        _check(mpskern.max_pool2d(x, k, backend=be, **kw), refs.max_pool2d(x, k, **kw), dt,
               k[0] * k[1], f"max_pool2d x{shape} k{k} {kw}")


@on_backends
@given(data=st.data())
def test_avg_pool2d(be, data):
    dt = data.draw(dtypes)
    shape, k, kw = data.draw(pool_params(be, False))
    kw["count_include_pad"] = data.draw(st.booleans())
    kw["divisor_override"] = data.draw(st.sampled_from([None, None, 1, 5]))
    x = data.draw(arrays(shape, dt))
    with np.errstate(all="ignore"):
        _check(mpskern.avg_pool2d(x, k, backend=be, **kw), refs.avg_pool2d(x, k, **kw), dt,
               k[0] * k[1], f"avg_pool2d x{shape} k{k} {kw}",
               refs.avg_pool2d(np.abs(x.astype(np.float64)), k, **kw))


def rows_case(data, be, last_cpu, last_sim, other):
    """(dtype, shape) of a row op's input: 1-3 dimensions, the last axis up to last_cpu
    (last_sim on the slower simulator), the others up to `other`."""
    dt = data.draw(dtypes)
    nd = data.draw(st.integers(1, 3))
    last = last_cpu if be == "cpu" else last_sim
    return dt, tuple(data.draw(st.integers(1, last if i == nd - 1 else other)) for i in range(nd))


# -- softmax -------------------------------------------------------------------------------
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@on_backends
@given(data=st.data())
def test_softmax(be, log, data):
    dt, shape = rows_case(data, be, 300, 70, 6)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(arrays(shape, dt, scale=6.0))
    name = "log_softmax" if log else "softmax"
    with np.errstate(all="ignore"):
        _check(getattr(mpskern, name)(x, axis=axis, backend=be),
               getattr(refs, name)(x, axis=axis), dt, shape[axis], f"{name} {shape} axis={axis}")


# -- norms ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
@on_backends
@given(data=st.data())
def test_rownorm(be, name, data):
    dt, shape = rows_case(data, be, 600, 150, 5)
    nd = len(shape)
    k = data.draw(st.integers(1, nd))
    ns = shape[nd - k:]
    x = data.draw(arrays(shape, dt, scale=3.0))
    w = data.draw(arrays(ns, np.float32, specials=False)) if data.draw(st.booleans()) else None
    eps = data.draw(st.sampled_from([1e-5, 1e-3]))
    with np.errstate(all="ignore"):
        mag = None                   # rms_norm: a sum of squares, nothing cancels
        if name == "layer_norm":
            b = data.draw(arrays(ns, np.float32, specials=False)) if data.draw(st.booleans()) \
                else None
            got = mpskern.layer_norm(x, ns, w, b, eps, backend=be)
            ref = refs.layer_norm(x, ns, w, b, eps)
            mag = _centred_magnitude(x, tuple(range(nd - k, nd)), w, b, eps)
        else:
            got, ref = mpskern.rms_norm(x, ns, w, eps, backend=be), refs.rms_norm(x, ns, w, eps)
    _check(got, ref, dt, int(np.prod(ns)), f"{name} {shape} over {ns}", mag)


@on_backends
@given(data=st.data())
def test_group_norm(be, data):
    dt = data.draw(dtypes)
    g = data.draw(st.integers(1, 4))
    C = g * data.draw(st.integers(1, 3))
    spatial = tuple(data.draw(st.integers(1, 7)) for _ in range(data.draw(st.integers(0, 2))))
    shape = (data.draw(st.integers(1, 3)), C) + spatial
    x = data.draw(arrays(shape, dt, scale=3.0))
    affine = data.draw(st.booleans())
    w = data.draw(arrays((C,), np.float32, specials=False)) if affine else None
    b = data.draw(arrays((C,), np.float32, specials=False)) if affine else None
    with np.errstate(all="ignore"):
        mag = _centred_magnitude(x.reshape(shape[0], g, -1), 2).reshape(shape)
        mag = mag * np.abs(_channels(w, x.ndim)) + np.abs(_channels(b, x.ndim)) if affine else mag
        _check(mpskern.group_norm(x, g, w, b, backend=be), refs.group_norm(x, g, w, b), dt,
               x.size // shape[0] // g, f"group_norm {shape} groups={g}", mag)


@on_backends
@given(data=st.data())
def test_batch_norm(be, data):
    dt = data.draw(dtypes)
    C = data.draw(st.integers(1, 5))
    spatial = tuple(data.draw(st.integers(1, 6)) for _ in range(data.draw(st.integers(0, 2))))
    shape = (data.draw(st.integers(2, 4)), C) + spatial
    training = data.draw(st.booleans())
    x = data.draw(arrays(shape, dt, scale=3.0))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    rm = rng.uniform(-1, 1, C).astype(np.float32)
    rv = rng.uniform(0.5, 2, C).astype(np.float32)
    w, b = rng.uniform(-1, 1, C).astype(np.float32), rng.uniform(-1, 1, C).astype(np.float32)
    momentum = data.draw(st.sampled_from([0.1, 0.5]))
    with np.errstate(all="ignore"):
        ref_y, ref_m, ref_v = refs.batch_norm(x, rm, rv, w, b, training, momentum, 1e-5)
        m, v = rm.copy(), rv.copy()
        got = mpskern.batch_norm(x, m, v, w, b, training, momentum, 1e-5, backend=be)
        axes = (0,) + tuple(range(2, x.ndim))
        stats = {} if training else dict(mean=_channels(rm, x.ndim), var=_channels(rv, x.ndim))
        mag = _centred_magnitude(x, axes, _channels(w, x.ndim), _channels(b, x.ndim), **stats)
    n = x.size // C
    what = f"batch_norm {shape} training={training}"
    _check(got, ref_y, dt, n, what, mag)
    _check(m, ref_m, np.float32, n, what + " running_mean")
    _check(v, ref_v, np.float32, n, what + " running_var")


# -- attention -----------------------------------------------------------------------------
@on_backends
@given(data=st.data())
def test_scaled_dot_product_attention(be, data):
    dt = data.draw(dtypes)
    B, hkv = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    gqa = data.draw(st.booleans())
    hq = hkv * data.draw(st.integers(1, 2)) if gqa else hkv
    L, S = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    E, Ev = data.draw(st.integers(1, 16)), data.draw(st.integers(1, 8))
    kind = data.draw(st.sampled_from(["none", "causal", "bool", "float"]))
    # NaN/Inf behind masks too: a hidden score of Inf + -inf is NaN for torch, a hidden value's
    # weight 0 times Inf/NaN is NaN (the kernels add -inf to hidden scores; causal leaves keys
    # out only where that cannot change the result)
    q = data.draw(arrays((B, hq, L, E), dt, specials=True))
    k = data.draw(arrays((B, hkv, S, E), dt, specials=True))
    v = data.draw(arrays((B, hkv, S, Ev), dt, specials=True))
    mask = None
    if kind == "bool":
        mask = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).random((L, S)) < 0.7
    elif kind == "float":
        mask = data.draw(arrays((L, S), dt, specials=False))
    kw = dict(attn_mask=mask, is_causal=kind == "causal", enable_gqa=gqa,
              scale=data.draw(st.sampled_from([None, 0.5])))
    f = mpskern.scaled_dot_product_attention
    with np.errstate(all="ignore"):
        ref = refs.scaled_dot_product_attention(q, k, v, **kw)
        mag = refs.scaled_dot_product_attention(q, k, np.abs(v.astype(np.float64)), **kw)
        _check(f(q, k, v, backend=be, **kw), ref, dt, S + E,
               f"attention q{q.shape} k{k.shape} v{v.shape} {kind} gqa={gqa}", mag)


# -- added after the sweep: indices, adaptive pooling, activation epilogues -----------------
@on_backends
@given(data=st.data())
def test_max_pool2d_indices(be, data):
    """return_indices=True: the values as max_pool2d's, the indices exactly torch's (first
    of equal maxima, the window's last NaN, a window of -inf: its first element inside)."""
    dt = data.draw(dtypes)
    shape, k, kw = data.draw(pool_params(be, True))
    x = data.draw(arrays(shape, dt))
    if data.draw(st.booleans()):             # ties: few distinct values
        x = np.round(x).astype(dt)
    with np.errstate(all="ignore"):
        y, i = mpskern.max_pool2d(x, k, return_indices=True, backend=be, **kw)
        ry, ri = R.max_pool2d(x, k, return_indices=True, **kw)
    _check(y, ry, dt, k[0] * k[1], f"max_pool2d indices x{shape} k{k} {kw}")
    assert i.dtype == np.int64 and np.array_equal(i, ri), \
        f"max_pool2d indices x{shape} k{k} {kw}: differ at {np.argwhere(i != ri)[:4].tolist()}"


@on_backends
@given(data=st.data())
def test_adaptive_avg_pool2d(be, data):
    dt = data.draw(dtypes)
    H, W = _sizes(data, be, 2, n_cpu=14, n_sim=9)
    size = tuple(data.draw(st.one_of(st.none(), st.integers(1, n + 3))) for n in (H, W))
    if data.draw(st.booleans()) and size[0] is not None:
        size = size[0]                                    # one int: square output
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), H, W)
    if data.draw(st.booleans()):
        shape = shape[1:]
    x = data.draw(arrays(shape, dt))
    with np.errstate(all="ignore"):
        _check(mpskern.adaptive_avg_pool2d(x, size, backend=be), R.adaptive_avg_pool2d(x, size),
               dt, H * W, f"adaptive_avg_pool2d x{shape} output_size={size}",
               R.adaptive_avg_pool2d(np.abs(x.astype(np.float64)), size))


@on_backends
@given(data=st.data())
def test_activation_epilogues(be, data):
    """activation= on gemm, linear and conv2d: activation(the op's result) of the float64
    reference; the pre-activation magnitude bounds the error (|act'| <= 1.13)."""
    dt = data.draw(dtypes)
    act = data.draw(st.sampled_from(["relu", "gelu", "gelu_tanh", "silu"]))
    op = data.draw(st.sampled_from(["gemm", "linear", "conv2d"]))
    M, N, K = _sizes(data, be, 3)
    with np.errstate(all="ignore"):
        if op == "gemm":
            a, b = data.draw(arrays((M, K), dt)), data.draw(arrays((K, N), dt))
            c = data.draw(arrays((M, N), dt)) if data.draw(st.booleans()) else None
            got = mpskern.gemm(a, b, c, activation=act, backend=be)
            ref = refs.gemm(a, b, c, activation=act)
            mag = refs.gemm(*_abs(a, b, c))
        elif op == "linear":
            x, w = data.draw(arrays((M, K), dt)), data.draw(arrays((N, K), dt))
            bias = data.draw(arrays((N,), dt, specials=False)) if data.draw(st.booleans()) else None
            got = mpskern.linear(x, w, bias, activation=act, backend=be)
            ref = R.linear(x, w, bias, activation=act)
            mag = R.linear(*_abs(x, w, bias))
        else:
            C, H, W = data.draw(st.integers(1, 4)), data.draw(st.integers(3, 8)), data.draw(st.integers(3, 8))
            x = data.draw(arrays((1, C, H, W), dt))
            w = data.draw(arrays((N % 5 + 1, C, 3, 3), dt, scale=1.0, specials=False))
            bias = data.draw(arrays((w.shape[0],), np.float32, specials=False)) \
                if data.draw(st.booleans()) else None
            got = mpskern.conv2d(x, w, bias, padding=1, activation=act, backend=be)
            ref = refs.conv2d(x, w, bias, padding=1, activation=act)
            mag = refs.conv2d(*_abs(x, w, bias), padding=1)
            K = C * 9
    _check(got, ref, dt, K, f"{op} activation={act} {got.shape}", mag)
