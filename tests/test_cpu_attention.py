"""objc/cpu/mk_cpu_attention.c through _native.cpu_attention, against the float64 reference
(mpskern.reference.scaled_dot_product_attention, torch's math formulation) with the one
tolerance rule: odd L/S/E across several query (128) and key (256) blocks, masks of every
broadcast form, causal with L < S and L > S, grouped-query heads, rows with nothing to
attend to, NaN/inf inputs (also past a causal query block), empty sizes, float16, 1, 2 and
16 threads (at 16 the kernel cuts fewer (batch, head)s into 64- or 32-row query blocks:
query_rows()); peak memory of an 8192 x 8192 self-attention; argument errors."""
import itertools

import numpy as np
import pytest

import attn_tools as T
from mpskern import _native
from mpskern.bench import peak_rss

DTYPES = [np.float32, np.float16]


@pytest.fixture(params=[1, 2, 16])
def threads(request):
    """conftest's fixture plus 16 threads, where the query blocks get smaller (fewer than 3
    tasks of 128 rows per thread: 64 or 32 rows), restored after."""
    old = _native.cpu_get_num_threads()
    _native.cpu_set_num_threads(request.param)
    yield request.param
    _native.cpu_set_num_threads(old)


def run_check(rng, dtype, dims, mask=None, mask_shape=None, causal=False, scale=None, kv_batch=None):
    q, k, v, m = T.case(rng, dtype, *dims, mask=mask, mask_shape=mask_shape, kv_batch=kv_batch)
    got = T.run_cpu(q, k, v, m, causal, scale)
    T.check(got, q, k, v, m, causal, scale, what=f"{np.dtype(dtype)} {dims} {mask} {mask_shape} "
                                                  f"causal={causal}")
    return got


# (B, Hq, Hk, Hv, L, S, E, Ev)
SHAPES = [(1, 1, 1, 1, 1, 1, 1, 1), (2, 3, 3, 3, 5, 7, 8, 4), (1, 2, 2, 2, 129, 257, 17, 9),
          (1, 1, 1, 1, 300, 600, 64, 64), (3, 2, 2, 2, 33, 520, 40, 72), (1, 2, 2, 2, 257, 3, 5, 130)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_shapes(dims, dtype, causal, threads):
    run_check(np.random.default_rng(1), dtype, dims, causal=causal)


@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
def test_every_mask_broadcast_form(kind, dtype, threads):
    """Each of the mask's 4 dimensions full or 1 (stride 0): 16 forms, bool and additive."""
    rng = np.random.default_rng(2)
    dims = (2, 3, 3, 3, 130, 270, 12, 7)
    B, Hq, L, S = dims[0], dims[1], dims[4], dims[5]
    for pick in itertools.product([0, 1], repeat=4):
        shape = tuple(n if p else 1 for n, p in zip((B, Hq, L, S), pick))
        for causal in (False, True):
            run_check(rng, dtype, dims, kind, shape, causal)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("L,S", [(5, 300), (300, 5), (200, 200), (129, 700), (700, 129), (1, 1)])
def test_causal_is_the_top_left_triangle(L, S, dtype, threads):
    """torch's causal mask is tril(ones(L, S)): row i sees keys j <= i, also when L != S
    (rows past S see every key); blocks straddle the diagonal at odd offsets."""
    run_check(np.random.default_rng(3), dtype, (1, 2, 2, 2, L, S, 16, 8), causal=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("heads", [(6, 3, 3), (6, 1, 1), (6, 2, 3), (8, 8, 1), (4, 1, 4)])
def test_grouped_query_heads(heads, dtype, threads):
    Hq, Hk, Hv = heads
    for causal in (False, True):
        run_check(np.random.default_rng(4), dtype, (2, Hq, Hk, Hv, 70, 300, 16, 24), causal=causal)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
def test_batch_broadcast(dtype):
    """k and v of batch 1 serve every query batch; q of batch 1 serves every k/v batch."""
    rng = np.random.default_rng(5)
    run_check(rng, dtype, (3, 2, 2, 2, 40, 50, 8, 8), kv_batch=1)
    q, k, v, _ = T.case(rng, dtype, 1, 2, 2, 2, 40, 50, 8, 8, kv_batch=3)
    T.check(T.run_cpu(q, k, v), q, k, v)


@pytest.mark.parametrize("scale", [0.0, -1.0, 3.5, 1e-3])
def test_scale(scale):
    run_check(np.random.default_rng(6), np.float32, (1, 2, 2, 2, 20, 30, 8, 8), scale=scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
def test_rows_with_nothing_to_attend_to(dtype, threads):
    """A row whose keys are all hidden (bool False or additive -inf) is 0 @ v: zeros, or NaN
    where v has a NaN (torch 2.13's safe softmax, every backend); in a later key block than
    visible rows of other queries, and next to normal rows."""
    rng = np.random.default_rng(7)
    dims = (1, 2, 2, 2, 140, 600, 16, 8)
    q, k, v, _ = T.case(rng, dtype, *dims)
    bm = rng.random((1, 1, 140, 600)) > 0.5
    bm[0, 0, [0, 7, 139]] = False                 # rows with no visible key
    bm[0, 0, 3, :] = False
    bm[0, 0, 3, 599] = True                        # only the last key of the last block
    am = np.where(bm, 0.0, -np.inf).astype(dtype)
    for m in (bm, am):
        got = T.run_cpu(q, k, v, m)
        want = T.check(got, q, k, v, m)
        assert np.all(want[:, :, [0, 7, 139]] == 0) and np.all(got[:, :, [0, 7, 139]] == 0)
    v2 = v.copy()
    v2[0, 1, 450, 3] = np.nan                      # a NaN value at a key row 0 cannot see
    got = T.run_cpu(q, k, v2, bm)
    want = T.check(got, q, k, v2, bm)
    assert np.isnan(got[0, 1, 0, 3]) and np.isnan(want[0, 1, 0, 3])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
def test_non_finite_inputs(dtype, threads):
    """NaN in a query row makes that row NaN (also where the mask hides every key: -inf is
    added, as torch does); NaN in a key or value that rows can see makes them NaN; +inf or
    NaN in an additive mask makes the row NaN; -inf scores from huge inputs count as 0."""
    rng = np.random.default_rng(8)
    dims = (1, 2, 2, 2, 150, 300, 16, 8)
    q, k, v, _ = T.case(rng, dtype, *dims)
    q[0, 0, 5, 2] = np.nan
    k[0, 1, 280, 0] = np.nan
    v[0, 0, 100, 4] = np.nan
    T.check(T.run_cpu(q, k, v), q, k, v)
    bm = np.ones((1, 1, 150, 300), bool)
    bm[0, 0, 5] = False                            # the NaN row, fully hidden: still NaN
    got = T.run_cpu(q, k, v, bm)
    T.check(got, q, k, v, bm)
    assert np.isnan(got[0, 0, 5]).all()
    q, k, v, _ = T.case(rng, dtype, *dims)
    am = np.zeros((1, 1, 150, 300), dtype)
    am[0, 0, 9, 17] = np.inf
    am[0, 0, 11, 250] = np.nan
    T.check(T.run_cpu(q, k, v, am), q, k, v, am)
    big = q * dtype(60)                            # scores of +-thousands: exp must not overflow
    T.check(T.run_cpu(big, k, v), big, k, v)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("at", [31, 32, 100, 299])
def test_causal_non_finite_past_a_query_block(dtype, at, threads):
    """Causal: a NaN or Inf value (or NaN key) at key `at`, which the rows before it do not
    see, still reaches them as torch's math gives it (weight 0 times NaN/Inf); a query block
    ending before `at` (32-, 64-, 128-row blocks: 16 / 2 / 1 threads) must visit it
    (skippable()), and blocks after it see it as usual."""
    rng = np.random.default_rng(11)
    for bad in ("v nan", "v inf", "k nan"):
        q, k, v, _ = T.case(rng, dtype, 1, 2, 2, 2, 300, 300, 16, 8)
        (v if bad[0] == "v" else k)[0, 1, at, 3] = np.inf if bad.endswith("inf") else np.nan
        got = T.run_cpu(q, k, v, None, True)
        want = T.check(got, q, k, v, None, True)
        assert np.isnan(want[0, 1, 0]).any() and np.isnan(got[0, 1, 0]).any()   # row 0, key 0 only


@pytest.mark.parametrize("dims", [(0, 2, 2, 2, 5, 6, 4, 4), (1, 2, 2, 2, 0, 6, 4, 4),
                                  (1, 2, 2, 2, 5, 0, 4, 4), (1, 2, 2, 2, 5, 6, 0, 4),
                                  (1, 2, 2, 2, 5, 6, 4, 0)],
                         ids=["B0", "L0", "S0", "E0", "Ev0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
def test_empty_sizes(dims, dtype):
    """As torch: S = 0 gives zeros; E = 0 gives the mean of v (scores 0 whatever the scale)."""
    run_check(np.random.default_rng(9), dtype, dims)
    run_check(np.random.default_rng(9), dtype, dims, causal=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
def test_thread_count_does_not_change_the_bits(dtype):
    rng = np.random.default_rng(10)
    q, k, v, m = T.case(rng, dtype, 2, 3, 3, 3, 300, 520, 24, 24, "add", (2, 1, 300, 520))
    old = _native.cpu_get_num_threads()
    try:
        outs = []
        for n in (1, 2, 16):              # 128-, 128- and 32-row query blocks
            _native.cpu_set_num_threads(n)
            outs.append(T.run_cpu(q, k, v, m, True))
    finally:
        _native.cpu_set_num_threads(old)
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()


PEAK_SETUP = """
import numpy as np
from mpskern import _native
rng = np.random.default_rng(0)
def args(n):
    return dict(B=1, Hq=1, Hk=1, Hv=1, L=n, S=n, E=64, Ev=64, q_sb=0, q_sh=0, k_sb=0, k_sh=0,
                v_sb=0, v_sh=0, mask=0, m_sb=0, m_sh=0, m_sl=0, m_ss=0, causal=0, scale=0.125,
                q_sl=64, k_sl=64, v_sl=64, o_sb=0, o_sh=0, o_sl=64)
q, k, v = (rng.standard_normal((1, 1, 8192, 64)).astype(np.float32) for _ in range(3))
out = np.zeros((1, 1, 8192, 64), np.float32)
small = [np.ascontiguousarray(x[:, :, :64]) for x in (q, k, v, out)]
_native.cpu_attention(args(64), _native.F32, *small[:3], None, small[3])   # pool, BLAS warm
"""


def test_peak_memory_is_a_block_not_the_score_matrix():
    """(1, 1, 8192, 64) self-attention: the 8192 x 8192 float32 scores alone are 256 MiB;
    the kernel's scratch is a few blocks (issue 13: under 64 MiB added to the peak RSS,
    measured from the resident set just before the call; the output is preallocated)."""
    added = peak_rss.added_mib(PEAK_SETUP, "_native.cpu_attention(args(8192), _native.F32, q, k, v, None, out)",
                               timeout=120)
    assert added < 16, f"peak RSS grew by {added:.1f} MiB"


def test_argument_errors():
    q = np.zeros((1, 6, 4, 8), np.float32)
    k = np.zeros((1, 4, 5, 8), np.float32)
    out = np.zeros((1, 6, 4, 8), np.float32)
    a, _ = T.args(q, k, k)
    with pytest.raises(ValueError, match="Hk=4 and Hv=4 must divide Hq=6"):
        _native.cpu_attention(a, _native.F32, q, k, k, None, out)
    a, _ = T.args(q, q, q)
    with pytest.raises(ValueError, match="mask kind 5"):
        _native.cpu_attention(dict(a, mask=5), _native.F32, q, q, q, None, out)
    for field in ("k_sb", "q_sl", "k_sl", "v_sl", "o_sb", "o_sh", "o_sl"):
        with pytest.raises(ValueError, match="negative stride"):
            _native.cpu_attention(dict(a, **{field: -1}), _native.F32, q, q, q, None, out)
    with pytest.raises(ValueError, match="mask is NULL"):
        _native.cpu_attention(dict(a, mask=1), _native.F32, q, q, q, None, out)
    with pytest.raises(ValueError, match="dtype 3"):
        _native.cpu_attention(a, 3, q, q, q, None, out)


@pytest.mark.parametrize("rows", ["128", "64", "32", "auto", ""])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
def test_forced_query_rows(rows, dtype, monkeypatch):
    """MPSKERN_CPU_ATTENTION_ROWS (benchmarks' A/B switch) forces every call's query block:
    each size over odd L (200: 128 + 72, 3 x 64 + 8, 6 x 32 + 8), causal or not, with a
    mask, at 1 and 16 threads, matches the float64 reference and the default's bits (a
    query row's sums do not depend on its block)."""
    rng = np.random.default_rng(12)
    q, k, v, m = T.case(rng, dtype, 2, 3, 3, 3, 200, 300, 24, 20, "add", (2, 1, 200, 300))
    old = _native.cpu_get_num_threads()
    try:
        for n in (1, 16):
            _native.cpu_set_num_threads(n)
            for causal in (False, True):
                monkeypatch.delenv("MPSKERN_CPU_ATTENTION_ROWS", raising=False)
                want = T.run_cpu(q, k, v, m, causal)
                monkeypatch.setenv("MPSKERN_CPU_ATTENTION_ROWS", rows)
                got = T.run_cpu(q, k, v, m, causal)
                T.check(got, q, k, v, m, causal, what=f"rows={rows} threads={n}")
                assert got.tobytes() == want.tobytes()
    finally:
        _native.cpu_set_num_threads(old)


@pytest.mark.parametrize("bad", ["256", "16", "0", "64 ", "big"])
def test_forced_query_rows_refuses_other_values(bad, monkeypatch):
    q = np.ones((1, 1, 4, 8), np.float32)
    monkeypatch.setenv("MPSKERN_CPU_ATTENTION_ROWS", bad)
    with pytest.raises(ValueError, match=f"MPSKERN_CPU_ATTENTION_ROWS={bad}: expected auto, "
                                         "128, 64 or 32"):
        T.run_cpu(q, q, q)
