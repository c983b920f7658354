"""Our own AVX-512 GEMM's packing and task layout (objc/cpu/mk_cpu_sgemm_avx512.c), forced on
by MPSKERN_CPU_GEMM=own: op(B)'s rows (trans_b) and op(A)'s rows (not trans_a) are turned by
16 x 16 register transposes, trans_a rows copied 12 at a time; each task runs all of K over
one packed panel of at most 4 Mi floats (so a deep K cuts N into several panels); A's
scratch is on the heap, one block per pool slot. Checked against float64 at the edges of
every block: 16 (a transpose), 12 / 32 (the micro-kernel), 96 (a task's rows), 256 (a K
block), panels; strided operands; NaN/Inf at transpose edges; activations; 1/2/16 threads;
a caller thread with a small stack; auto's own_wins rules (whatever path they pick)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mpskern
import refs
from mpskern import reference as ref

F = np.float32
ACTS = [None, "relu", "gelu", "gelu_tanh", "silu"]
THREADS = pytest.mark.parametrize("threads", [1, 2, 16], indirect=True)   # conftest's


@pytest.fixture(autouse=True)
def own(monkeypatch):
    monkeypatch.setenv("MPSKERN_CPU_GEMM", "own")


def _op(x, t):
    return np.swapaxes(x, -1, -2) if t else x


def _mm64(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _operands(rng, M, N, K, ta, tb, pad=0):
    """A and B as stored (K x M / N x K when transposed), views into larger arrays when pad"""
    sa, sb = (K, M) if ta else (M, K), (N, K) if tb else (K, N)
    a = refs.rand((sa[0] + pad, sa[1] + 2 * pad), F, rng)[pad:, pad:sa[1] + pad]
    b = refs.rand((sb[0] + pad, sb[1] + 3 * pad), F, rng)[pad:, 2 * pad:sb[1] + 2 * pad]
    return a, b


EDGES = [(95, 257, 17), (96, 33, 256), (97, 255, 257), (255, 31, 16), (256, 256, 255),
         (257, 32, 15), (1, 17, 513), (12, 1, 31), (13, 48, 1), (191, 65, 300)]


@pytest.mark.parametrize("M,N,K", EDGES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@THREADS
def test_block_edges(threads, M, N, K, ta, tb):
    rng = np.random.default_rng(M * 7919 + N * 31 + K)
    a, b = _operands(rng, M, N, K, ta, tb)
    got = mpskern.gemm(a, b, trans_a=ta, trans_b=tb, backend="cpu")
    refs.assert_close(got, _mm64(_op(a, ta), _op(b, tb)), F, K + 1, what=f"{M}x{N}x{K} {ta}{tb}")


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@THREADS
def test_strided_operands(threads, ta, tb):
    rng = np.random.default_rng(3)
    M, N, K = 97, 70, 259
    a, b = _operands(rng, M, N, K, ta, tb, pad=5)            # lda, ldb above the minimum
    big = np.full((M, N + 19), np.nan, F)
    out = big[:, 7:N + 7]
    got = mpskern.gemm(a, b, trans_a=ta, trans_b=tb, backend="cpu", out=out)
    assert got is out
    refs.assert_close(out, _mm64(_op(a, ta), _op(b, tb)), F, K + 1, what=f"strided {ta}{tb}")
    assert np.isnan(big[:, :7]).all() and np.isnan(big[:, N + 7:]).all(), "wrote outside out"


@pytest.mark.parametrize("M,N,K,tb", [(13, 2100, 4100, True), (40, 1500, 5000, False),
                                      (3, 45, 140000, True)])
def test_deep_k_cuts_panels(M, N, K, tb):
    """4 Mi floats per panel: K = 4100 gives 992-column panels (three of 704 for N = 2100);
    K = 140000 allows less than one strip (one 32-column panel at a time)"""
    rng = np.random.default_rng(K)
    a, b = _operands(rng, M, N, K, False, tb)
    c = refs.rand((M, N), F, rng)
    got = mpskern.gemm(a, b, c, beta=0.5, activation="gelu", trans_b=tb, backend="cpu")
    want = ref.activate(_mm64(a, _op(b, tb)) + 0.5 * c.astype(np.float64), "gelu")
    refs.assert_close(got, want, F, K + 1, what=f"deep K {M}x{N}x{K}")


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_nonfinite_at_transpose_edges(ta, tb):
    rng = np.random.default_rng(4)
    M, N, K = 40, 70, 300
    a, b = _operands(rng, M, N, K, ta, tb)
    A, B = _op(a, ta), _op(b, tb)        # views: writes land in the stored operands
    for i, k in ((15, 15), (16, 16), (11, 12), (12, 255), (39, 256)):
        A[i, k] = np.nan if i % 2 else np.inf
    for k, j in ((15, 31), (16, 32), (17, 15), (299, 69), (256, 16)):
        B[k, j] = -np.inf
    got = mpskern.gemm(a, b, trans_a=ta, trans_b=tb, activation="silu", backend="cpu")
    with np.errstate(invalid="ignore"):
        want = ref.activate(_mm64(A, B), "silu")
    refs.assert_close(got, want, F, K + 1, what=f"nan/inf {ta}{tb}")


@pytest.mark.parametrize("act", ACTS)
@THREADS
def test_linear_trans_b_activation(threads, act):
    rng = np.random.default_rng(5)
    x, w, bias = refs.rand((2, 97, 257), F, rng), refs.rand((300, 257), F, rng), refs.rand(300, F, rng)
    got = mpskern.linear(x, w, bias, activation=act, backend="cpu")
    refs.assert_close(got, ref.activate(_mm64(x, w.T) + bias, act), F, 258, what=f"linear {act}")


def test_small_caller_stack():
    """A caller thread of 64 KiB stack runs its share of the tasks (and all of them when the
    pool is busy): A's scratch must not be on the stack (96 KiB once)."""
    code = textwrap.dedent("""
        import os, threading, numpy as np, mpskern
        os.environ["MPSKERN_CPU_GEMM"] = "own"
        rng = np.random.default_rng(0)
        a = rng.standard_normal((300, 700), np.float32)
        b = rng.standard_normal((700, 200), np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        errs = []
        def run():
            for t in (1, 2):
                mpskern.set_num_threads(t)
                errs.append(float(np.abs(mpskern.matmul(a, b, backend="cpu") - want).max()))
        threading.stack_size(64 * 1024)
        th = threading.Thread(target=run)
        th.start(); th.join()
        print(errs)
        assert len(errs) == 2 and max(errs) < 1e-3, errs
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"rc {r.returncode}: {r.stdout} {r.stderr[-2000:]}"


@pytest.mark.parametrize("M,N,K,act,threads", [
    (2048, 2048, 64, "gelu", 2), (2048, 2048, 64, None, 2), (256, 3072, 512, None, 16),
    (512, 520, 512, "relu", 8), (300, 4000, 600, "silu", 16)], indirect=["threads"])
def test_auto_rules(monkeypatch, M, N, K, act, threads):
    """shapes on each side of own_wins' rules under auto (own or BLAS: right either way)"""
    monkeypatch.setenv("MPSKERN_CPU_GEMM", "auto")
    rng = np.random.default_rng(M + N + K)
    a, b = refs.rand((M, K), F, rng), refs.rand((N, K), F, rng)
    got = mpskern.gemm(a, b, trans_b=True, activation=act, backend="cpu")
    refs.assert_close(got, ref.activate(_mm64(a, b.T), act), F, K + 1, what=f"auto {act}")
