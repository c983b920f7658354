"""Every op on every backend here (cpu, sim) with NaN, +-Inf and near-max values in its
input, against the float64 reference (mpskern/reference.py) rounded to the output dtype:
the non-finite outputs must be exactly where (and of the sign) the reference has them, the
finite ones within the one tolerance rule. Near-max inputs ("big": |x| = 0.9 x the dtype's
largest value at every third element, the other operand scaled so that the exact results
stay representable) must give finite results; "overflow" (exact results beyond the range)
must give +-Inf, not NaN.

Backends are cpu and sim whatever MPSKERN_TEST_BACKENDS says (these cases are small), so
that CI checks the Metal kernels' non-finite handling too. Known findings owned by other
developers are strict xfails naming the owner: the fix makes them XPASS, which fails, so
whoever fixes one removes its entry from KNOWN."""
import itertools
import zlib

import numpy as np
import pytest

import mpskern
import mpskern.reference as R
import refs
from mpskern import backends

BACKENDS = ["cpu", "sim"]
SPECIALS = ["nan", "inf", "-inf", "inf-inf", "big"]
DT_IDS = {np.float32: "f32", np.float16: "f16"}


def _r(rng, shape, dt, scale=1.0):
    return (rng.uniform(-1, 1, shape) * scale).astype(dt)


def _poison(x, special):
    """x with `special` placed at the first, a middle and the last element (inf-inf: +Inf
    and -Inf side by side in the middle, so that one window or row holds both); big: 0.9 x
    the dtype's maximum, with x's sign, at every third element."""
    x = x.copy()
    f = x.reshape(-1)
    if special == "big":
        f[::3] = np.where(f[::3] < 0, -1, 1) * 0.9 * float(np.finfo(x.dtype).max)
    elif special == "inf-inf":
        f[f.size // 2] = np.inf
        f[min(f.size // 2 + 1, f.size - 1)] = -np.inf
    else:
        v = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[special]
        f[[0, f.size // 2, f.size - 1]] = v
    return x


# Each case: build(rng, dt, special) -> (call(backend) -> list of arrays, refs (list), terms).
# The poisoned operand is x (matmul/gemm: a, and b for the "b" cases); its partner is scaled
# by 1/terms so that "big" results stay in range.
def _matmul(sa, sb, poison_b=False):
    def build(rng, dt, special):
        k = sa[-1]
        a, b = _r(rng, sa, dt), _r(rng, sb, dt, 1.0 / k)
        if poison_b:
            a, b = _r(rng, sa, dt, 1.0 / k), _poison(_r(rng, sb, dt), special)
        else:
            a = _poison(a, special)
        return lambda be: [mpskern.matmul(a, b, backend=be)], [refs.matmul(a, b)], k
    return build


def _gemm(M, N, K, trans_a, trans_b, alpha, beta):
    def build(rng, dt, special):
        a = _poison(_r(rng, (K, M) if trans_a else (M, K), dt), special)
        b = _r(rng, (N, K) if trans_b else (K, N), dt, 1.0 / K)
        c = _r(rng, (M, N), dt)
        def call(be):
            return [mpskern.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a,
                                 trans_b=trans_b, backend=be)]
        return call, [refs.gemm(a, b, c, alpha, beta, trans_a, trans_b)], K
    return build


def _conv(xs, ws, bias=False, algo=None, poison_w=False, **kw):
    def build(rng, dt, special):
        terms = ws[1] * ws[2] * ws[3]
        x, w = _poison(_r(rng, xs, dt), special), _r(rng, ws, dt, 1.0 / terms)
        if poison_w:     # the weights carry the specials (x small)
            x, w = _r(rng, xs, dt, 1.0 / terms), _poison(_r(rng, ws, dt), special)
        b = _r(rng, (ws[0],), np.float32) if bias else None
        return (lambda be: [mpskern.conv2d(x, w, b, backend=be, **kw)],
                [refs.conv2d(x, w, b, **kw)], terms)
    build.algo = algo
    return build


def _pool(name, xs, k, **kw):
    def build(rng, dt, special):
        x = _poison(_r(rng, xs, dt), special)
        kk = k * k if isinstance(k, int) else k[0] * k[1]
        return (lambda be: [getattr(mpskern, name)(x, k, backend=be, **kw)],
                [getattr(refs, name)(x, k, **kw)], kk)
    return build


def _softmax(name, shape, axis):
    def build(rng, dt, special):
        x = _poison(_r(rng, shape, dt, 4.0), special)
        return (lambda be: [getattr(mpskern, name)(x, axis=axis, backend=be)],
                [getattr(refs, name)(x, axis=axis)], shape[axis])
    return build


def _rownorm(name, shape, nd, affine):
    def build(rng, dt, special):
        x = _poison(_r(rng, shape, dt, 3.0), special)
        ns = shape[-nd:]
        w = _r(rng, ns, np.float32) if affine else None
        if name == "layer_norm":
            b = _r(rng, ns, np.float32) if affine else None
            return (lambda be: [mpskern.layer_norm(x, ns, w, b, 1e-5, backend=be)],
                    [refs.layer_norm(x, ns, w, b, 1e-5)], int(np.prod(ns)))
        return (lambda be: [mpskern.rms_norm(x, ns, w, backend=be)],
                [refs.rms_norm(x, ns, w)], int(np.prod(ns)))
    return build


def _group_norm(shape, groups):
    def build(rng, dt, special):
        x = _poison(_r(rng, shape, dt, 2.0), special)
        w, b = _r(rng, (shape[1],), np.float32), _r(rng, (shape[1],), np.float32)
        return (lambda be: [mpskern.group_norm(x, groups, w, b, backend=be)],
                [refs.group_norm(x, groups, w, b)], x.size // shape[0] // groups)
    return build


def _batch_norm(shape, training):
    def build(rng, dt, special):
        C = shape[1]
        x = _poison(_r(rng, shape, dt, 2.0), special)
        rm, rv = _r(rng, (C,), np.float32, 0.5), rng.uniform(0.5, 2, C).astype(np.float32)
        w, b = _r(rng, (C,), np.float32), _r(rng, (C,), np.float32)

        def call(be):
            m, v = rm.copy(), rv.copy()
            y = mpskern.batch_norm(x, m, v, w, b, training, 0.1, 1e-5, backend=be)
            return [y, m, v] if training else [y]
        y, m, v = refs.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)
        return call, [y, m, v] if training else [y], x.size // C
    return build


def _attention(qs, ks, vs, poison="q", **kw):
    def build(rng, dt, special):
        E, S = qs[-1], ks[-2]
        q, k, v = _r(rng, qs, dt), _r(rng, ks, dt, 1.0 / E), _r(rng, vs, dt)
        if poison == "q":
            q = _poison(q, special)
        elif poison == "k":
            q, k = _r(rng, qs, dt, 1.0 / E), _poison(_r(rng, ks, dt), special)
        else:
            v = _poison(v, special)
        f = mpskern.scaled_dot_product_attention
        return (lambda be: [f(q, k, v, backend=be, **kw)],
                [refs.scaled_dot_product_attention(q, k, v, **kw)], E + S)
    return build


def _adaptive(xs, size):
    def build(rng, dt, special):
        x = _poison(_r(rng, xs, dt), special)
        return (lambda be: [mpskern.adaptive_avg_pool2d(x, size, backend=be)],
                [R.adaptive_avg_pool2d(x, size)], xs[-2] * xs[-1])
    return build


def _max_indices(xs, k, **kw):
    """max_pool2d(return_indices=True): the values and, exactly, torch's indices."""
    def build(rng, dt, special):
        x = _poison(_r(rng, xs, dt), special)
        return (lambda be: list(mpskern.max_pool2d(x, k, return_indices=True, backend=be, **kw)),
                list(R.max_pool2d(x, k, return_indices=True, **kw)), 1)
    return build


def _act(op, act):
    """activation= epilogues: the poisoned operand's specials and results at +-Inf go
    through relu/gelu/gelu_tanh/silu (the reference: torch's values at +-Inf and NaN)."""
    def build(rng, dt, special):
        if op == "gemm":
            a, b, c = _poison(_r(rng, (6, 9), dt), special), _r(rng, (9, 5), dt, 1 / 9), _r(rng, (6, 5), dt)
            return (lambda be: [mpskern.gemm(a, b, c, activation=act, backend=be)],
                    [refs.gemm(a, b, c, activation=act)], 9)
        if op == "linear":
            x, w, b = _poison(_r(rng, (3, 7), dt), special), _r(rng, (4, 7), dt, 1 / 7), _r(rng, (4,), dt)
            return (lambda be: [mpskern.linear(x, w, b, activation=act, backend=be)],
                    [R.linear(x, w, b, activation=act)], 7)
        x, w = _poison(_r(rng, (1, 3, 6, 7), dt), special), _r(rng, (4, 3, 3, 3), dt, 1 / 27)
        b = _r(rng, (4,), np.float32)
        return (lambda be: [mpskern.conv2d(x, w, b, padding=1, activation=act, backend=be)],
                [refs.conv2d(x, w, b, padding=1, activation=act)], 27)
    return build


def _attention_mask(kind, poison="q", gqa=False):
    """Masks: bool with a fully masked row (its output is 0, as torch), float with a row of
    -inf and single -inf entries, a float mask carrying the specials itself; GQA."""
    def build(rng, dt, special):
        hq = 4 if gqa else 2
        q, k, v = _r(rng, (1, hq, 5, 8), dt), _r(rng, (1, 2, 7, 8), dt, 1 / 8), _r(rng, (1, 2, 7, 4), dt)
        if poison == "q":
            q = _poison(q, special)
        elif poison == "v":
            v = _poison(v, special)
        if kind == "bool":
            m = rng.uniform(size=(5, 7)) > 0.4
            m[2] = False
        elif kind == "float":
            m = _r(rng, (5, 7), np.float32, 2.0)
            m[1] = -np.inf
            m[3, 2] = -np.inf
        elif kind == "poisoned":                  # the mask holds the specials
            q, m = _r(rng, (1, hq, 5, 8), dt), _poison(_r(rng, (1, 1, 5, 7), dt), special)
        else:
            m = None
        f = mpskern.scaled_dot_product_attention
        return (lambda be: [f(q, k, v, attn_mask=m, enable_gqa=gqa, backend=be)],
                [refs.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=gqa)], 15)
    return build


CASES = {
    "matmul": _matmul((5, 9), (9, 4)),
    "matmul-b": _matmul((2, 3, 7), (7, 6), poison_b=True),
    "gemm": _gemm(6, 5, 11, False, False, 1.0, 0.0),
    "gemm-t-c": _gemm(5, 7, 9, True, True, 0.5, 2.0),
    "conv2d-3x3-pad": _conv((1, 3, 7, 9), (4, 3, 3, 3), bias=True, padding=1),
    "conv2d-stride-dil-groups": _conv((1, 4, 9, 10), (6, 2, 3, 3), stride=2, padding=2,
                                      dilation=2, groups=2),
    "conv2d-depthwise": _conv((2, 5, 6, 6), (5, 1, 3, 3), padding=1, groups=5),
    "conv2d-1x1": _conv((1, 8, 5, 5), (6, 8, 1, 1)),
    "conv2d-weights": _conv((1, 3, 6, 7), (4, 3, 3, 3), poison_w=True),
    # torch and the reference: zero padding x an Inf weight = NaN (0 * Inf)
    "conv2d-weights-padding": _conv((1, 3, 6, 7), (4, 3, 3, 3), poison_w=True, padding=1),
    "conv2d-weights-padding-depthwise": _conv((2, 4, 5, 5), (4, 1, 3, 3), poison_w=True,
                                              padding=1, groups=4),
    "conv2d-weights-padding-1px": _conv((1, 2, 1, 1), (2, 1, 2, 1), poison_w=True,
                                        padding=(1, 0), groups=2),
    "conv2d-weights-padding-depthwise-5x5": _conv((1, 3, 7, 8), (6, 1, 5, 5), poison_w=True,
                                                  stride=2, padding=3, dilation=2, groups=3),
    # cpu's default 3x3 path (Winograd F(4x4)) and F(2x2), forced on a small call
    "conv2d-winograd": _conv((1, 16, 9, 9), (8, 16, 3, 3), algo="winograd", padding=1),
    "conv2d-winograd2": _conv((1, 16, 9, 9), (8, 16, 3, 3), algo="winograd2", padding=1),
    "conv2d-winograd-weights": _conv((1, 16, 9, 9), (8, 16, 3, 3), algo="winograd", padding=1,
                                     poison_w=True),
    "conv2d-winograd2-weights": _conv((1, 16, 9, 9), (8, 16, 3, 3), algo="winograd2",
                                      padding=1, poison_w=True),
    "max_pool2d": _pool("max_pool2d", (2, 3, 9, 11), 3, stride=2, padding=1),
    "max_pool2d-dil-ceil": _pool("max_pool2d", (1, 2, 10, 7), (2, 3), stride=(2, 1),
                                 dilation=2, ceil_mode=True),
    "avg_pool2d": _pool("avg_pool2d", (2, 3, 9, 11), 3, stride=2, padding=1),
    "avg_pool2d-exclude-pad": _pool("avg_pool2d", (1, 2, 7, 10), 2, stride=2, padding=1,
                                    ceil_mode=True, count_include_pad=False),
    # wide outputs: the cpu row sweep (the cases above go window by window)
    "avg_pool2d-wide": _pool("avg_pool2d", (1, 2, 5, 40), 3, stride=1, padding=1),
    "avg_pool2d-wide-divisor": _pool("avg_pool2d", (1, 2, 5, 40), (2, 3), stride=(1, 2),
                                     divisor_override=2),
    "softmax": _softmax("softmax", (5, 37), -1),
    "softmax-axis0": _softmax("softmax", (37, 5), 0),
    "softmax-long": _softmax("softmax", (2, 1500), -1),
    "log_softmax": _softmax("log_softmax", (5, 37), -1),
    "log_softmax-axis1": _softmax("log_softmax", (3, 17, 6), 1),
    "layer_norm": _rownorm("layer_norm", (7, 33), 1, True),
    "layer_norm-long": _rownorm("layer_norm", (2, 2500), 1, False),
    "rms_norm": _rownorm("rms_norm", (5, 31), 1, True),
    "rms_norm-long": _rownorm("rms_norm", (2, 2500), 1, False),
    "group_norm": _group_norm((2, 6, 5, 7), 3),
    "batch_norm": _batch_norm((3, 5, 7), False),
    "batch_norm-training": _batch_norm((4, 3, 5, 5), True),
    "attention": _attention((1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 4)),
    "attention-key-causal": _attention((2, 1, 6, 4), (2, 1, 6, 4), (2, 1, 6, 3), poison="k",
                                       is_causal=True),
    "attention-value": _attention((1, 3, 4, 8), (1, 3, 9, 8), (1, 3, 9, 5), poison="v"),
    # causal with S > L: the last keys are hidden from every query; torch (every backend)
    # and the reference still multiply their weight 0 with their value: 0 * NaN = NaN
    "attention-value-causal": _attention((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3), poison="v",
                                         is_causal=True),
    # L = S = 130: the first query blocks (cpu 128 rows, metal MK_BQ) leave out the last keys
    # under causal unless that cannot change the result (a non-finite value or key there)
    "attention-value-causal-long": _attention((1, 1, 130, 4), (1, 1, 130, 4), (1, 1, 130, 3),
                                              poison="v", is_causal=True),
    "attention-key-causal-long": _attention((1, 1, 130, 4), (1, 1, 130, 4), (1, 1, 130, 3),
                                            poison="k", is_causal=True),
    # added after the sweep: the same classes for the ops and options that came later
    "attention-bool-mask": _attention_mask("bool"),
    "attention-bool-mask-value": _attention_mask("bool", poison="v"),
    "attention-float-mask": _attention_mask("float"),
    "attention-poisoned-mask": _attention_mask("poisoned"),
    "attention-gqa": _attention_mask(None, gqa=True),
    "adaptive_avg_pool2d": _adaptive((2, 3, 9, 11), (3, 4)),
    "adaptive_avg_pool2d-global": _adaptive((1, 4, 7, 6), 1),
    "adaptive_avg_pool2d-overlap": _adaptive((1, 2, 5, 7), (None, 3)),
    "max_pool2d-indices": _max_indices((2, 3, 9, 11), 3, stride=2, padding=1),
    "max_pool2d-indices-dil-ceil": _max_indices((1, 2, 10, 7), (2, 3), stride=(2, 1), dilation=2,
                                                ceil_mode=True),
    **{f"{op}-{act}": _act(op, act) for op in ("gemm", "linear", "conv2d")
       for act in ("relu", "gelu", "gelu_tanh", "silu")},
}

# (case, dtype, special, backend) -> the finding and who owns its fix (issue 15)
KNOWN = {}


def _known(cases, dtypes, specials, bes, why):
    for key in itertools.product(cases, dtypes, specials, bes):
        KNOWN[key] = why


def _params():
    for case in CASES:
        for dt in refs.DTYPES:
            for special in SPECIALS:
                for be in BACKENDS if not getattr(CASES[case], "algo", None) else ["cpu"]:
                    why = KNOWN.get((case, dt, special, be))
                    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
                    yield pytest.param(case, dt, special, be, marks=marks,
                                       id=f"{case}-{DT_IDS[dt]}-{special}-{be}")


@pytest.mark.parametrize("case,dtype,special,be", list(_params()))
def test_non_finite_and_near_max_inputs(case, dtype, special, be, monkeypatch):
    ok, why = backends.availability(be)
    if not ok:
        pytest.skip(f"backend {be} unavailable: {why}")
    build = CASES[case]
    if getattr(build, "algo", None):              # a forced cpu path
        monkeypatch.setenv("MPSKERN_CPU_CONV", build.algo)
    with np.errstate(all="ignore"):        # the references meet inf - inf, 0 * inf
        call, want, terms = build(np.random.default_rng(zlib.crc32(case.encode())), dtype,
                                  special)
        got = call(be)
    for i, (g, r) in enumerate(zip(got, want)):
        if g.dtype == np.int64:                    # max_pool2d's indices: torch's, exactly
            assert np.array_equal(g, r), f"{case} {special} on {be}: indices differ at " \
                f"{np.argwhere(g != r)[:4].tolist()}"
            continue
        # running statistics are float32 whatever x is
        dt = dtype if i == 0 else np.float32
        refs.assert_close(g, r, dt, terms=terms, what=f"{case} {special} on {be} output {i}")


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=DT_IDS.values())
@pytest.mark.parametrize("be", BACKENDS)
def test_results_beyond_the_range_are_inf_not_nan(be, dtype):
    """Exact results past the dtype's largest value round to +-Inf (no inf - inf = NaN
    inside a blocked or compensated sum)."""
    ok, why = backends.availability(be)
    if not ok:
        pytest.skip(f"backend {be} unavailable: {why}")
    big = 0.9 * float(np.finfo(dtype).max)
    a = np.full((3, 16), big, dtype)
    a[1] *= -1
    a[2, ::2] = 1
    b = np.full((16, 5), 0.5, dtype)
    ref = refs.matmul(a, b)
    with np.errstate(all="ignore"):
        assert np.isinf(ref.astype(dtype)[:2]).all()
        refs.assert_close(mpskern.matmul(a, b, backend=be), ref, dtype, terms=16,
                          what=f"matmul overflow on {be}")
        x = np.full((1, 2, 4, 4), big, dtype)
        w = np.full((3, 2, 2, 2), 1.0, dtype)
        refs.assert_close(mpskern.conv2d(x, w, backend=be), refs.conv2d(x, w), dtype,
                          terms=8, what=f"conv2d overflow on {be}")
