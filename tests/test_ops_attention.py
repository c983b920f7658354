"""mpskern.scaled_dot_product_attention through the public API: torch's shapes (batch and
head broadcasting, grouped-query heads, masks of every rank, 2-D and 3-D inputs), torch's
argument errors as ValueError / TypeError naming the argument, out=, non-contiguous
inputs, on every backend of MPSKERN_TEST_BACKENDS; the same calls against torch itself
where it is installed. Kernel-level edge cases (NaN, empty rows, block boundaries) are in
tests/test_cpu_attention.py and tests/test_gpu_attention.py."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)
from mpskern.reference import scaled_dot_product_attention as reference

sdpa = mpskern.scaled_dot_product_attention

# (query, key, value, mask shape or None, mask kind, kwargs): torch accepts every one
CASES = [
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), None, None, {}),
    ((2, 3, 5, 8), (1, 3, 7, 8), (1, 3, 7, 4), None, None, {}),             # k/v batch 1
    ((1, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), None, None, {}),             # q batch 1
    ((1, 4, 5, 8), (1, 1, 7, 8), (1, 1, 7, 4), None, None, {}),             # one k/v head
    ((1, 1, 5, 8), (1, 4, 7, 8), (1, 4, 7, 4), None, None, {}),             # one q head
    ((2, 4, 5, 8), (2, 2, 7, 8), (2, 1, 7, 4), None, None, {"enable_gqa": True}),
    ((6, 5, 8), (3, 7, 8), (3, 7, 4), None, None, {"enable_gqa": True}),    # 3-D GQA
    ((5, 8), (7, 8), (7, 4), None, None, {"is_causal": True}),              # 2-D
    ((5, 8), (2, 3, 7, 8), (2, 3, 7, 4), None, None, {}),                   # ranks differ
    ((2, 3, 5, 8), (7, 8), (7, 4), None, None, {}),
    ((2, 2, 3, 5, 8), (2, 1, 3, 7, 8), (2, 1, 3, 7, 4), None, None, {}),    # 2 batch dims
    ((2, 1, 3, 5, 8), (1, 2, 3, 7, 8), (2, 2, 3, 7, 4), None, None, {}),    # cross broadcast
    ((2, 3, 9, 8), (2, 3, 4, 8), (2, 3, 4, 4), None, None, {"is_causal": True}),   # L > S
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), (5, 7), "bool", {}),
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), (1, 7), "add", {}),
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), (3, 1, 7), "add", {}),
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), (2, 1, 5, 1), "bool", {}),
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4), (2, 3, 5, 7), "add", {"scale": 0.25}),
    ((2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 4), (4, 5, 7), "bool", {"enable_gqa": True}),
    ((2, 2, 3, 5, 8), (2, 2, 3, 7, 8), (2, 2, 3, 7, 4), (2, 1, 1, 5, 7), "add", {}),
    ((2, 3, 5, 0), (2, 3, 7, 0), (2, 3, 7, 4), None, None, {}),             # E = 0
    ((2, 3, 5, 8), (2, 3, 0, 8), (2, 3, 0, 4), None, None, {}),             # S = 0
    ((2, 3, 0, 8), (2, 3, 7, 8), (2, 3, 7, 4), None, None, {}),             # L = 0
]
IDS = [f"{i}" for i in range(len(CASES))]


def _inputs(case, dtype, seed=0):
    qs, ks, vs, ms, kind, kw = case
    rng = np.random.default_rng(seed)
    q, k, v = (refs.rand(s, dtype, rng) for s in (qs, ks, vs))
    m = None
    if kind == "bool":
        m = rng.random(ms) > 0.3
    elif kind == "add":
        m = rng.uniform(-2, 2, ms).astype(dtype)
        m[rng.random(ms) < 0.2] = -np.inf
    return q, k, v, m, kw


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_shapes_against_the_reference(backend, case, dtype):
    q, k, v, m, kw = _inputs(case, dtype)
    got = sdpa(q, k, v, m, backend=backend, **kw)
    with np.errstate(invalid="ignore"):
        want = reference(q, k, v, m, **kw)
    refs.assert_close(got, want, dtype, terms=k.shape[-2] + q.shape[-1], what=f"{case}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_shapes_against_torch(case):
    torch = pytest.importorskip("torch")
    q, k, v, m, kw = _inputs(case, np.float32, seed=1)
    t = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x) for x in (q, k, v)),
        attn_mask=None if m is None else torch.from_numpy(m), **kw).numpy()
    got = sdpa(q, k, v, m, **kw)
    assert got.shape == t.shape
    np.testing.assert_allclose(got, t, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("call,err,words", [
    (lambda q: sdpa(q[0, 0, 0], q[0, 0, 0], q[0, 0, 0]), ValueError, "at least 2 dimensions"),
    (lambda q: sdpa(q, q[..., :7], q), ValueError, "key's last dimension (7)"),
    (lambda q: sdpa(q, q, q[:, :, :4]), ValueError, "value has 4 rows but key has S=5"),
    (lambda q: sdpa(q, q[:, :2], q[:, :2]), ValueError, "pass enable_gqa=True"),
    (lambda q: sdpa(q, q[:, :3], q[:, :3], enable_gqa=True), ValueError, "must divide the query's (4)"),
    (lambda q: sdpa(q[0, 0], q[0, 0], q[0, 0], enable_gqa=True), ValueError, "heads dimension"),
    (lambda q: sdpa(q, np.concatenate([q, q, q]), np.concatenate([q, q, q])), ValueError,
     "batch dimensions of query, key and value do not broadcast"),
    (lambda q: sdpa(q, q, q, np.ones((3, 5, 5), bool)), ValueError,
     "attn_mask with shape (3, 5, 5) does not broadcast to the scores' shape (2, 4, 5, 5)"),
    (lambda q: sdpa(q[:1], q[:1], q[:1], np.ones((2, 4, 5, 5), bool)), ValueError,
     "does not broadcast"),                         # a mask may not enlarge the result
    (lambda q: sdpa(q, q, q, np.ones(5, bool)), ValueError, "needs at least 2 dimensions (L, S)"),
    (lambda q: sdpa(q, q, q, np.ones((5, 5), bool), is_causal=True), ValueError,
     "attn_mask and is_causal=True cannot be combined"),
    (lambda q: sdpa(q.astype(np.float64), q, q), TypeError, "query has dtype float64"),
    (lambda q: sdpa(q, q.astype(np.float16), q), TypeError, "key has dtype float16 but query"),
    (lambda q: sdpa(q, q, q, np.ones((5, 5), np.int32)), TypeError, "attn_mask has dtype int32"),
    (lambda q: sdpa(q, q, q, np.ones((5, 5), np.float16)), TypeError, "attn_mask has dtype float16"),
    (lambda q: sdpa(q, q, q, is_causal="yes"), TypeError, "is_causal must be True or False"),
    (lambda q: sdpa(q, q, q, scale="big"), TypeError, "scale must be a real number"),
    (lambda q: sdpa(q, q, q, out=np.zeros((2, 4, 5, 7), np.float32)), ValueError, "out has shape"),
])
def test_argument_errors(call, err, words):
    q = np.zeros((2, 4, 5, 8), np.float32)
    with pytest.raises(err, match=_literal(words)):
        call(q)


def _literal(words):
    import re
    return re.escape(words)


def test_float32_mask_with_a_float16_query():
    """torch takes a float32 additive mask with a half query: so do we (cast to half)."""
    rng = np.random.default_rng(2)
    q, k, v = (refs.rand((1, 2, 5, 8), np.float16, rng) for _ in range(3))
    m = rng.uniform(-1, 1, (5, 5)).astype(np.float32)
    refs.assert_close(sdpa(q, k, v, m), reference(q, k, v, m.astype(np.float16)), np.float16, 13)


def test_out_and_aliasing(backend):
    """out= receives the result, also when it is one of the inputs (then through a copy)."""
    rng = np.random.default_rng(3)
    q, k, v = (refs.rand((2, 3, 6, 8), np.float32, rng) for _ in range(3))
    want = reference(q, k, v, is_causal=True)
    out = np.full((2, 3, 6, 8), np.nan, np.float32)
    assert sdpa(q, k, v, is_causal=True, out=out, backend=backend) is out
    refs.assert_close(out, want, np.float32, 14)
    v2 = v.copy()
    assert sdpa(q, k, v2, is_causal=True, out=v2, backend=backend) is v2
    refs.assert_close(v2, want, np.float32, 14)


def test_non_contiguous_inputs(backend):
    """(B, L, H, E) projections viewed as (B, H, L, E), as models produce them."""
    rng = np.random.default_rng(4)
    q, k, v = (refs.rand((2, 6, 3, 8), np.float32, rng).transpose(0, 2, 1, 3) for _ in range(3))
    refs.assert_close(sdpa(q, k, v, backend=backend), reference(q, k, v), np.float32, 14)


def test_fully_masked_rows_and_nan(backend):
    """torch 2.13: a row with nothing to attend to is 0 @ value; a NaN query row is NaN
    even when the mask hides every key."""
    rng = np.random.default_rng(5)
    q, k, v = (refs.rand((1, 2, 4, 8), np.float32, rng) for _ in range(3))
    m = np.ones((4, 6), bool)
    m[1] = False
    k, v = k[:, :, :1].repeat(6, axis=2), v[:, :, :1].repeat(6, axis=2)
    got = sdpa(q, k, v, m, backend=backend)
    assert np.all(got[:, :, 1] == 0)
    q[0, 0, 1, 0] = np.nan
    got = sdpa(q, k, v, m, backend=backend)
    assert np.isnan(got[0, 0, 1]).all() and not np.isnan(got[0, 1]).any()


def test_public_op_reaches_the_mps_backend(monkeypatch):
    """mpskern.scaled_dot_product_attention -> backend "mps" -> native mps_attention, with the
    native layer faked (the shim itself runs only on a Mac): the args dict, the buffer order
    (q, k, v, mask, out) and which buffer is written are the ABI's. The fake rebuilds each
    operand from the struct's sizes and strides, as the MPS graph does."""
    from test_mps_backend import FakeNative
    from mpskern import backends

    class Fake(FakeNative):
        def mps_attention(self, d, a, dtype, q, k, v, mask, out):
            def full(buf, b_stride, h, rows, cols):
                x = buf.view().reshape(-1, h, rows, cols)
                return np.broadcast_to(x, (a["B"],) + x.shape[1:]) if b_stride == 0 else x
            qq = full(q, a["q_sb"], a["Hq"] if a["q_sh"] else 1, a["L"], a["E"])
            kk = full(k, a["k_sb"], a["Hk"], a["S"], a["E"])
            vv = full(v, a["v_sb"], a["Hv"], a["S"], a["Ev"])
            m = None
            if a["mask"]:
                dims = [(a["B"], a["m_sb"]), (a["Hq"], a["m_sh"]), (a["L"], a["m_sl"]),
                        (a["S"], a["m_ss"])]
                m = mask.view().reshape([n if s else 1 for n, s in dims])
                m = m.astype(bool) if a["mask"] == 1 else m
            out.view()[...] = reference(qq, kk, vv, m, is_causal=bool(a["causal"]),
                                        scale=a["scale"], enable_gqa=True).reshape(out.array.shape)
            return self._t("attention", [q, k, v, mask, out])

    be = backends._instance("mps")
    fake = Fake()
    monkeypatch.setattr(be, "native", fake)
    monkeypatch.setattr(be, "_device", None)
    rng = np.random.default_rng(6)
    q = refs.rand((2, 4, 5, 8), np.float32, rng)
    k, v = refs.rand((1, 2, 7, 8), np.float32, rng), refs.rand((1, 1, 7, 3), np.float32, rng)
    m = rng.random((4, 5, 7)) > 0.3
    got = sdpa(q, k, v, m, enable_gqa=True, backend="mps")
    refs.assert_close(got, reference(q, k, v, m, enable_gqa=True), np.float32, 15)
    assert fake.calls[-1] == ("attention", [False, False, False, False, True])
    assert be.last_config["primitive"].startswith("MPSGraph attention")
