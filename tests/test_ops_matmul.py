"""matmul (np.matmul rules) and gemm against float64 references."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)

MATMUL_SHAPES = [
    ((3, 5), (5, 7)),            # plain
    ((17, 33), (33, 9)),         # odd sizes
    ((7,), (7,)),                # 1-D @ 1-D -> scalar
    ((7,), (7, 4)),              # 1-D on the left
    ((3, 7), (7,)),              # 1-D on the right
    ((2, 3, 5), (5, 4)),         # batch @ matrix (folded into one GEMM)
    ((5,), (2, 5, 3)),           # vector @ batch
    ((3, 4, 5), (3, 5, 6)),      # equal batches
    ((1, 3, 5), (4, 5, 2)),      # a broadcast through a zero batch stride
    ((4, 3, 5), (1, 5, 2)),      # b broadcast
    ((2, 1, 3, 5), (4, 5, 2)),   # batch dims broadcast both ways (materialised)
    ((2, 1, 3, 5), (1, 3, 5, 2)),
]


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(backend, dtype, sa, sb):
    rng = np.random.default_rng(1)
    a, b = refs.rand(sa, dtype, rng), refs.rand(sb, dtype, rng)
    got = mpskern.matmul(a, b, backend=backend)
    ref = refs.matmul(a, b)
    assert np.shape(got) == np.matmul(a, b).shape
    refs.assert_close(np.asarray(got), ref, dtype, terms=sa[-1], what=f"matmul {sa}@{sb}")


def test_matmul_scalar_result_is_numpy_scalar(backend):
    a = np.arange(4, dtype=np.float32)
    got = mpskern.matmul(a, a, backend=backend)
    assert np.ndim(got) == 0 and got.dtype == np.float32 and float(got) == 14.0


GEMM_CASES = [
    # (M, N, K, trans_a, trans_b, alpha, beta, c shape: None/"mn"/"n"/"bmn"/"mn-batched", batch)
    (5, 7, 3, False, False, 1.0, 0.0, None, 0),
    (9, 4, 13, True, False, 0.5, 0.0, None, 0),
    (9, 4, 13, False, True, 1.0, 2.0, "mn", 0),
    (6, 11, 8, True, True, -1.5, 0.25, "mn", 0),
    (6, 11, 8, False, False, 1.0, 1.0, "n", 0),
    (4, 5, 6, False, True, 2.0, -1.0, "mn", 3),    # batched, one C for the batch
    (4, 5, 6, True, False, 1.0, 0.5, "bmn", 2),    # batched C
]


def _gemm_operands(M, N, K, ta, tb, cform, batch, dtype, rng):
    pre = (batch,) if batch else ()
    a = refs.rand(pre + ((K, M) if ta else (M, K)), dtype, rng)
    b = refs.rand(pre + ((N, K) if tb else (K, N)), dtype, rng)
    cshape = {None: None, "mn": (M, N), "n": (N,), "bmn": pre + (M, N)}[cform]
    c = None if cshape is None else refs.rand(cshape, dtype, rng)
    return a, b, c


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("M,N,K,ta,tb,alpha,beta,cform,batch", GEMM_CASES)
def test_gemm(backend, dtype, M, N, K, ta, tb, alpha, beta, cform, batch):
    rng = np.random.default_rng(2)
    a, b, c = _gemm_operands(M, N, K, ta, tb, cform, batch, dtype, rng)
    got = mpskern.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb,
                   backend=backend)
    ref = refs.gemm(a, b, c, alpha, beta, ta, tb)
    refs.assert_close(got, ref, dtype, terms=K, what="gemm")


@pytest.mark.parametrize("dtype", refs.DTYPES)
def test_gemm_c_aliases_out(backend, dtype):
    """out=c accumulates in place (BLAS style): c <- alpha*a@b + beta*c."""
    rng = np.random.default_rng(3)
    a, b, c = refs.rand((5, 6), dtype, rng), refs.rand((6, 7), dtype, rng), refs.rand((5, 7), dtype, rng)
    ref = refs.gemm(a, b, c, 1.0, 0.5)
    got = mpskern.gemm(a, b, c, beta=0.5, backend=backend, out=c)
    assert got is c
    refs.assert_close(c, ref, dtype, terms=6, what="gemm out=c")


def test_gemm_batched_b_broadcast(backend):
    rng = np.random.default_rng(4)
    a, b = refs.rand((3, 4, 5), np.float32, rng), refs.rand((5, 6), np.float32, rng)
    got = mpskern.gemm(a, b, backend=backend)
    refs.assert_close(got, refs.gemm(a, b), np.float32, terms=5, what="gemm batch bcast")


def test_empty_inner_dimension_gives_zeros_or_beta_c(backend):
    a, b = np.ones((3, 0), np.float32), np.ones((0, 4), np.float32)
    assert np.array_equal(mpskern.matmul(a, b, backend=backend), np.zeros((3, 4), np.float32))
    c = np.full((3, 4), 2.0, np.float32)
    got = mpskern.gemm(a, b, c, beta=0.5, backend=backend)
    assert np.array_equal(got, np.ones((3, 4), np.float32))
