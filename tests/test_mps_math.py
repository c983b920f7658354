"""The MPS backend's own arithmetic, checked here although MPS cannot run here.

mk_mps_pool.m and mk_mps_conv.m do not hand padding or ceil_mode to MPSGraph: they pad
explicitly by what objc/mk_mps_math.c computes, run a floor-mode unpadded pooling /
convolution, slice, and (avg pooling) divide a window sum by the C-computed divisor map.
This file compiles mk_mps_math.c with the host compiler, replays exactly that program in
numpy behind the real public API (backend "mps" with the native layer replaced), and
compares with the cpu backend over many option combinations. What it cannot check is
MPSGraph itself (tests/test_mac.py does, on a Mac)."""
import ctypes
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mpskern
from mpskern import backends

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(
    not shutil.which("cc") or not all(hasattr(mpskern, f) for f in ("conv2d", "max_pool2d", "avg_pool2d")),
    reason="needs a C compiler and the public ops")


def _struct(name):
    """A ctypes Structure with the fields of `name` in metal/mk_args.h (all 4-byte)."""
    text = (ROOT / "metal" / "mk_args.h").read_text()
    body = re.search(r"typedef struct " + name + r" \{(.*?)\} " + name + ";", text, re.S).group(1)
    fields = []
    for typ, names in re.findall(r"(mk_i32|mk_f32)\s+([^;]+);", re.sub(r"//[^\n]*", "", body)):
        for n in names.split(","):
            fields.append((n.strip(), ctypes.c_int32 if typ == "mk_i32" else ctypes.c_float))
    return type(name, (ctypes.Structure,), {"_fields_": fields})


PoolArgs = _struct("mk_pool2d_args")
GemmArgs = _struct("mk_gemm_args")


class Matrix(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("rows", "cols", "ld", "stride")]


class GemmPlan(ctypes.Structure):
    _fields_ = [("a", Matrix), ("b", Matrix), ("out", Matrix), ("batched", ctypes.c_int),
                ("beta", ctypes.c_double)]


@pytest.fixture(scope="module")
def cmath(tmp_path_factory):
    so = tmp_path_factory.mktemp("mpsmath") / "mk_mps_math.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", str(ROOT / "objc"),
                    "-I", str(ROOT / "metal"), str(ROOT / "objc" / "mk_mps_math.c"), "-o", str(so)],
                   check=True)
    lib = ctypes.CDLL(str(so))
    lib.mk_mps_end_pad.restype = ctypes.c_int64
    lib.mk_mps_end_pad.argtypes = [ctypes.c_int] * 6
    lib.mk_mps_floor_windows.restype = ctypes.c_int64
    lib.mk_mps_floor_windows.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.mk_mps_avg_divisors.argtypes = [ctypes.POINTER(PoolArgs), ctypes.c_void_p]
    lib.mk_mps_gemm_plan_make.argtypes = [ctypes.POINTER(GemmArgs), ctypes.POINTER(GemmPlan)]
    lib.mk_mps_adaptive_window.argtypes = [ctypes.c_int] * 3 + [ctypes.POINTER(ctypes.c_int64)] * 2
    lib.mk_mps_first_taps.argtypes = [ctypes.POINTER(PoolArgs), ctypes.c_void_p]
    return lib


def _windows(xp, kh, kw, sh, sw, dh, dw, gp, gq):
    """(kh*kw, N, C, gp, gq): the taps of every floor-mode window of the padded input."""
    return np.stack([xp[:, :, i * dh:i * dh + sh * (gp - 1) + 1:sh, j * dw:j * dw + sw * (gq - 1) + 1:sw]
                     for i in range(kh) for j in range(kw)])


class EmulatedShim:
    """The native layer of backend "mps" replaced by the shim's programs in numpy."""
    def __init__(self, lib):
        self.lib = lib
        self.plans = []

    def device_count(self, kind):
        return 1, ""

    def Device(self, kind):
        class Buf:
            def __init__(self, a, w):
                self.array, self.zero_copy = a, True

        class Dev:
            def info(self):
                return {"name": "emulated"}

            def wrap(self, a, w=False):
                return Buf(a, w)
        return Dev()

    def _pads(self, a, k_h, k_w):
        L = self.lib
        pb = L.mk_mps_end_pad(a["H"], a["pad_h"], a["P"], a["stride_h"], a["dil_h"], k_h)
        pr = L.mk_mps_end_pad(a["W"], a["pad_w"], a["Q"], a["stride_w"], a["dil_w"], k_w)
        gp = L.mk_mps_floor_windows(a["H"] + a["pad_h"] + pb, a["stride_h"], a["dil_h"], k_h)
        gq = L.mk_mps_floor_windows(a["W"] + a["pad_w"] + pr, a["stride_w"], a["dil_w"], k_w)
        assert gp >= a["P"] and gq >= a["Q"], "the shim would refuse this (MK_ERR_INVALID)"
        return pb, pr, gp, gq

    def mps_run(self, kernel, d, a, dtype, *bufs):      # _native.mps_run: the row's mps_<op>
        return getattr(self, f"mps_{kernel}")(d, a, dtype, *bufs)

    def _adaptive(self, i, out, n):
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        self.lib.mk_mps_adaptive_window(i, out, n, ctypes.byref(lo), ctypes.byref(hi))
        return lo.value, hi.value

    def mps_pool2d(self, d, a, dtype, x, y, indices):
        if a["mode"] == 2:      # mk_mps_adaptive_avg_pool2d: row sums, column sums, / sizes
            xs = x.array.astype(np.float32)
            rows = [self._adaptive(p, a["P"], a["H"]) for p in range(a["P"])]
            cols = [self._adaptive(q, a["Q"], a["W"]) for q in range(a["Q"])]
            v = np.stack([xs[:, :, lo:hi].sum(axis=2) for lo, hi in rows], axis=2)
            v = np.stack([v[:, :, :, lo:hi].sum(axis=3) for lo, hi in cols], axis=3)
            n = np.array([[(h1 - h0) * (w1 - w0) for w0, w1 in cols] for h0, h1 in rows], np.float32)
            y.array[...] = (v / n).reshape(y.array.shape)
            return (0.0, 0.0)
        if indices is not None:  # mk_mps_max_pool2d_indices: tap by tap, greater or NaN wins
            pb, pr, gp, gq = self._pads(a, a["kh"], a["kw"])
            pads = ((0, 0), (0, 0), (a["pad_h"], pb), (a["pad_w"], pr))
            xv = np.pad(x.array.astype(np.float32), pads, constant_values=-np.inf)
            xi = np.pad(np.arange(a["H"] * a["W"], dtype=np.int32).reshape(1, 1, a["H"], a["W"]),
                        pads, constant_values=-1)
            first = np.empty(a["P"] * a["Q"], np.int32)
            self.lib.mk_mps_first_taps(ctypes.byref(PoolArgs(**a)), first.ctypes.data)
            shape = (a["N"], a["C"], a["P"], a["Q"])
            m = np.full(shape, -np.inf, np.float32)
            at = np.broadcast_to(first.reshape(1, 1, a["P"], a["Q"]), shape).copy()
            for i in range(a["kh"]):
                for j in range(a["kw"]):
                    sl = (slice(None), slice(None),
                          slice(i * a["dil_h"], i * a["dil_h"] + (a["P"] - 1) * a["stride_h"] + 1, a["stride_h"]),
                          slice(j * a["dil_w"], j * a["dil_w"] + (a["Q"] - 1) * a["stride_w"] + 1, a["stride_w"]))
                    v, vi = xv[sl], np.broadcast_to(xi[sl], shape)
                    win = (v > m) | np.isnan(v)
                    m, at = np.where(win, v, m), np.where(win, vi, at)
            y.array[...] = m.reshape(y.array.shape)
            indices.array[...] = at.astype(np.int64).reshape(indices.array.shape)
            return (0.0, 0.0)
        pb, pr, gp, gq = self._pads(a, a["kh"], a["kw"])
        avg = a["mode"] == 1
        xs = x.array.astype(np.float32)
        xp = np.pad(xs, ((0, 0), (0, 0), (a["pad_h"], pb), (a["pad_w"], pr)),
                    constant_values=0.0 if avg else -np.inf)
        win = _windows(xp, a["kh"], a["kw"], a["stride_h"], a["stride_w"], a["dil_h"], a["dil_w"], gp, gq)
        if avg:
            div = np.empty(a["P"] * a["Q"], np.float32)
            self.lib.mk_mps_avg_divisors(ctypes.byref(PoolArgs(**a)), div.ctypes.data)
            r = win.mean(axis=0)[:, :, :a["P"], :a["Q"]] * (a["kh"] * a["kw"]) / div.reshape(a["P"], a["Q"])
        else:
            r = win.max(axis=0)[:, :, :a["P"], :a["Q"]]
        y.array[...] = r.reshape(y.array.shape)
        return (0.0, 0.0)

    def mps_gemm(self, d, a, dtype, A, B, C, out):
        """mk_mps_gemm: out <- C row by row (or 0), then per matrix MPS's
        out = alpha * op(A) @ op(B) + beta * out over the plan's MPSMatrix views."""
        plan = GemmPlan()
        self.lib.mk_mps_gemm_plan_make(ctypes.byref(GemmArgs(**a)), ctypes.byref(plan))
        self.plans.append((a, plan))
        fo = out.array.reshape(-1)
        f64 = lambda buf: buf.array.reshape(-1).astype(np.float64)  # noqa: E731

        def view(flat, m, i):
            return np.lib.stride_tricks.as_strided(flat[i * m.stride:], shape=(m.rows, m.cols),
                                                   strides=(m.ld * flat.itemsize, flat.itemsize))
        in_place = a["has_c"] and C.array is out.array and a["stride_c"] == a["stride_out"]
        acc = fo.astype(np.float64)
        for b in range(a["batch"]):
            o = view(acc, plan.out, b)
            if not in_place:
                o[...] = view(f64(C), plan.out, b) if a["has_c"] else 0.0
        if a["K"] == 0:
            acc *= plan.beta if a["has_c"] else 0.0
        else:
            fa, fb = f64(A), f64(B)
            for b in range(a["batch"]):
                am, bm, o = view(fa, plan.a, b), view(fb, plan.b, b), view(acc, plan.out, b)
                am = am.T if a["trans_a"] else am
                bm = bm.T if a["trans_b"] else bm
                o[...] = a["alpha"] * am @ bm + plan.beta * o
        fo[...] = acc
        return (0.0, 0.0)

    def mps_conv2d(self, d, a, dtype, x, w, bias, y):
        pb, pr, gp, gq = self._pads(a, a["R"], a["S"])
        g = a["groups"]
        xp = np.pad(x.array.astype(np.float64), ((0, 0), (0, 0), (a["pad_h"], pb), (a["pad_w"], pr)))
        N, C, K = a["N"], a["C"], a["K"]
        wv = w.array.astype(np.float64).reshape(g, K // g, C // g, a["R"], a["S"])
        win = _windows(xp, a["R"], a["S"], a["stride_h"], a["stride_w"], a["dil_h"], a["dil_w"], gp, gq)
        win = win.reshape(a["R"], a["S"], N, g, C // g, gp, gq)
        r = np.einsum("rsngchw,gkcrs->ngkhw", win, wv).reshape(N, K, gp, gq)[:, :, :a["P"], :a["Q"]]
        if bias is not None:
            r = r + bias.array.reshape(1, K, 1, 1)
        y.array[...] = r.reshape(y.array.shape)
        return (0.0, 0.0)


@pytest.fixture
def mps(cmath, monkeypatch):
    be = backends._instance("mps")
    monkeypatch.setattr(be, "native", EmulatedShim(cmath))
    monkeypatch.setattr(be, "_device", None)
    return be


def _both(f, *args, **kw):
    try:
        want = f(*args, backend="cpu", **kw)
    except ValueError:
        return None, None                    # not a valid call: nothing to compare
    return want, f(*args, backend="mps", **kw)


AVG = list(itertools.product((5, 8), (2, 3), (1, 2, 3), (0, 1), (False, True), (False, True), (None, 3)))


@pytest.mark.parametrize("H,k,s,p,ceil,cip,div", AVG)
def test_avg_pool_program_matches_cpu(mps, H, k, s, p, ceil, cip, div):
    x = np.random.default_rng(H * 100 + k * 10 + s).standard_normal((2, 3, H, H + 1)).astype(np.float32)
    want, got = _both(mpskern.avg_pool2d, x, k, stride=s, padding=p, ceil_mode=ceil,
                      count_include_pad=cip, divisor_override=div)
    if want is not None:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


MAX = list(itertools.product((5, 8), (2, 3), (1, 2), (0, 1), (1, 2), (False, True)))


@pytest.mark.parametrize("H,k,s,p,dil,ceil", MAX)
def test_max_pool_program_matches_cpu(mps, H, k, s, p, dil, ceil):
    x = np.random.default_rng(H + k + s).standard_normal((1, 2, H, H + 2)).astype(np.float32)
    want, got = _both(mpskern.max_pool2d, x, k, stride=s, padding=p, dilation=dil, ceil_mode=ceil)
    if want is not None:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("H,k,s,p,dil,ceil", MAX)
def test_max_pool_indices_program_matches_cpu(mps, H, k, s, p, dil, ceil):
    x = np.random.default_rng(H + k + s).standard_normal((1, 2, H, H + 2)).astype(np.float32)
    x[0, 0, 1, :3] = x[0, 0, 0, 0]                     # ties
    x[0, 1, ::2, 1::3] = np.nan                        # NaN (several per window)
    x[0, 1, -2:, :] = -np.inf                          # windows of -inf only
    want, got = _both(mpskern.max_pool2d, x, k, stride=s, padding=p, dilation=dil, ceil_mode=ceil,
                      return_indices=True)
    if want is not None:
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("H,W,size", [(7, 7, 1), (9, 11, (4, 5)), (3, 5, (7, None)), (13, 6, 5),
                                      (8, 8, (8, 2)), (1, 1, 3)])
def test_adaptive_avg_pool_program_matches_cpu(mps, H, W, size):
    x = np.random.default_rng(H * W).standard_normal((2, 3, H, W)).astype(np.float32)
    x[1, 2, 0, 0] = np.inf
    want, got = _both(mpskern.adaptive_avg_pool2d, x, size)
    assert want is not None
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


CONV = [((1, 3, 7, 8), (2, 3, 2, 4), dict(padding="same")),
        ((1, 3, 7, 8), (4, 3, 3, 3), dict(padding="same", dilation=2)),
        ((2, 4, 9, 6), (6, 2, 3, 3), dict(stride=2, padding=1, groups=2)),
        ((1, 2, 10, 11), (3, 2, 3, 2), dict(stride=3, padding=2, dilation=(2, 1))),
        ((1, 5, 6, 6), (5, 1, 3, 3), dict(padding=1, groups=5)),
        ((1, 2, 8, 8), (2, 2, 4, 4), dict(padding="valid", stride=2))]


@pytest.mark.parametrize("xs,ws,kw", CONV)
def test_conv_program_matches_cpu(mps, xs, ws, kw):
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    want, got = _both(mpskern.conv2d, x, w, b, **kw)
    assert want is not None
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_divisors_never_zero_and_override(cmath):
    a = PoolArgs(N=1, C=1, H=3, W=3, P=2, Q=2, kh=2, kw=2, stride_h=2, stride_w=2, pad_h=0, pad_w=0,
                 dil_h=1, dil_w=1, mode=1, count_include_pad=0, divisor=0, pad_h_end=0, pad_w_end=0)
    out = np.zeros(4, np.float32)
    cmath.mk_mps_avg_divisors(ctypes.byref(a), out.ctypes.data)
    assert out.tolist() == [4, 2, 2, 1]               # ceil-mode windows clipped to the input
    a.divisor = 7
    cmath.mk_mps_avg_divisors(ctypes.byref(a), out.ctypes.data)
    assert out.tolist() == [7] * 4


MATMUL = [((6, 5), (5, 7)), ((5,), (5, 3)), ((4, 5), (5,)), ((3, 4, 5), (5, 2)),
          ((2, 1, 4, 5), (3, 5, 6)), ((3, 4, 5), (3, 5, 6)), ((4, 0), (0, 3))]


@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul_plan_matches_cpu(mps, sa, sb):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    want, got = _both(mpskern.matmul, a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


GEMM = list(itertools.product((False, True), (False, True), (0.5, 1.0), (0.0, 2.0), (False, True)))


@pytest.mark.parametrize("ta,tb,alpha,beta,with_c", GEMM)
def test_gemm_plan_matches_cpu(mps, ta, tb, alpha, beta, with_c):
    M, N, K = 5, 7, 3
    rng = np.random.default_rng(1)
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
    c = rng.standard_normal((M, N)).astype(np.float32) if with_c else None
    want, got = _both(mpskern.gemm, a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
    if want is None:
        assert beta != 0 and not with_c          # beta without C: refused by the API
        return
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    args, plan = mps.native.plans[-1]
    assert plan.beta == pytest.approx(args["beta"] if args["has_c"] else 1.0)
    assert (plan.a.rows, plan.a.cols) == ((K, M) if ta else (M, K))


def test_batched_plan_only_where_mps_can_express_it(cmath):
    base = dict(batch=4, M=3, N=2, K=5, lda=5, ldb=2, ldc=2, stride_a=15, stride_b=10, stride_c=6,
                stride_out=6, trans_a=0, trans_b=0, has_c=0, alpha=1.0, beta=0.0, split_k=1,
                activation=0)
    plan = GemmPlan()
    for change, batched in (({}, 1), ({"stride_b": 0}, 0), ({"stride_a": 16}, 0), ({"batch": 1, "stride_a": 0}, 1)):
        cmath.mk_mps_gemm_plan_make(ctypes.byref(GemmArgs(**{**base, **change})), ctypes.byref(plan))
        assert plan.batched == batched, change
