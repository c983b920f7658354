"""scaled_dot_product_attention with operands and out= that are strided views (the cpu
kernel reads rows at their strides, mpskern/ops/attention.py; other backends copy): the
same bits as C-contiguous copies of the same values, on every backend of
MPSKERN_TEST_BACKENDS; out= written in place through its strides (merged heads) and
nothing outside it; out= overlapping an input or itself goes through a copy; the layout
rules of _args.row_strided / _self_overlapping. Padding next to the views holds NaN: a
kernel that read past a row (or a stride it ignored) would bring it into the result."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)
from mpskern import _args
from mpskern.reference import scaled_dot_product_attention as reference

sdpa = mpskern.scaled_dot_product_attention


def padded(rng, shape, dtype, pad=3):
    """A view of `shape` whose rows sit in wider rows (and heads in a wider head
    dimension) of a NaN-filled parent: strided everywhere but the last dimension."""
    big = np.full(shape[:-3] + (shape[-3] + 1, shape[-2] + 2, shape[-1] + pad), np.nan, dtype)
    v = big[..., 1:, 1:-1, :shape[-1]]
    v[...] = refs.rand(shape, dtype, rng)
    return v


def qkv_views(rng, B, L, H, E, dtype):
    """GPT-2's layout: one (B, L, 3 H E) projection, q, k, v as (B, H, L, E) views."""
    y = refs.rand((B, L, 3 * H * E), dtype, rng)
    return y, list(y.reshape(B, L, 3, H, E).transpose(2, 0, 3, 1, 4))


CASES = [  # (B, H, L, S, E, Ev, kwargs): across the cpu kernel's 128-query / 256-key blocks
    (2, 3, 5, 7, 8, 4, {}),
    (1, 2, 300, 300, 16, 16, {"is_causal": True}),
    (1, 2, 129, 520, 12, 20, {}),
    (2, 4, 33, 33, 8, 8, {"is_causal": True}),
]


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_strided_operands_and_out_give_the_contiguous_bits(backend, case, dtype):
    B, H, L, S, E, Ev, kw = case
    rng = np.random.default_rng(0)
    q, k, v = (padded(rng, (B, H, n, e), dtype) for n, e in ((L, E), (S, E), (S, Ev)))
    assert not any(x.flags.c_contiguous for x in (q, k, v))
    dense = [np.ascontiguousarray(x) for x in (q, k, v)]
    want = sdpa(*dense, backend=backend, **kw)
    refs.assert_close(want, reference(*dense, **kw), dtype, S + E)
    assert np.array_equal(sdpa(q, k, v, backend=backend, **kw), want)
    parent = np.full((B, L, H, Ev + 2), np.nan, dtype)
    out = parent[..., 1:Ev + 1].transpose(0, 2, 1, 3)        # (B, H, L, Ev), rows apart
    assert sdpa(q, k, v, backend=backend, out=out, **kw) is out
    assert np.array_equal(out, want)
    assert np.isnan(parent[..., 0]).all() and np.isnan(parent[..., -1]).all()


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
def test_heads_of_one_projection_written_merged(backend, dtype):
    """The GPT-2 block's call: q, k, v views of one qkv array, out= the (B, L, H * E)
    array's (B, H, L, E) view: the result is the merged heads, qkv untouched."""
    rng = np.random.default_rng(1)
    B, L, H, E = 2, 150, 4, 16
    y, (q, k, v) = qkv_views(rng, B, L, H, E, dtype)
    before = y.copy()
    want = sdpa(*(np.ascontiguousarray(x) for x in (q, k, v)), is_causal=True, backend=backend)
    o = np.full((B, L, H * E), np.nan, dtype)
    heads = o.reshape(B, L, H, E).transpose(0, 2, 1, 3)
    assert sdpa(q, k, v, is_causal=True, out=heads, backend=backend) is heads
    assert np.array_equal(o, want.transpose(0, 2, 1, 3).reshape(B, L, H * E))
    assert np.array_equal(y, before)


def test_out_overlapping_an_input_goes_through_a_copy(backend):
    """out= v's own slot of the projection: the kernel must not write where it still
    reads (the result lands in v's slot afterwards)."""
    rng = np.random.default_rng(2)
    B, L, H, E = 1, 300, 2, 8
    y, (q, k, v) = qkv_views(rng, B, L, H, E, np.float32)
    want = sdpa(*(x.copy() for x in (q, k, v)), backend=backend)
    assert sdpa(q, k, v, out=v, backend=backend) is v
    assert np.array_equal(v, want)
    y, (q, k, v) = qkv_views(rng, B, L, H, E, np.float32)
    want = sdpa(*(x.copy() for x in (q, k, v)), backend=backend)
    assert sdpa(q, k, v, out=q, backend=backend) is q       # rows the kernel reads first
    assert np.array_equal(q, want)


def test_self_overlapping_out_is_written_as_numpy_assigns(backend):
    """An as_strided out= whose heads share memory: written through a copy, as out[...] =
    result (numpy's order), never by racing threads."""
    rng = np.random.default_rng(3)
    q, k, v = (refs.rand((1, 2, 40, 8), np.float32, rng) for _ in range(3))
    want = sdpa(q, k, v, backend=backend)
    base = np.zeros((40, 8), np.float32)
    out = np.lib.stride_tricks.as_strided(base, (1, 2, 40, 8), (0, 0, 32, 4))
    expect = np.zeros_like(base)
    np.lib.stride_tricks.as_strided(expect, (1, 2, 40, 8), (0, 0, 32, 4))[...] = want
    assert sdpa(q, k, v, out=out, backend=backend) is out
    assert np.array_equal(base, expect)


def test_strided_out_errors_name_the_fix():
    q = np.zeros((1, 2, 4, 8), np.float32)
    wide = np.zeros((1, 4, 2, 8), np.float32).transpose(0, 2, 1, 3)
    with pytest.raises(ValueError, match="dtype float16.*out=np.empty"):
        sdpa(q, q, q, out=wide.astype(np.float16))
    ro = np.zeros((1, 4, 2, 8), np.float32).transpose(0, 2, 1, 3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        sdpa(q, q, q, out=ro)
    with pytest.raises(ValueError, match="shape"):
        sdpa(q, q, q, out=wide[:, :1])


def test_row_strided_and_self_overlap_rules():
    a = np.zeros((4, 5, 6), np.float32)
    assert _args.row_strided(a[:, ::2]) and _args.row_strided(a.transpose(1, 0, 2))
    assert not _args.row_strided(a[..., ::2])                 # elements not contiguous
    assert not _args.row_strided(a[::-1])                     # negative stride
    assert not _args.row_strided(a.transpose(0, 2, 1))
    assert not _args.row_strided(a[:0])
    assert not _args._self_overlapping(a.transpose(1, 0, 2)) and not _args._self_overlapping(a[:, ::2])
    st = np.lib.stride_tricks.as_strided
    assert _args._self_overlapping(st(a, (4, 6), (0, 4)))     # rows repeated
    assert _args._self_overlapping(st(a, (4, 6), (12, 4)))    # rows 3 elements apart, 6 long
    assert not _args._self_overlapping(st(a, (4, 6), (24, 4)))
    s = _args.span(a[1:3, 1:4])
    assert s.flags.c_contiguous and s.ndim == 1 and np.shares_memory(s, a)
    assert s.size == (3 - 1 - 1) * 30 + (4 - 1 - 1) * 6 + 6
