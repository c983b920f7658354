"""The fused activations of gemm, linear and conv2d (activation=None/"relu"/"gelu"/
"gelu_tanh"/"silu") through the public API, on every kernel path of cpu (1 and 2 threads) and
the simulator (always: the cases are small), against the float64 references (mpskern.reference:
torch's formulas after alpha/beta/C or after the bias) and against torch itself; the
argument's errors; and on the simulator, that the activation is compiled into the kernel's own
store (MK_ACT) and adds no dispatch."""
import numpy as np
import pytest

import mpskern
import refs
from mpskern import _native, backends, sim
from mpskern import reference as R
from mpskern.reference import ACTIVATIONS

ACTS = [a for a in ACTIVATIONS if a is not None]
WHERE = ([("cpu", 1), ("cpu", 2)] + ([("sim", 1)] if sim.available()[0] else []) +
         ([("mps", 1)] if backends.availability("mps")[0] else []))   # (mps: on a Mac)


def _r(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.fixture(params=WHERE, ids=[f"{b}-{n}thread" for b, n in WHERE])
def backend(request):
    """The backend name, with the cpu's thread count set (1: one GEMM call, 2: tiles)."""
    name, n = request.param
    old = _native.cpu_get_num_threads()
    _native.cpu_set_num_threads(n)
    yield name
    _native.cpu_set_num_threads(old)


GEMMS = {   # name: (a, b, c shapes, options)
    "2d": ((33, 65), (65, 31), None, {}),
    "plus C beta": ((19, 23), (23, 37), (19, 37), dict(alpha=0.5, beta=2.0)),
    "transposed": ((23, 19), (37, 23), None, dict(trans_a=True, trans_b=True)),
    "batched, b shared": ((3, 9, 17), (17, 40), (9, 40), dict(beta=1.0)),
    "big (tiles over threads)": ((256, 192), (192, 320), None, {}),
    "K=0": ((5, 0), (0, 6), (5, 6), dict(beta=1.5)),
}


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("case", sorted(GEMMS))
@pytest.mark.parametrize("act", ACTS)
def test_gemm(backend, case, act, dtype):
    sa, sb, sc, p = GEMMS[case]
    rng = np.random.default_rng(1)
    a, b = _r(rng, sa, dtype, 0.5), _r(rng, sb, dtype, 0.5)
    c = None if sc is None else _r(rng, sc, dtype)
    got = mpskern.gemm(a, b, c, activation=act, backend=backend, **p)
    want = refs.gemm(a, b, c, activation=act, **p)
    refs.assert_close(got, want, dtype, terms=max(1, a.shape[-1]), what=f"{case} {act}")


LINEARS = {   # name: (x, weight shapes, bias)
    "tokens +bias": ((2, 9, 17), (13, 17), True),
    "no bias": ((33, 20), (70, 20), False),
    "big +bias (tiles over threads)": ((256, 192), (320, 192), True),
    "in_features=0 +bias": ((4, 0), (6, 0), True),
}


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("case", sorted(LINEARS))
@pytest.mark.parametrize("act", ACTS)
def test_linear(backend, case, act, dtype):
    sx, sw, with_bias = LINEARS[case]
    rng = np.random.default_rng(4)
    x, w = _r(rng, sx, dtype, 0.5), _r(rng, sw, dtype, 0.5)
    b = _r(rng, sw[0], np.float32) if with_bias else None
    got = mpskern.linear(x, w, b, activation=act, backend=backend)
    want = R.linear(x, w, b, activation=act)
    refs.assert_close(got, want, dtype, terms=max(1, sx[-1]), what=f"{case} {act}")


CONVS = {   # name: (x, w shapes, bias, options); which cpu path each takes is in the name
    # (cpu: MPSKERN_CPU_CONV forces the Winograd ones; auto picks it for larger problems)
    "im2col 3x3/2": ((2, 3, 9, 11), (4, 3, 3, 3), True, dict(stride=2, padding=1)),
    "winograd F(4x4) 3x3 16ch": ((2, 16, 13, 11), (16, 16, 3, 3), True, dict(padding=1, algo="winograd")),
    "winograd F(2x2) 3x3 8ch": ((1, 8, 9, 10), (12, 8, 3, 3), False, dict(padding=1, algo="winograd2")),
    "depthwise": ((2, 5, 8, 7), (5, 1, 3, 3), True, dict(padding=1, groups=5)),
    "1x1 no bias (GPU: as a gemm)": ((2, 8, 5, 6), (12, 8, 1, 1), False, {}),
    "grouped dilated": ((1, 4, 10, 13), (6, 2, 3, 3), False, dict(padding=2, dilation=2, groups=2)),
    "one small image (cpu: per-image GEMM over channels)": ((1, 32, 7, 7), (64, 32, 3, 3), True,
                                                           dict(padding=1)),
    "C=0": ((2, 0, 4, 4), (3, 0, 3, 3), True, {}),
}


# cpu Winograd F(4x4) rows written in place (Q a multiple of 4, float32) are activated in
# runs of whole rows, across tile rows and up to 4096 floats, a run ending at an image's or
# channel's plane: planes of 16x12 (two images), 8x8 (six: a task spans images) and 68x68
# (4624 floats: a capped run)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(2, 8, 16, 12), (6, 8, 8, 8), (1, 8, 68, 68)],
                         ids=["2x16x12", "6x8x8", "1x68x68"])
@pytest.mark.parametrize("act", ACTS)
def test_winograd_rows_activated_in_runs_cpu(shape, act, threads, monkeypatch):
    monkeypatch.setenv("MPSKERN_CPU_CONV", "winograd")
    rng = np.random.default_rng(3)
    x = _r(rng, shape, np.float32)
    w = _r(rng, (6, shape[1], 3, 3), np.float32, (shape[1] * 9) ** -0.5)
    b = _r(rng, 6, np.float32)
    before = mpskern.get_num_threads()
    mpskern.set_num_threads(threads)
    try:
        got = mpskern.conv2d(x, w, b, padding=1, activation=act, backend="cpu")
    finally:
        mpskern.set_num_threads(before)
    want = refs.conv2d(x, w, b, padding=1, activation=act)
    refs.assert_close(got, want, np.float32, terms=shape[1] * 9, what=f"{shape} {act} {threads}")


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("case", sorted(CONVS))
@pytest.mark.parametrize("act", ACTS)
def test_conv2d(backend, case, act, dtype, monkeypatch):
    sx, sw, with_bias, p = CONVS[case]
    p = dict(p)
    algo = p.pop("algo", None)
    if algo:
        monkeypatch.setenv("MPSKERN_CPU_CONV", algo)
    rng = np.random.default_rng(2)
    x = _r(rng, sx, dtype)
    w = _r(rng, sw, dtype, max(1, sw[1] * sw[2] * sw[3]) ** -0.5)
    b = _r(rng, sw[0], np.float32) if with_bias else None
    got = mpskern.conv2d(x, w, b, activation=act, backend=backend, **p)
    want = refs.conv2d(x, w, b, activation=act, **p)
    refs.assert_close(got, want, dtype, terms=max(1, sw[1] * sw[2] * sw[3]), what=f"{case} {act}")


@pytest.mark.parametrize("act", ACTS)
def test_against_torch_itself(backend, act):
    """The three ops with each activation against torch's own functions (float32)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    fn = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu,
          "gelu_tanh": lambda y: F.gelu(y, approximate="tanh")}[act]
    rng = np.random.default_rng(5)
    a, b, c = _r(rng, (21, 30), np.float32), _r(rng, (30, 17), np.float32), _r(rng, (21, 17), np.float32)
    x, w, bias = _r(rng, (2, 6, 9, 9), np.float32), _r(rng, (7, 6, 3, 3), np.float32, 0.2), _r(rng, 7, np.float32)
    t = torch.from_numpy
    pairs = [
        (mpskern.gemm(a, b, c, alpha=0.5, activation=act, backend=backend),
         fn(torch.addmm(t(c), t(a), t(b), alpha=0.5))),
        (mpskern.linear(a, b.T.copy(), bias[:1].repeat(17), activation=act, backend=backend),
         fn(F.linear(t(a), t(b.T.copy()), t(bias[:1].repeat(17))))),
        (mpskern.conv2d(x, w, bias, padding=1, activation=act, backend=backend),
         fn(F.conv2d(t(x), t(w), t(bias), padding=1))),
    ]
    for got, want in pairs:
        np.testing.assert_allclose(got, want.numpy(), rtol=2e-5, atol=2e-5)


def test_non_finite_results_as_torch(backend):
    """Pre-activation +-inf and NaN: relu keeps NaN and gives 0 for -inf; the smooth ones give
    +inf for +inf and NaN for -inf (torch 2.13); finite huge values keep their limits."""
    a = np.array([[np.inf], [-np.inf], [np.nan], [3e38], [-3e38], [0.5]], np.float32)
    b = np.ones((1, 1), np.float32)
    for act in ACTS:
        got = mpskern.gemm(a, b, activation=act, backend=backend)
        want = refs.gemm(a, b, activation=act).astype(np.float32)
        assert np.array_equal(got[:5], want[:5], equal_nan=True), (act, got.ravel(), want.ravel())


@pytest.mark.parametrize("bad", ["tanh", "RELU", "", 1, True, ("relu",)])
def test_unknown_activation_lists_the_choices(bad):
    a = np.ones((2, 2), np.float32)
    x, w = np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 1, 1), np.float32)
    for call, op in ((lambda: mpskern.gemm(a, a, activation=bad), "gemm"),
                     (lambda: mpskern.linear(a, a, activation=bad), "linear"),
                     (lambda: mpskern.conv2d(x, w, activation=bad), "conv2d")):
        with pytest.raises(ValueError, match=rf"{op}: activation=.* is not one of None, 'relu', "
                                             r"'gelu', 'gelu_tanh', 'silu'"):
            call()


@pytest.fixture
def sim_log(monkeypatch):
    """The simulator backend, recording each command buffer's dispatch count and each
    pipeline's macros (at its device layer, backends/gpu/context.py's Context)."""
    ok, why = backends.availability("sim")
    if not ok:
        pytest.skip(f"sim unavailable: {why}")
    be = backends.get("sim")
    ctx = be._ctx
    log = {"runs": [], "macros": []}
    submit, compiled = ctx.submit, ctx.compiled

    def counted(dispatches, *args, **kw):
        log["runs"].append(len(dispatches))
        return submit(dispatches, *args, **kw)

    def pipe(kernel, file=None, macros=None, **kw):
        log["macros"].append((kernel, dict(macros or {})))
        return compiled(kernel, file, macros, **kw)
    monkeypatch.setattr(ctx, "submit", counted)
    monkeypatch.setattr(ctx, "compiled", pipe)
    return be, log


@pytest.mark.parametrize("op", ["gemm", "gemm split-K", "conv2d", "conv2d depthwise", "conv2d 1x1"])
def test_sim_fuses_the_activation_into_the_same_dispatch(sim_log, op):
    """With and without gelu the command buffer holds the same dispatches (the activation adds
    none: split-K applies it in its existing reduction), and the pipelines that store the
    result are compiled with MK_ACT=2 (metal/mk_activation.h), the others without."""
    be, log = sim_log
    rng = np.random.default_rng(3)
    a, b = _r(rng, (8, 700), np.float32, 0.2), _r(rng, (700, 8), np.float32, 0.2)
    x = _r(rng, (1, 4, 6, 6), np.float32)
    calls = {
        "gemm": lambda act: mpskern.gemm(a[:, :20], b[:20], activation=act, backend="sim"),
        "gemm split-K": lambda act: mpskern.gemm(a, b, activation=act, backend="sim"),
        "conv2d": lambda act: mpskern.conv2d(x, _r(rng, (3, 4, 3, 3), np.float32), np.ones(3, np.float32),
                                             padding=1, activation=act, backend="sim"),
        "conv2d depthwise": lambda act: mpskern.conv2d(x, _r(rng, (4, 1, 3, 3), np.float32), groups=4,
                                                       activation=act, backend="sim"),
        "conv2d 1x1": lambda act: mpskern.conv2d(x, _r(rng, (5, 4, 1, 1), np.float32),
                                                 activation=act, backend="sim"),
    }
    counts = {}
    for act in (None, "gelu"):
        log["runs"].clear()
        log["macros"].clear()
        calls[op](act)
        counts[act] = list(log["runs"])
        stores = [m for k, m in log["macros"]]
        if act:
            assert stores and all(m.get("MK_ACT") == 2 for m in stores), log["macros"]
        else:
            assert all("MK_ACT" not in m for m in stores), log["macros"]
    assert counts[None] == counts["gelu"] and len(counts[None]) == 1, counts
    if op == "gemm split-K":
        assert counts["gelu"] == [2], "split-K: the partial sums and the reduction, nothing more"
