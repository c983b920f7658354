"""PyTorch's functional names and defaults, checked against torch itself (installed here;
skipped where it is not): gemm's beta default (torch.addmm), linear, softmax's dim=,
conv2d's channels-last error, and the one mixed-dtype rule of every op."""
import numpy as np
import pytest

import mpskern
import refs
from mpskern import reference as R
from mpskern import sim
from mpskern.ops import TABLE

torch = pytest.importorskip("torch")
F = torch.nn.functional

# the new ops run on the simulator too (small shapes), whatever MPSKERN_TEST_BACKENDS says
BACKENDS = ["cpu"] + (["sim"] if sim.available()[0] else [])


def t(x):
    return None if x is None else torch.from_numpy(np.ascontiguousarray(x))


# -- gemm: beta=None is 1 with c (torch.addmm), 0 without ----------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", refs.DTYPES)
def test_gemm_with_c_and_no_beta_adds_c_as_torch_addmm(backend, dtype):
    rng = np.random.default_rng(0)
    a, b, c = (refs.rand(s, dtype, rng) for s in ((5, 7), (7, 6), (5, 6)))
    got = mpskern.gemm(a, b, c, backend=backend)
    want = torch.addmm(t(c).float(), t(a).float(), t(b).float()).double().numpy()
    refs.assert_close(got, want, dtype, terms=7, what="gemm(a, b, c)")
    refs.assert_close(got, refs.gemm(a, b, c), dtype, terms=7, what="reference default")
    # a broadcast c (one row) too, and alpha without beta
    got = mpskern.gemm(a, b, c[0], alpha=0.5, backend=backend)
    refs.assert_close(got, 0.5 * refs.matmul(a, b) + c[0].astype(np.float64), dtype, terms=7,
                      what="gemm(a, b, c_row, alpha=.5)")


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_explicit_beta_zero_ignores_c_even_nan(backend):
    rng = np.random.default_rng(1)
    a, b = refs.rand((4, 3), np.float32, rng), refs.rand((3, 5), np.float32, rng)
    c = np.full((4, 5), np.nan, np.float32)
    got = mpskern.gemm(a, b, c, beta=0, backend=backend)
    want = torch.addmm(t(c), t(a), t(b), beta=0).numpy()
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(want))
    refs.assert_close(got, refs.matmul(a, b), np.float32, terms=3, what="beta=0 with NaN c")
    with pytest.raises(ValueError, match="beta=1.0 needs c"):
        mpskern.gemm(a, b, beta=1)
    assert np.array_equal(mpskern.gemm(a, b, backend=backend),
                          mpskern.gemm(a, b, beta=0.0, backend=backend))


# -- linear ---------------------------------------------------------------------------------------
LINEAR = [  # x shape, weight shape, bias
    ((7, 5), (3, 5), True),
    ((2, 3, 9, 17), (13, 17), True),      # leading dimensions are GEMM rows
    ((5,), (4, 5), True),                 # 1-D x
    ((6, 4), (4,), False),                # 1-D weight: one output, dimension dropped
    ((33, 20), (17, 20), False),
    ((0, 4), (6, 4), True),               # empty batch
    ((3, 0), (2, 0), True),               # in_features 0: bias alone
    ((3, 0), (2, 0), False),              # ... or zeros
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("xs,ws,has_bias", LINEAR)
def test_linear_matches_torch(backend, dtype, xs, ws, has_bias):
    rng = np.random.default_rng(2)
    x, w = refs.rand(xs, dtype, rng), refs.rand(ws, dtype, rng)
    bias = refs.rand(ws[0], dtype, rng) if has_bias else None
    got = mpskern.linear(x, w, bias, backend=backend)
    want = F.linear(t(x).double(), t(w).double(), None if bias is None else t(bias).double())
    refs.assert_close(got, want.numpy(), dtype, terms=max(1, xs[-1]), what="linear")
    refs.assert_close(got, R.linear(x, w, bias), dtype, terms=max(1, xs[-1]),
                      what="linear reference")


@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_float32_bias_with_float16_x_and_out(backend):
    rng = np.random.default_rng(3)
    x, w = refs.rand((9, 6), np.float16, rng), refs.rand((5, 6), np.float16, rng)
    bias = refs.rand(5, np.float32, rng)          # a per-feature vector: float32 allowed
    out = np.empty((9, 5), np.float16)
    got = mpskern.linear(x, w, bias, backend=backend, out=out)
    assert got is out
    refs.assert_close(out, R.linear(x, w, bias), np.float16, terms=6, what="linear out=")


def test_linear_nonfinite_values_propagate_as_torch():
    x = np.ones((3, 4), np.float32)
    w = np.ones((2, 4), np.float32)
    x[1, 2] = np.nan
    bias = np.array([0, np.inf], np.float32)
    got = mpskern.linear(x, w, bias, backend="cpu")
    want = F.linear(t(x), t(w), t(bias)).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(
        np.isinf(got), np.isinf(want))


@pytest.mark.parametrize("call,match", [
    (lambda: mpskern.linear(np.ones((3, 4), np.float32), np.ones((4, 3), np.float32)),
     r"in_features=4.*weight.T"),
    (lambda: mpskern.linear(np.ones((3, 4), np.float32), np.ones((2, 4), np.float32),
                            np.ones(3, np.float32)), r"bias has shape \(3,\).*2 output"),
    (lambda: mpskern.linear(np.ones((3, 4), np.float32), np.ones(4, np.float32),
                            np.ones(1, np.float32)), r"bias needs weight \(out_features"),
    (lambda: mpskern.linear(np.float32(1), np.ones((2, 1), np.float32)), "scalar"),
    (lambda: mpskern.linear(np.ones((3, 4), np.float32), np.ones((2, 4, 1), np.float32)),
     r"weight has shape \(2, 4, 1\)"),
])
def test_linear_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- softmax: torch's dim= ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_takes_torchs_dim(name):
    x = np.random.default_rng(4).standard_normal((3, 5, 4)).astype(np.float32)
    f = getattr(mpskern, name)
    assert np.array_equal(f(x, dim=1), f(x, axis=1))
    assert np.array_equal(f(x, 1, dim=1), f(x, axis=1))
    refs.assert_close(f(x, dim=0), getattr(F, name)(t(x).double(), dim=0).numpy(),
                      np.float32, terms=3, what=f"{name} dim=0")
    with pytest.raises(TypeError, match=r"\(dim is torch's name for axis\); give only axis="):
        f(x, axis=2, dim=1)


# -- conv2d: channels-last input says so ---------------------------------------------------------
@pytest.mark.parametrize("xs,fix", [((2, 8, 8, 3), "x.transpose(0, 3, 1, 2)"),
                                    ((8, 8, 3), "x.transpose(2, 0, 1)"),
                                    ((2, 9, 9, 6), "x.transpose(0, 3, 1, 2)")])
def test_conv2d_nhwc_input_error_mentions_the_layout(xs, fix):
    x = np.ones(xs, np.float32)
    w = np.ones((4, 3, 3, 3), np.float32)
    groups = xs[-1] // 3
    with pytest.raises(ValueError) as e:
        mpskern.conv2d(x, w, groups=groups)
    msg = str(e.value)
    assert "NHWC" in msg and "NCHW" in msg and fix in msg, msg
    if groups == 1:                        # the caller's shape, not a reshaped one
        assert f"x.shape={xs}" in msg


def test_conv2d_channels_last_weight_error_mentions_the_layout():
    x = np.ones((1, 4, 8, 8), np.float32)
    with pytest.raises(ValueError, match=r"\(R, S, C, K\).*transpose\(3, 2, 0, 1\)"):
        mpskern.conv2d(x, np.ones((3, 3, 4, 16), np.float32))
    with pytest.raises(ValueError, match=r"\(K, R, S, C\).*transpose\(0, 3, 1, 2\)"):
        mpskern.conv2d(x, np.ones((16, 5, 5, 4), np.float32))
    with pytest.raises(ValueError) as e:       # an ordinary mismatch gets no layout hint
        mpskern.conv2d(x, np.ones((16, 5, 3, 3), np.float32))
    assert "looks" not in str(e.value)


# -- one mixed-dtype rule for every op (mpskern/_args.py: same_dtype) ----------------------------
# The per-channel / per-feature vectors of each op, by its inputs' keys in the op table: they may
# be float32 with float16 operands. Every other floating array input is an operand and must have
# the operands' dtype. A new op must be classified here (the test fails on an unknown key).
PARAMETERS = {"conv2d": {"b"}, "linear": {"b"}, "layer_norm": {"w", "b"}, "rms_norm": {"w"},
              "group_norm": {"w", "b"}, "batch_norm": {"m", "v", "w", "b"},
              "scaled_dot_product_attention": {"mask"}}   # a float mask: float32 or q's dtype
OPERANDS = {"x", "a", "b", "c", "w", "q", "k", "v"}


def _used(op, inp):
    """The input keys the op's call passes (group_norm's checks carry unused m/v)."""
    if op.name == "scaled_dot_product_attention":
        return {"q", "k", "v", "mask"}
    return set(op.arrays) | set(op.keywords)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_one_mixed_dtype_rule(name):
    op = TABLE[name]
    params = PARAMETERS.get(name, set())
    seen = 0
    for check in op.checks:
        raw = check.inputs(np.random.default_rng(5), np.dtype(np.float16))
        used = _used(op, raw)
        floats = sorted(k for k in used if isinstance(raw.get(k), np.ndarray)
                        and raw[k].dtype.kind == "f")
        inp = dict(raw, **{k: raw[k].astype(np.float16) for k in floats})

        def run(i):                       # fresh arrays (batch_norm updates its statistics);
            i = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in i.items()}
            r = np.asarray(op.call(i, "cpu"))  # its training result is y then the statistics
            return r.ravel()[:inp["x"].size].astype(np.float16) if name == "batch_norm" else r
        base = run(inp)
        operands = [k for k in floats if k not in params]
        for key in floats:
            assert key in params or key in OPERANDS, f"{name}: classify input {key!r}"
            if key not in params and len(operands) < 2:
                continue                  # the only operand: it sets the op's dtype
            mixed = dict(inp, **{key: inp[key].astype(np.float32)})
            if key in params:             # accepted and used in float32: the same result
                got = run(mixed)
                assert got.dtype == base.dtype and got.tobytes() == base.tobytes(), (name, key)
            else:
                with pytest.raises(TypeError, match="operands share one dtype") as e:
                    run(mixed)
                assert "astype(np.float" in str(e.value)
            seen += 1
    if name in PARAMETERS or name in ("matmul", "gemm"):
        assert seen, f"{name}: no mixed case was tried"
