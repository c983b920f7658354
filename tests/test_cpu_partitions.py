"""How the cpu backend cuts one call over its threads, at thread counts the CI machine (2
cores) does not have: the GEMM grid of tiles (objc/cpu/mk_cpu_gemm_par.c) and rows cut
into segments when there are fewer rows than threads (mk_row_segments: softmax,
log_softmax, layer_norm, rms_norm). Odd sizes, more threads than rows or columns, 1 thread
and 16, non-finite values in single segments; float64 references, the tolerance rule."""
import numpy as np
import pytest

import mpskern
import refs

THREADS = [1, 2, 3, 5, 16, 64]


@pytest.fixture(params=THREADS, ids=[f"{t}threads" for t in THREADS])
def threads(request):
    before = mpskern.get_num_threads()
    mpskern.set_num_threads(request.param)
    yield request.param
    mpskern.set_num_threads(before)


# ------------------------------------------------------------------------------ GEMM grid
# each >= 4 MFLOP (smaller GEMMs run as one call): square, tall, wide, a vector, sizes that
# are no multiple of the 8-row / 16-column units, fewer units than threads; the last two
# large enough (40+ MFLOP) for grids of more tiles than threads, with ragged edge tiles
GEMM_SHAPES = [(128, 128, 128), (257, 263, 61), (1000, 33, 70), (9, 3000, 90), (1, 5000, 400),
               (5000, 1, 400), (520, 49, 200), (70, 700, 50), (250, 1001, 97), (33, 4100, 150)]


@pytest.mark.parametrize("M,N,K", GEMM_SHAPES)
def test_matmul_grid(M, N, K, threads):
    rng = np.random.default_rng(M * 7 + N)
    a, b = refs.rand((M, K), np.float32, rng), refs.rand((K, N), np.float32, rng)
    refs.assert_close(mpskern.matmul(a, b, backend="cpu"), refs.matmul(a, b), np.float32, K,
                      what=f"{M}x{N}x{K} on {threads} threads")


@pytest.mark.parametrize("ta,tb", [(0, 1), (1, 0), (1, 1)])
def test_gemm_grid_transposes_alpha_beta(ta, tb, threads):
    # every tile reads its own rows of op(A) / columns of op(B) and scales its own block of C
    rng = np.random.default_rng(10 + 2 * ta + tb)
    M, N, K = 203, 171, 150
    a = refs.rand((K, M) if ta else (M, K), np.float32, rng)
    b = refs.rand((N, K) if tb else (K, N), np.float32, rng)
    c = refs.rand((M, N), np.float32, rng)
    got = mpskern.gemm(a, b, c, alpha=0.75, beta=-1.25, trans_a=bool(ta), trans_b=bool(tb),
                       backend="cpu")
    want = refs.gemm(a, b, c, alpha=0.75, beta=-1.25, trans_a=bool(ta), trans_b=bool(tb))
    refs.assert_close(got, want, np.float32, K + 1, what=f"ta={ta} tb={tb}")


def test_gemm_grid_float16(threads):
    rng = np.random.default_rng(12)
    a, b = refs.rand((300, 97), np.float16, rng), refs.rand((97, 250), np.float16, rng)
    refs.assert_close(mpskern.matmul(a, b, backend="cpu"), refs.matmul(a, b), np.float16, 97)


def test_every_output_written_once(threads):
    # poisoned output and a unit operand: each C entry must be exactly its row of A, so an
    # unwritten, doubled or shifted tile shows
    M, N = 301, 515
    a = np.random.default_rng(13).standard_normal((M, N)).astype(np.float32)
    eye = np.eye(N, dtype=np.float32)
    out = np.full((M, N), np.nan, np.float32)
    mpskern.matmul(a, eye, backend="cpu", out=out)
    assert np.array_equal(out, a)


# a batch is one grid over every item's tiles (mk_sgemm_batch_par_ep): items smaller and
# larger than the pool, a broadcast A, a C per item, one C for all, C updated in place
BATCH_SHAPES = [(3, 70, 90, 40), (17, 33, 20, 64), (2, 257, 263, 61), (40, 8, 16, 300),
                (5, 1, 700, 90)]


@pytest.mark.parametrize("B,M,N,K", BATCH_SHAPES)
@pytest.mark.parametrize("c_kind", ["none", "per item", "one for all", "in place"])
def test_gemm_batch_grid(B, M, N, K, c_kind, threads):
    rng = np.random.default_rng(B * 31 + M)
    a = refs.rand((M, K), np.float32, rng)                  # one A for every item
    b = refs.rand((B, N, K), np.float32, rng)               # read transposed
    c = {"none": None, "per item": refs.rand((B, M, N), np.float32, rng),
         "one for all": refs.rand((M, N), np.float32, rng),
         "in place": refs.rand((B, M, N), np.float32, rng)}[c_kind]
    want = refs.gemm(a, b, c, trans_b=True, activation="relu")
    out = c if c_kind == "in place" else None
    got = mpskern.gemm(a, b, c, trans_b=True, activation="relu", backend="cpu", out=out)
    assert out is None or got is out
    refs.assert_close(got, want, np.float32, K + 1, what=f"{B}x{M}x{N}x{K} C {c_kind}")


@pytest.mark.parametrize("B,M,N", [(3, 301, 515), (33, 17, 40), (2, 8, 2000)])
def test_every_batch_output_written_once(B, M, N, threads):
    # each item's C entry must be exactly its row of A plus its C: a tile of the wrong item,
    # unwritten, doubled or shifted shows
    rng = np.random.default_rng(14)
    a = rng.standard_normal((B, M, N)).astype(np.float32)
    c = rng.standard_normal((B, M, N)).astype(np.float32)
    out = np.full((B, M, N), np.nan, np.float32)
    mpskern.gemm(a, np.eye(N, dtype=np.float32), c, backend="cpu", out=out)
    assert np.array_equal(out, a + c)


# ------------------------------------------------------------------------------ row segments
ROW_SHAPES = [(1, 50257), (3, 9000), (5, 40000), (2, 12295), (7, 4096 * 4 + 1)]


def _row_inputs(rows, n, dtype, seed):
    rng = np.random.default_rng(seed)
    x = refs.rand((rows, n), dtype, rng, -6, 6) + dtype(3)     # a mean to remove
    w, b = refs.rand((n,), np.float32, rng), refs.rand((n,), np.float32, rng)
    return x, w, b


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("rows,n", ROW_SHAPES)
def test_norms_rows_in_segments(rows, n, dtype, threads):
    x, w, b = _row_inputs(rows, n, dtype, rows + n)
    refs.assert_close(mpskern.layer_norm(x, n, w, b, backend="cpu"),
                      refs.layer_norm(x, n, w, b), dtype, n, what="layer_norm")
    refs.assert_close(mpskern.layer_norm(x, n, backend="cpu"), refs.layer_norm(x, n), dtype,
                      n, what="layer_norm, no affine")
    refs.assert_close(mpskern.rms_norm(x, n, w, backend="cpu"), refs.rms_norm(x, n, w),
                      dtype, n, what="rms_norm")


def test_layer_norm_segments_keep_a_large_mean(threads):
    # segment means differ from the row's: the combination must not lose the variance of a
    # row whose mean is 1e4 times its spread (a one-pass sum of squares would)
    rng = np.random.default_rng(14)
    x = (1e4 + rng.standard_normal((2, 30001))).astype(np.float32)
    x[:, :15000] += 1.0            # segments with different means
    refs.assert_close(mpskern.layer_norm(x, 30001, backend="cpu"), refs.layer_norm(x, 30001),
                      np.float32, 30001)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("rows,n", ROW_SHAPES)
def test_softmax_rows_in_segments(rows, n, dtype, log, threads):
    fn, ref = (mpskern.log_softmax, refs.log_softmax) if log else (mpskern.softmax, refs.softmax)
    x, _, _ = _row_inputs(rows, n, dtype, 3 * rows + n)
    x[0, -1] = 30                  # the row's maximum in its last segment
    refs.assert_close(fn(x, backend="cpu"), ref(x), dtype, n)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_segments_non_finite(log, threads):
    # per row: a first half of -inf (whole segments contribute exp(-inf) = 0), a NaN in one
    # segment only, an all -inf row, a +inf, 1e30 beside -1e30
    fn, ref = (mpskern.log_softmax, refs.log_softmax) if log else (mpskern.softmax, refs.softmax)
    n = 40000
    x = refs.rand((5, n), np.float32, np.random.default_rng(15), -5, 5)
    x[0, :n // 2] = -np.inf
    x[1, 31000] = np.nan
    x[2, :] = -np.inf
    x[3, 7] = np.inf
    x[4, 100], x[4, 39000] = 1e30, -1e30
    y = fn(x, backend="cpu")
    with np.errstate(invalid="ignore"):
        want = ref(x)
    refs.assert_close(y[[0, 4]], want[[0, 4]], np.float32, n)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()
    assert np.array_equal(np.isnan(y[3]), np.isnan(want[3]))


# ------------------------------------------------------------------------------ conv2d blocks
@pytest.mark.parametrize("C,K,k,s,p,H", [(32, 48, 1, 2, 0, 57), (16, 24, 3, 1, 1, 23),
                                         (8, 64, 1, 1, 0, 40)])
def test_conv2d_row_blocks(C, K, k, s, p, H, threads):
    # fewer images than threads: each image cut into blocks of output rows (at least 256
    # columns each where the image has them); every output row exactly once
    rng = np.random.default_rng(C + H)
    x, w = refs.rand((2, C, H, H), np.float32, rng), refs.rand((K, C, k, k), np.float32, rng)
    b = refs.rand((K,), np.float32, rng)
    refs.assert_close(mpskern.conv2d(x, w, b, s, p, backend="cpu"),
                      refs.conv2d(x, w, b, s, p), np.float32, C * k * k)
