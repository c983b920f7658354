"""Our own AVX-512 float32 GEMM (objc/cpu/mk_cpu_sgemm_avx512.c), forced on for every call
here by MPSKERN_CPU_GEMM=own (read per call: auto, own, grid, whole; objc/cpu/mk_cpu_gemm_par.c)
so that shapes its default rule would not pick are exercised too. On a CPU without AVX-512 the
switch falls back to BLAS and these tests check that path instead.
Checked against float64: odd M/N/K around the 12 x 32 micro-kernel, the 96-row blocks, the
256-deep K blocks and the 4096-column B panels; trans_a/trans_b; strided operands (lda/ldb/
ldc above minimal); alpha/beta, beta = 0 over NaN (cleared, as BLAS), C aliasing the output;
linear's bias; every activation; NaN/Inf inputs; 1/2/8/16 threads; batches."""
import numpy as np
import pytest

import mpskern
import refs
from mpskern import reference as ref

F = np.float32
ACTS = [None, "relu", "gelu", "gelu_tanh", "silu"]


@pytest.fixture(autouse=True)
def own(monkeypatch):
    monkeypatch.setenv("MPSKERN_CPU_GEMM", "own")


THREADS = pytest.mark.parametrize("threads", [1, 2, 8, 16], indirect=True)   # conftest's


def _op(x, t):
    return np.swapaxes(x, -1, -2) if t else x


def _mm64(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _check(got, want, K, what):
    refs.assert_close(got, want, F, K + 1, what=what)


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (15, 17, 31), (17, 33, 15), (12, 32, 256),
                                   (13, 31, 257), (97, 65, 33), (255, 257, 1), (31, 1, 600),
                                   (1, 300, 513), (193, 95, 255)])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True),
                                             (True, True)])
@THREADS
def test_shapes_and_operand_forms(threads, M, N, K, trans_a, trans_b):
    rng = np.random.default_rng(M * 1000 + N * 7 + K)
    a = refs.rand((K, M) if trans_a else (M, K), F, rng)
    b = refs.rand((N, K) if trans_b else (K, N), F, rng)
    got = mpskern.gemm(a, b, trans_a=trans_a, trans_b=trans_b, backend="cpu")
    _check(got, _mm64(_op(a, trans_a), _op(b, trans_b)), K, f"{M}x{N}x{K} t{trans_a}{trans_b}")


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("M,N,K", [(33, 47, 64), (257, 255, 300)])
@THREADS
def test_alpha_beta_c_activation(threads, act, M, N, K):
    rng = np.random.default_rng(5)
    a, b, c = refs.rand((M, K), F, rng), refs.rand((K, N), F, rng), refs.rand((M, N), F, rng)
    c_before = c.copy()
    got = mpskern.gemm(a, b, c, alpha=0.75, beta=-1.5, activation=act, backend="cpu")
    want = ref.activate(0.75 * _mm64(a, b) - 1.5 * c.astype(np.float64), act)
    assert np.array_equal(c, c_before), "c was written"
    _check(got, want, K, f"alpha/beta/c {act}")
    got = mpskern.gemm(a, b, c, alpha=0.75, beta=-1.5, activation=act, backend="cpu", out=c)
    assert got is c
    _check(c, want, K, f"c aliasing out {act}")


@pytest.mark.parametrize("K", [7, 300])
@THREADS
def test_beta_zero_clears_nan(threads, K):
    rng = np.random.default_rng(6)
    a, b = refs.rand((45, K), F, rng), refs.rand((K, 70), F, rng)
    c = np.full((45, 70), np.nan, F)
    got = mpskern.gemm(a, b, c, beta=0.0, backend="cpu", out=c)
    _check(got, _mm64(a, b), K, "beta=0 over NaN")


@pytest.mark.parametrize("K", [5, 256, 700])
@THREADS
def test_strided_operands_and_out(threads, K):
    rng = np.random.default_rng(7)
    M, N = 50, 77
    a = refs.rand((M + 2, K + 9), F, rng)[2:, 9:]           # lda > K
    b = refs.rand((K + 1, N + 13), F, rng)[1:, :N]          # ldb > N
    big = np.full((M, N + 21), np.nan, F)
    out = big[:, 3:N + 3]                                   # ldc > N, NaN around it
    got = mpskern.matmul(a, b, backend="cpu", out=out)
    assert got is out
    _check(out, _mm64(a, b), K, "strided")
    assert np.isnan(big[:, :3]).all() and np.isnan(big[:, N + 3:]).all(), "wrote outside out"


@pytest.mark.parametrize("act", ACTS)
@THREADS
def test_linear_bias(threads, act):
    rng = np.random.default_rng(8)
    x, w, bias = refs.rand((3, 37, 96), F, rng), refs.rand((45, 96), F, rng), refs.rand(45, F, rng)
    got = mpskern.linear(x, w, bias, activation=act, backend="cpu")
    _check(got, ref.activate(_mm64(x, w.T) + bias, act), 96, f"linear bias {act}")


@pytest.mark.parametrize("act", ACTS)
@THREADS
def test_batch(threads, act):
    rng = np.random.default_rng(9)
    a, b = refs.rand((3, 29, 70), F, rng), refs.rand((3, 70, 41), F, rng)
    c = refs.rand((3, 29, 41), F, rng)
    got = mpskern.gemm(a, b, c, beta=0.5, activation=act, backend="cpu")
    _check(got, ref.activate(_mm64(a, b) + 0.5 * c, act), 70, f"batch {act}")
    b1 = refs.rand((1, 70, 41), F, rng)                     # a batch of 1 broadcasts
    got = mpskern.gemm(a, b1, activation=act, backend="cpu")
    _check(got, ref.activate(_mm64(a, b1), act), 70, f"batch broadcast {act}")


@pytest.mark.parametrize("act", ACTS)
def test_nonfinite_inputs(act):
    rng = np.random.default_rng(10)
    M, N, K = 40, 70, 300
    a, b = refs.rand((M, K), F, rng), refs.rand((K, N), F, rng)
    a[3, 5], a[39, 299], b[7, 69] = np.nan, np.inf, -np.inf      # last row / column edges too
    b[260, 0] = np.inf                                           # in the second K block
    got = mpskern.gemm(a, b, activation=act, backend="cpu")
    with np.errstate(invalid="ignore"):
        want = ref.activate(_mm64(a, b), act)
    _check(got, want, K, f"nan/inf {act}")


def test_panels_wider_than_one_b_panel():
    rng = np.random.default_rng(11)
    a, b = refs.rand((13, 40), F, rng), refs.rand((40, 4096 + 45), F, rng)
    for act in ("silu", None):
        got = mpskern.gemm(a, b, activation=act, backend="cpu")
        _check(got, ref.activate(_mm64(a, b), act), 40, f"N > 4096 {act}")


def test_bad_switch_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("MPSKERN_CPU_GEMM", "fast")
    a = np.ones((4, 4), F)
    with pytest.raises(Exception, match="MPSKERN_CPU_GEMM=fast"):
        mpskern.gemm(a, a, backend="cpu")


@pytest.mark.parametrize("path", ["grid", "whole", "auto"])
def test_other_paths(monkeypatch, path):
    monkeypatch.setenv("MPSKERN_CPU_GEMM", path)
    rng = np.random.default_rng(12)
    a, b = refs.rand((130, 64), F, rng), refs.rand((64, 90), F, rng)
    got = mpskern.gemm(a, b, activation="gelu", backend="cpu")
    _check(got, ref.activate(_mm64(a, b), "gelu"), 64, path)


@pytest.mark.parametrize("offset", [0, 1])   # 64-byte aligned C (streamed stores) or not
def test_outputs_beyond_the_caches(offset):
    rng = np.random.default_rng(13)
    M, N, K = 2048, 2064, 16                   # > 4 Mi floats: one K block streams C
    a, b = refs.rand((M, K), F, rng), refs.rand((K, N), F, rng)
    buf = np.full(M * N + 32, np.nan, F)
    start = (-buf.ctypes.data // 4) % 16 + offset
    out = buf[start:start + M * N].reshape(M, N)
    got = mpskern.gemm(a, b, activation="relu", backend="cpu", out=out)
    assert got is out
    _check(out, ref.activate(_mm64(a, b), "relu"), K, f"big C offset {offset}")
    assert np.isnan(buf[:start]).all() and np.isnan(buf[start + M * N:]).all()


def test_concurrent_calls():
    """Calls from several Python threads at once: each has its own packed panel; a caller
    that finds the pool busy runs its tasks itself."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(14)
    jobs = [(refs.rand((150 + i, 300), F, rng), refs.rand((300, 97 + 5 * i), F, rng), act)
            for i, act in enumerate(ACTS * 2)]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda j: mpskern.gemm(j[0], j[1], activation=j[2], backend="cpu"),
                          jobs))
    for (a, b, act), g in zip(jobs, got):
        _check(g, ref.activate(_mm64(a, b), act), 300, f"concurrent {act}")
