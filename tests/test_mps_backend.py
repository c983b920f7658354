"""Backend "mps", Python side. Off macOS it must refuse clearly; its op plumbing (buffer
order, which buffers are written back, timing and config records) is checked against a
fake native layer that computes with numpy, so a swapped or read-only buffer shows up as
a wrong result. The shim itself runs only on a Mac (tests/test_mac.py)."""
import platform
import sys

import numpy as np
import pytest

import mpskern
from mpskern import backends
from mpskern.backends import mps as mps_mod
from mpskern.memory import is_page_aligned


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the message off macOS")
def test_unavailable_here_says_why():
    ok, why = backends.availability("mps")
    assert not ok
    assert why == f"mps needs macOS on Apple silicon; this is {platform.system()} {platform.machine()}"
    with pytest.raises(mpskern.BackendUnavailable, match="mps needs macOS on Apple silicon"):
        backends.get("mps")
    with pytest.raises(mpskern.BackendUnavailable, match="mps needs macOS on Apple silicon"):
        mps_mod.MpsBackend("mps").execute("softmax", {}, 0, np.zeros(1, np.float32),
                                          np.zeros(1, np.float32))


class FakeBuffer:
    def __init__(self, array, writable, zero_copy):
        self.array, self.writable, self.zero_copy = array, writable, zero_copy

    def view(self):
        return self.array if self.writable else self.array.copy()   # writes to inputs are lost


class FakeNative:
    """device_count/Device/mps_run like _native, mps_* computing with numpy on the buffers."""
    def __init__(self):
        self.calls = []
        self.zero_copy = True        # what the shim's wrap reports (False: Metal refused, copied)

    def device_count(self, kind):
        return 1, ""

    def Device(self, kind):
        native = self

        class Dev:
            def info(self):
                return {"name": "Fake M9"}

            def wrap(self, array, writable=False):
                return FakeBuffer(array, writable, native.zero_copy)
        native.dev = Dev()
        return native.dev

    def mps_run(self, kernel, d, a, dtype, *bufs):      # _native.mps_run: the row's mps_<op>
        return getattr(self, f"mps_{kernel}")(d, a, dtype, *bufs)

    def _t(self, name, bufs):
        self.calls.append((name, [None if b is None else b.writable for b in bufs]))
        return (1.25, 2.5)

    def mps_gemm(self, d, a, dtype, A, B, C, out):
        M, N, K = a["M"], a["N"], a["K"]
        r = a["alpha"] * A.view().reshape(M, K) @ B.view().reshape(K, N)
        if a["has_c"]:
            r = r + a["beta"] * C.view().reshape(M, N)
        out.view()[...] = r.reshape(out.array.shape)
        return self._t("gemm", [A, B, C, out])

    def mps_softmax(self, d, a, dtype, x, y):
        v = x.view().reshape(a["outer"], a["n"], a["inner"]).astype(np.float64)
        e = np.exp(v - v.max(axis=1, keepdims=True))
        y.view()[...] = (e / e.sum(axis=1, keepdims=True)).reshape(y.array.shape)
        return self._t("softmax", [x, y])

    def mps_batch_norm(self, d, a, dtype, x, rm, rv, w, b, y):
        v = x.view().reshape(a["N"], a["C"], a["HW"]).astype(np.float64)
        mean, var = v.mean(axis=(0, 2)), v.var(axis=(0, 2))
        n = a["N"] * a["HW"]
        rm.view()[...] = (1 - a["momentum"]) * rm.view() + a["momentum"] * mean
        rv.view()[...] = (1 - a["momentum"]) * rv.view() + a["momentum"] * var * n / (n - 1)
        yv = (v - mean[:, None]) / np.sqrt(var[:, None] + a["eps"])
        y.view()[...] = yv.reshape(y.array.shape)
        return self._t("batch_norm", [x, rm, rv, w, b, y])


@pytest.fixture
def fake():
    be = mps_mod.MpsBackend("mps")
    be.native = FakeNative()
    return be


def test_available_with_a_device(fake):
    assert fake.availability() == (True, "Metal Performance Shaders on Fake M9")


def test_gemm_buffer_order_writeback_and_records(fake):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 3)).astype(np.float32)
    B = rng.standard_normal((3, 4)).astype(np.float32)
    C = rng.standard_normal((5, 4)).astype(np.float32)
    out = np.zeros((5, 4), np.float32)
    args = dict(batch=1, M=5, N=4, K=3, lda=3, ldb=4, ldc=4, stride_a=0, stride_b=0, stride_c=0,
                stride_out=0, trans_a=0, trans_b=0, has_c=1, alpha=2.0, beta=0.5, split_k=1,
                activation=0)
    fake.execute("gemm", args, 0, A, B, C, out)
    np.testing.assert_allclose(out, 2 * A @ B + 0.5 * C, rtol=1e-5)
    assert fake.native.calls[-1] == ("gemm", [False, False, False, True])
    assert fake.last_timing == (1.25, 2.5)
    assert fake.last_config == {"primitive": "MPSMatrixMultiplication", "zero_copy": True}


def _softmax(fake, x, y):
    fake.execute("softmax", dict(outer=x.shape[0], n=x.shape[1], inner=1, log=0), 0, x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    return fake.last_config


def test_graph_ops_are_in_place_only_for_page_aligned_arrays(fake):
    x = mpskern.empty((3, 7))
    x[...] = np.arange(21, dtype=np.float32).reshape(3, 7)
    y = mpskern.empty((3, 7))
    assert _softmax(fake, x, y) == {"primitive": "MPSGraph softMax", "zero_copy": True}
    xs = np.arange(22, dtype=np.float32)[1:].reshape(3, 7)      # wrapped, but at an offset
    assert not is_page_aligned(xs)
    assert _softmax(fake, xs, y)["zero_copy"] is False
    fake.native.zero_copy = False                                  # Metal refused: copied
    assert _softmax(fake, x, y)["zero_copy"] is False


def test_gemm_is_in_place_at_any_offset(fake):
    A = np.ones((4, 1025), np.float32)[:, 1:]                      # not page-aligned
    A = np.ascontiguousarray(A)
    B, out = np.ones((1024, 2), np.float32), np.zeros((4, 2), np.float32)
    args = dict(batch=1, M=4, N=2, K=1024, lda=1024, ldb=2, ldc=2, stride_a=0, stride_b=0,
                stride_c=0, stride_out=0, trans_a=0, trans_b=0, has_c=0, alpha=1.0, beta=0.0, split_k=1,
                activation=0)
    fake.execute("gemm", args, 0, A, B, None, out)
    assert np.all(out == 1024) and fake.last_config["zero_copy"] is True


def test_batch_norm_running_stats_are_written_back(fake):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    y = np.empty_like(x)
    args = dict(N=4, C=3, HW=5, training=1, has_running=1, has_weight=0, has_bias=0,
                eps=1e-5, momentum=0.1)
    fake.execute("batch_norm", args, 0, x, rm, rv, None, None, y)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(rm, 0.1 * xd.mean(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(rv, 0.9 + 0.1 * xd.var(axis=(0, 2), ddof=1), rtol=1e-5)
    assert fake.native.calls[-1] == ("batch_norm", [False, True, True, None, None, True])
    assert fake.last_config["primitive"] == "MPSGraph normalization"


@pytest.mark.skipif(not all(hasattr(mpskern, f) for f in ("matmul", "softmax", "batch_norm")),
                    reason="needs the public ops")
def test_public_ops_reach_the_mps_backend(monkeypatch):
    """The public API -> backend "mps" -> native call chain, with the native layer faked:
    the API's args dicts and buffer order must be what the fake (the ABI's order) expects."""
    be = backends._instance("mps")
    monkeypatch.setattr(be, "native", FakeNative())
    monkeypatch.setattr(be, "_device", None)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(mpskern.matmul(a, b, backend="mps"), a @ b, rtol=1e-5)
    x = rng.standard_normal((4, 9)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(mpskern.softmax(x, backend="mps"), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-5)
    xb = rng.standard_normal((3, 2, 4, 5)).astype(np.float32)
    rm, rv = np.zeros(2, np.float32), np.ones(2, np.float32)
    mpskern.batch_norm(xb, rm, rv, training=True, momentum=0.1, backend="mps")
    xd = xb.astype(np.float64)
    np.testing.assert_allclose(rm, 0.1 * xd.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(rv, 0.9 + 0.1 * xd.var(axis=(0, 2, 3), ddof=1), rtol=1e-5)
    assert be.last_timing == (1.25, 2.5)
