"""Arguments at the edge of the kernels' int32 index math (issue 15 item 1).

Strides, paddings, dilations and kernel sizes up to 2**31 - 1 either give the result the
float64 definition gives (on cpu and sim) or a ValueError naming the argument; never a
crash, an OverflowError or a silently wrong answer. The cases run in a subprocess per
backend (a crash there fails the case that was running, and the suite survives)."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mpskern as mk
from mpskern import backends

BIG = 2 ** 31 - 1

# Direct float64 convolution, shared by both children (each is a `python -c` script).
CONV_REF = textwrap.dedent(r'''
    def pair(v):
        return tuple(v) if isinstance(v, tuple) else (v, v)

    def conv_ref(x, w, stride=1, padding=0, dilation=1, groups=1):
        """Direct float64 conv2d over the valid taps only (huge paddings stay cheap)."""
        x, w = x.astype(np.float64), w.astype(np.float64)
        (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
        N, C, H, W = x.shape
        K, Cg, R, S = w.shape
        P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
        Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
        y = np.zeros((N, K, P, Q))
        Kg = K // groups
        for k in range(K):
            g = k // Kg
            for p in range(P):
                for q in range(Q):
                    for r in range(R):
                        ih = p * sh - ph + r * dh
                        if not 0 <= ih < H:
                            continue
                        for s in range(S):
                            iw = q * sw - pw + s * dw
                            if 0 <= iw < W:
                                y[:, k, p, q] += x[:, g * Cg:(g + 1) * Cg, ih, iw] @ w[k, :, r, s]
        return y
''')

# The child: runs every case, printing {"case": name} before and the outcome after it.
CHILD = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    import mpskern as mk

    backend = sys.argv[1]

    # @CONV_REF

    def pool_ref(x, k, stride, padding, mode, ceil_mode=False, count_include_pad=True,
                 divisor=None):
        x = x.astype(np.float64)
        (kh, kw), (sh, sw), (ph, pw) = pair(k), pair(stride), pair(padding)
        N, C, H, W = x.shape
        def starts(n, k, s, p):
            out, i = [], 0
            while True:   # torch's rule, written out
                st = i * s - p
                fits = st + k <= n + p
                if fits or (ceil_mode and st < n and (i - 1) * s - p + k < n + p):
                    out.append(st); i += 1
                    if not fits:
                        return out
                else:
                    return out
        hs, ws = starts(H, kh, sh, ph), starts(W, kw, sw, pw)
        y = np.empty((N, C, len(hs), len(ws)))
        for i, h0 in enumerate(hs):
            for j, w0 in enumerate(ws):
                a0, a1 = max(h0, 0), min(h0 + kh, H)
                b0, b1 = max(w0, 0), min(w0 + kw, W)
                win = x[:, :, a0:max(a0, a1), b0:max(b0, b1)]
                if mode == "max":
                    y[:, :, i, j] = win.max(axis=(2, 3), initial=-np.inf)
                else:
                    cnt = ((min(h0 + kh, H + ph) - h0) * (min(w0 + kw, W + pw) - w0)
                           if count_include_pad else (a1 - a0) * (b1 - b0))
                    y[:, :, i, j] = win.sum(axis=(2, 3)) / (divisor or cnt)
        return y

    rng = np.random.default_rng(5)
    def rand(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    B = 2 ** 31 - 1
    cases = []
    def case(name):
        def add(fn):
            cases.append((name, fn))
            return fn
        return add

    for dt in (np.float32, np.float16):
        t = np.dtype(dt).name
        x, w = rand(1, 2, 5, 5, dtype=dt), rand(3, 2, 3, 3, dtype=dt)
        # the issue's case: im2col's column range computed (-off_w + stride_w - 1) in int
        case(f"conv stride 2^31-1 pad 2 {t}")(lambda x=x, w=w: (
            mk.conv2d(x, w, stride=B, padding=2, backend=backend), conv_ref(x, w, B, 2)))
        w5 = rand(3, 2, 1, 5, dtype=dt)
        case(f"conv stride (1, 2^31-1) pad (0, 3) {t}")(lambda x=x, w=w5: (
            mk.conv2d(x, w, stride=(1, B), padding=(0, 3), backend=backend),
            conv_ref(x, w, (1, B), (0, 3))))
        xd, wd = rand(1, 4, 6, 6, dtype=dt), rand(4, 1, 5, 5, dtype=dt)
        case(f"depthwise 5x5 stride 2^31-1 pad 2 {t}")(lambda x=xd, w=wd: (
            mk.conv2d(x, w, stride=B, padding=2, groups=4, backend=backend),
            conv_ref(x, w, B, 2, groups=4)))
        wd3 = rand(4, 1, 3, 3, dtype=dt)
        case(f"depthwise 3x3 stride 2^30 pad 2^30-4 {t}")(lambda x=xd, w=wd3: (
            mk.conv2d(x, w, stride=2 ** 30, padding=2 ** 30 - 4, groups=4, backend=backend),
            conv_ref(x, w, 2 ** 30, 2 ** 30 - 4, groups=4)))
        x1, w1 = rand(1, 2, 1, 1, dtype=dt), rand(2, 2, 1, 1, dtype=dt)
        # padding + stride - 1 = 2^31: the ceil division of the column range
        case(f"conv 1x1 stride 2^30+2 pad 2^30-1 {t}")(lambda x=x1, w=w1: (
            mk.conv2d(x, w, stride=2 ** 30 + 2, padding=2 ** 30 - 1, backend=backend),
            conv_ref(x, w, 2 ** 30 + 2, 2 ** 30 - 1)))
        x3, w3 = rand(1, 2, 3, 3, dtype=dt), rand(2, 2, 3, 3, dtype=dt)
        case(f"conv dilation 2^29 pad 2^29+1 {t}")(lambda x=x3, w=w3: (
            mk.conv2d(x, w, dilation=2 ** 29, padding=2 ** 29 + 1, backend=backend),
            conv_ref(x, w, 1, 2 ** 29 + 1, 2 ** 29)))
        xp = rand(1, 2, 6, 7, dtype=dt)
        for mode, fn in (("max", mk.max_pool2d), ("avg", mk.avg_pool2d)):
            case(f"{mode}_pool 5 stride 2^31-1 pad 2 {t}")(lambda x=xp, fn=fn, mode=mode: (
                fn(x, 5, stride=B, padding=2, backend=backend), pool_ref(x, 5, B, 2, mode)))
            case(f"{mode}_pool 5 stride 2^31-1 pad 2 ceil {t}")(lambda x=xp, fn=fn, mode=mode: (
                fn(x, 5, stride=B, padding=2, ceil_mode=True, backend=backend),
                pool_ref(x, 5, B, 2, mode, ceil_mode=True)))
            # a window of 2^30 taps, almost all padding: was a 8 GB table of tap ranges
            # (and a loop over every tap); the simulator's kernels loop over every tap
            # (metal/pool.metal), minutes for this one, so cpu only
            if backend == "cpu":
                case(f"{mode}_pool (1, 2^30) pad (0, 2^29) {t}")(lambda x=xp, fn=fn, mode=mode: (
                    fn(x, (1, 2 ** 30), stride=(1, 2 ** 26), padding=(0, 2 ** 29),
                       ceil_mode=True, backend=backend),
                    pool_ref(x, (1, 2 ** 30), (1, 2 ** 26), (0, 2 ** 29), mode, ceil_mode=True)))
        case(f"avg_pool no pad count stride 2^31-1 {t}")(lambda x=xp: (
            mk.avg_pool2d(x, 5, stride=B, padding=2, count_include_pad=False, backend=backend),
            pool_ref(x, 5, B, 2, "avg", count_include_pad=False)))
        case(f"avg_pool divisor_override 2^31-1 {t}")(lambda x=xp: (
            mk.avg_pool2d(x, 2, divisor_override=B, backend=backend),
            pool_ref(x, 2, 2, 0, "avg", divisor=B)))

    X = np.ones((1, 2, 5, 5), np.float32)
    Wt = np.ones((3, 2, 3, 3), np.float32)
    refusals = [
        ("conv stride 2^31", "stride=2147483648", lambda: mk.conv2d(X, Wt, stride=2 ** 31, backend=backend)),
        ("conv stride (1, 2^40)", "stride=(1, 1099511627776)", lambda: mk.conv2d(X, Wt, stride=(1, 2 ** 40), backend=backend)),
        ("conv dilation 2^31", "dilation=2147483648", lambda: mk.conv2d(X, Wt[:, :, :1, :1], dilation=2 ** 31, backend=backend)),
        ("conv padding 2^31-1", "padding=2147483647", lambda: mk.conv2d(X, Wt, padding=B, backend=backend)),
        ("conv padding 2^30 (padded 2^31+5)", "padding=1073741824", lambda: mk.conv2d(X, Wt, stride=B, padding=2 ** 30, backend=backend)),
        ("conv groups 2^31", "groups=2147483648", lambda: mk.conv2d(X, Wt, groups=2 ** 31, backend=backend)),
        ("max_pool stride 2^31", "stride=2147483648", lambda: mk.max_pool2d(X, 2, stride=2 ** 31, backend=backend)),
        ("max_pool kernel 2^31 pad 2^30", "kernel_size=2147483648", lambda: mk.max_pool2d(X, 2 ** 31, padding=2 ** 30, backend=backend)),
        ("max_pool dilation 2^31", "dilation=2147483648", lambda: mk.max_pool2d(X, 1, dilation=2 ** 31, backend=backend)),
        ("max_pool ceil reach 2^31", "stride=(1, 4)", lambda: mk.max_pool2d(np.ones((1, 1, 1, 1), np.float32), (1, 2 ** 31 - 2), stride=(1, 4), padding=(0, 2 ** 30 - 1), ceil_mode=True, backend=backend)),
        ("avg_pool divisor_override 2^31", "divisor_override=2147483648", lambda: mk.avg_pool2d(X, 2, divisor_override=2 ** 31, backend=backend)),
        ("avg_pool window of 2^31 elements", "kernel_size=(2, 1073741824)", lambda: mk.avg_pool2d(X, (2, 2 ** 30), padding=(0, 2 ** 29), backend=backend)),
        ("avg_pool window 46341^2", "kernel_size=46341", lambda: mk.avg_pool2d(X, 46341, padding=23170, backend=backend)),
        ("group_norm num_groups 2^31", "num_groups=2147483648", lambda: mk.group_norm(X, 2 ** 31, backend=backend)),
        ("set_num_threads 2^31", "n=2147483648", lambda: mk.set_num_threads(2 ** 31)),
    ]

    for name, fn in cases:
        print(json.dumps({"case": name}), flush=True)
        try:
            got, ref = fn()
        except Exception as e:
            print(json.dumps({"name": name, "error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        g = np.asarray(got, np.float64)
        ok = g.shape == ref.shape and bool(np.all(np.isfinite(g) == np.isfinite(ref)))
        # relative to max |ref|, but at least the dtype's smallest normal (x / (2**31 - 1)
        # is 0 in float16)
        scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, float(np.finfo(got.dtype).tiny))
        err = float(np.max(np.abs(g - ref)) / scale) if ok and ref.size else 0.0
        tol = 1e-5 if got.dtype == np.float32 else 4e-3
        print(json.dumps({"name": name, "ok": ok and err <= tol, "err": err,
                          "shape": list(g.shape), "ref_shape": list(ref.shape)}), flush=True)
    for name, want, fn in refusals:
        print(json.dumps({"case": name}), flush=True)
        try:
            fn()
            out = {"name": name, "ok": False, "error": "no error"}
        except ValueError as e:
            out = {"name": name, "ok": want in str(e) and "2**31" in str(e), "error": str(e)}
        except Exception as e:
            out = {"name": name, "ok": False, "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
    print(json.dumps({"done": len(cases) + len(refusals)}), flush=True)
''').replace("# @CONV_REF\n", CONV_REF)


def run_cases(backend):
    r = subprocess.run([sys.executable, "-c", CHILD, backend], capture_output=True, text=True,
                       timeout=600)
    rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    return r, rows


@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_int32_edges_give_the_result_or_name_the_argument(backend):
    ok, why = backends.availability(backend)
    if not ok:
        pytest.skip(why)
    r, rows = run_cases(backend)
    started = [row["case"] for row in rows if "case" in row]
    results = {row["name"]: row for row in rows if "name" in row}
    crashed = [c for c in started if c not in results]
    assert not crashed and rows and "done" in rows[-1], (
        f"{backend}: the process died (rc {r.returncode}) during {crashed}:\n{r.stderr[-2000:]}")
    bad = {n: row for n, row in results.items() if not row.get("ok")}
    assert not bad, f"{backend}: {len(bad)} of {len(results)} cases wrong:\n" + "\n".join(
        f"  {n}: {row}" for n, row in bad.items())


def test_refusals_name_the_argument_and_the_values():
    with pytest.raises(ValueError, match=r"conv2d: padding=1073741824 makes the padded input's "
                       r"height 5 \+ 2\*1073741824 = 2147483653, 2\*\*31 or more"):
        mk.conv2d(np.ones((1, 1, 5, 5), np.float32), np.ones((1, 1, 3, 3), np.float32),
                  stride=BIG, padding=2 ** 30, backend="cpu")


# The C ABI is public too: mk_cpu_conv2d / mk_cpu_pool2d with any consistent int32 struct
# (the Python layer's rules bypassed) must compute the definition, without a crash (and,
# in the sanitizer run, without signed overflow). Random structs near 2**31, fixed seed.
FUZZ = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    from mpskern import _native

    n_cases = int(sys.argv[1])
    rng = np.random.default_rng(15)
    EDGE = [0, 1, 2, 3, 7, 2 ** 15, 2 ** 29 + 1, 2 ** 30 - 1, 2 ** 30, 2 ** 30 + 2,
            2 ** 31 - 3, 2 ** 31 - 2, 2 ** 31 - 1]
    LIM = 2 ** 31

    def pick(lo=0):
        v = int(rng.choice(EDGE)) if rng.random() < 0.7 else int(rng.integers(0, 9))
        return max(v, lo)

    # @CONV_REF

    def taps(start, k, d, n):   # the window's taps inside [0, n), as indices
        return [start + t * d for t in range(k) if 0 <= start + t * d < n] if k < 64 else \
            [i for i in range(n) if i >= start and (i - start) % d == 0 and (i - start) // d < k]

    def conv_case():
        H, W, R, S = (int(rng.integers(1, 7)) for _ in range(4))
        sh, sw, dh, dw = pick(1), pick(1), pick(1), pick(1)
        ph, pw = pick(), pick()
        eh, ew = dh * (R - 1) + 1, dw * (S - 1) + 1
        if eh > H + 2 * ph or ew > W + 2 * pw:
            return None
        P, Q = (H + 2 * ph - eh) // sh + 1, (W + 2 * pw - ew) // sw + 1
        if P * Q > 64 or max(P, Q) >= LIM:
            return None
        groups = int(rng.choice([1, 2]))
        C, K = 2 * groups, 2 * groups
        dt = rng.choice([np.float32, np.float16])
        x = rng.standard_normal((1, C, H, W)).astype(dt)
        w = rng.standard_normal((K, C // groups, R, S)).astype(dt)
        a = dict(N=1, C=C, H=H, W=W, K=K, R=R, S=S, P=P, Q=Q, stride_h=sh, stride_w=sw,
                 pad_h=ph, pad_w=pw, dil_h=dh, dil_w=dw, groups=groups, has_bias=0,
                 activation=0)
        y = np.full((1, K, P, Q), np.nan, dt)
        _native.cpu_conv2d(a, _native.F16 if dt == np.float16 else _native.F32, x, w, None, y)
        ref = conv_ref(x, w, (sh, sw), (ph, pw), (dh, dw), groups)
        return a, y, ref

    def pool_case():
        H, W = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        kh, kw = pick(1), pick(1)
        sh, sw, dh, dw = pick(1), pick(1), pick(1), pick(1)
        ph, pw = pick(), pick()
        mode = int(rng.integers(0, 2))
        if mode == 1:
            dh = dw = 1
        P, Q = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        if any(v >= LIM for v in (H + ph, W + pw)):
            return None
        cip, div = int(rng.integers(0, 2)), int(rng.choice([0, 0, 3, 2 ** 31 - 1]))
        a = dict(N=1, C=2, H=H, W=W, P=P, Q=Q, kh=kh, kw=kw, stride_h=sh, stride_w=sw,
                 pad_h=ph, pad_w=pw, dil_h=dh, dil_w=dw, mode=mode, count_include_pad=cip,
                 divisor=div, pad_h_end=ph, pad_w_end=pw)
        x = rng.standard_normal((1, 2, H, W)).astype(np.float32)
        y = np.full((1, 2, P, Q), 7.0, np.float32)
        _native.cpu_pool2d(a, _native.F32, x, y, None)
        ref = np.empty((1, 2, P, Q))
        for p in range(P):
            h0 = p * sh - ph
            rows = taps(h0, kh, dh, H)
            for q in range(Q):
                w0 = q * sw - pw
                cols = taps(w0, kw, dw, W)
                win = x[0][:, rows][:, :, cols].astype(np.float64)
                if mode == 0:
                    ref[0, :, p, q] = win.max(axis=(1, 2), initial=-np.inf)
                    continue
                if div:
                    d = div
                elif cip:
                    # (a window starting past the padded input counts nothing: 0/0)
                    d = max(0, min(h0 + kh, H + ph) - h0) * max(0, min(w0 + kw, W + pw) - w0)
                else:
                    d = len(rows) * len(cols)
                ref[0, :, p, q] = win.sum(axis=(1, 2)) / d if d > 0 else np.nan
        return a, y, ref

    tried = 0
    while tried < n_cases:
        gen = conv_case if tried % 2 == 0 else pool_case
        state = rng.bit_generator.state
        c = gen()
        if c is None:
            continue
        tried += 1
        a, y, ref = c
        g = y.astype(np.float64)
        same_nan = np.array_equal(np.isnan(g), np.isnan(ref))
        fin = np.isfinite(ref)
        scale = max(float(np.max(np.abs(ref[fin]))) if fin.any() else 0.0, 1.0)
        ok = same_nan and np.array_equal(g[~fin], ref[~fin], equal_nan=True) and \
            (not fin.any() or float(np.max(np.abs(g[fin] - ref[fin]))) <= 4e-3 * scale)
        if not ok:
            print(json.dumps({"bad": gen.__name__, "args": a, "got": g.ravel()[:8].tolist(),
                              "ref": ref.ravel()[:8].tolist()}), flush=True)
    print(json.dumps({"done": tried}), flush=True)
''').replace("# @CONV_REF\n", CONV_REF)


def test_c_abi_extreme_geometry_is_computed_exactly():
    r = subprocess.run([sys.executable, "-c", FUZZ, "400"], capture_output=True, text=True,
                       timeout=600)
    rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert rows and "done" in rows[-1], f"died (rc {r.returncode}):\n{r.stderr[-2000:]}"
    bad = [row for row in rows if "bad" in row]
    assert not bad, f"{len(bad)} of {rows[-1]['done']} structs computed wrongly:\n" + \
        "\n".join(json.dumps(b) for b in bad[:10])
