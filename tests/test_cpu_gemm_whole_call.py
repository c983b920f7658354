"""The cpu GEMM's whole-call path (objc/cpu/mk_cpu_gemm_par.c whole_call_wins: M, N, K >=
1024 on 2..8 threads, M*N*K up to 2 x 1024^3 at 2-3 threads and 2048^3 at 4-8, no more than
the cores): ONE threaded OpenBLAS call whose jobs run on our pool's gang (mk_cpu_blas.c),
with C copied in and the fused activation applied after it.
Checked against float64: every operand form, alpha / beta / C, bias + activation, and calls
from several Python threads at once (then OpenBLAS's global thread count is raised while
other threads' single-threaded tile calls run: those must still finish, right)."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import mpskern
import refs
from mpskern import reference as ref

F = np.float32
M, N, K = 1024, 1040, 1024          # N not a multiple of 16: the last columns are a remainder


@pytest.fixture
def two_threads():
    before = mpskern.get_num_threads()
    mpskern.set_num_threads(2)
    yield
    mpskern.set_num_threads(before)


def _mm64(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True),
                                             (True, True)])
def test_operand_forms_alpha_beta_c(two_threads, trans_a, trans_b):
    rng = np.random.default_rng(7)
    a = refs.rand((K, M) if trans_a else (M, K), F, rng)
    b = refs.rand((N, K) if trans_b else (K, N), F, rng)
    c = refs.rand((M, N), F, rng)
    got = mpskern.gemm(a, b, c, alpha=0.5, beta=-2.0, trans_a=trans_a, trans_b=trans_b,
                       backend="cpu")
    want = 0.5 * _mm64(a.T if trans_a else a, b.T if trans_b else b) - 2.0 * c
    refs.assert_close(got, want, F, K + 1, what=f"gemm trans {trans_a},{trans_b}")
    c_before = c.copy()
    got = mpskern.gemm(a, b, c, alpha=0.5, beta=-2.0, trans_a=trans_a, trans_b=trans_b,
                       backend="cpu")
    assert np.array_equal(c, c_before), "c was written"
    refs.assert_close(got, want, F, K + 1, what=f"gemm trans {trans_a},{trans_b} again")


@pytest.mark.parametrize("act", ["relu", "gelu", "silu"])
def test_linear_bias_activation(two_threads, act):
    rng = np.random.default_rng(8)
    x, w, bias = refs.rand((M, K), F, rng), refs.rand((N, K), F, rng), refs.rand(N, F, rng)
    got = mpskern.linear(x, w, bias, activation=act, backend="cpu")
    want = ref.activate(_mm64(x, w.T) + bias, act)
    refs.assert_close(got, want, F, K + 1, what=f"linear + bias + {act}")


def test_matmul_into_out_and_views(two_threads):
    rng = np.random.default_rng(9)
    big = refs.rand((M + 3, K + 5), F, rng)
    a = big[3:, 5:]                                  # a strided view (lda > K)
    b = refs.rand((K, N), F, rng)
    out = np.full((M, N), np.nan, F)
    got = mpskern.matmul(a, b, backend="cpu", out=out)
    assert got is out
    refs.assert_close(out, _mm64(a, b), F, K, what="matmul view into out")


def test_concurrent_whole_calls_and_tiles(two_threads):
    rng = np.random.default_rng(10)
    jobs = []
    for i in range(3):
        a, b = refs.rand((M, K), F, rng), refs.rand((K, 1024 + 16 * i), F, rng)
        jobs.append((mpskern.matmul, (a, b), _mm64(a, b), K))      # whole calls
        s, t = refs.rand((300 + i, 500), F, rng), refs.rand((500, 260), F, rng)
        jobs.append((mpskern.matmul, (s, t), _mm64(s, t), 500))    # grids of tile calls
        x, w = refs.rand((2, 8, 20, 20), F, rng), refs.rand((16, 8, 3, 3), F, rng)
        jobs.append((mpskern.conv2d, (x, w), refs.conv2d(x, w), 72))

    def work(job):
        fn, args, _, _ = job
        return [fn(*args, backend="cpu") for _ in range(2)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, jobs * 2))
    for (fn, _, want, terms), outs in zip(jobs * 2, results):
        for got in outs:
            refs.assert_close(got, want, F, terms, what=f"{fn.__name__} in a thread")


@pytest.mark.parametrize("threads", [1, 3, 16])
def test_other_thread_counts_take_the_grid_and_agree(threads):
    """1 thread: one call; 3 on this 2-core machine and 16 (> 8): the grid. Same results."""
    before = mpskern.get_num_threads()
    try:
        mpskern.set_num_threads(threads)
        rng = np.random.default_rng(11)
        a, b = refs.rand((M, K), F, rng), refs.rand((K, N), F, rng)
        refs.assert_close(mpskern.matmul(a, b, backend="cpu"), _mm64(a, b), F, K,
                          what=f"matmul at {threads} threads")
    finally:
        mpskern.set_num_threads(before)
