"""`mpskern selftest`: the classification of results (synthetic cases and backend names),
the CLI's exit status, header and table with the public ops faked by numpy (so a wrong
result must turn the run red), and the real run on cpu once the public ops exist."""
import numpy as np
import pytest
from typer.testing import CliRunner

import mpskern
from mpskern import reference as ref
from mpskern.cli import selftest as st
from mpskern.cli.app import app
from mpskern.cli.selftest import CASES, OPS, Case

runner = CliRunner()


def synthetic(with_ref=True):
    """A case whose 'backends' are behaviours: exact, slightly off, wrong, unsupported, crash."""
    def build(rng, dt):
        x = rng.standard_normal(50).astype(dt)
        r = x.astype(np.float64) * 2

        def call(be):
            if be in ("cpu", "good"):
                return (x * 2).astype(dt)
            if be == "bad":
                return (x * 2 + 0.1).astype(dt)
            if be == "nan":
                return np.full_like(x, np.nan)
            if be == "unsup":
                raise NotImplementedError("MPSGraph cannot do this; use backend='metal'")
            raise RuntimeError("command buffer failed")
        return call, (r if with_ref else None), 1
    return Case("double", "x(50)", build)


def by_backend(rows):
    return {(r.backend, r.dtype): r for r in rows}


def test_classification_against_float64_and_cpu():
    rows = by_backend(st.run(["cpu", "good", "bad", "nan", "unsup", "boom"], cases=[synthetic()]))
    for dt in st.DTYPES:
        assert rows["cpu", dt].status == "pass" and rows["cpu", dt].err_ref == 0.0
        assert rows["good", dt].status == "pass" and rows["good", dt].err_cpu == 0.0
        assert rows["bad", dt].status == "FAIL" and rows["bad", dt].err_ref > rows["bad", dt].tol
        assert rows["nan", dt].status == "FAIL" and rows["nan", dt].err_ref == float("inf")
        assert rows["unsup", dt].status == "unsupported" and "MPSGraph" in rows["unsup", dt].note
        assert rows["boom", dt].status == "error" and "command buffer failed" in rows["boom", dt].note
    failed = {r.backend for r in st.failed(list(rows.values()))}
    assert failed == {"bad", "nan", "boom"}


def test_without_a_float64_reference_cpu_is_the_reference():
    rows = by_backend(st.run(["cpu", "good", "bad"], cases=[synthetic(with_ref=False)]))
    assert rows["cpu", "float32"].status == "pass" and "reference" in rows["cpu", "float32"].note
    assert rows["good", "float32"].status == "pass" and rows["good", "float32"].err_ref is None
    assert rows["bad", "float32"].status == "FAIL" and rows["bad", "float32"].err_cpu > 0


def test_cases_cover_every_public_op_with_odd_sizes():
    assert set(OPS) == {"matmul", "gemm", "linear", "conv2d", "max_pool2d", "avg_pool2d",
                        "adaptive_avg_pool2d", "softmax",
                        "log_softmax", "layer_norm", "rms_norm", "batch_norm", "group_norm",
                        "scaled_dot_product_attention"}
    for op in OPS:
        assert sum(c.op == op for c in CASES) >= 2, op
    for c in CASES:                 # every case builds for both dtypes without calling mpskern
        for dt in st.DTYPES:
            call, r, red = c.build(np.random.default_rng(0), np.dtype(dt))
            assert callable(call) and red >= 1
            assert r is not None                           # every case has a float64 reference
            assert np.all(np.isfinite(r)) != c.label.endswith("NaN/Inf")   # (finite but for those)


def _fake_softmax(shift):
    def f(x, axis=-1, *, backend="auto", out=None):
        return ref.softmax(x, axis=axis).astype(x.dtype) + x.dtype.type(shift)
    return f


def _fake_log_softmax(x, axis=-1, *, backend="auto", out=None):
    return ref.log_softmax(x, axis=axis).astype(x.dtype)


@pytest.fixture
def fake_ops(monkeypatch):
    def install(shift=0.0):
        monkeypatch.setattr(mpskern, "softmax", _fake_softmax(shift), raising=False)
        monkeypatch.setattr(mpskern, "log_softmax", _fake_log_softmax, raising=False)
    return install


def test_cli_passes_prints_header_and_table(fake_ops):
    fake_ops()
    r = runner.invoke(app, ["selftest", "--op", "softmax", "--op", "log_softmax", "-b", "cpu", "--no-isolate"])
    assert r.exit_code == 0, r.output
    out = r.output
    assert f"mpskern {mpskern.__version__}" in out
    assert "OS: " in out and "Python " in out and "numpy " in out
    for name in ("cpu", "metal", "mps", "sim"):
        assert f"backend {name}: " in out
    assert "mpskern selftest" in out and "(5,37) axis -1" in out and "(3,17,6) axis 1" in out
    assert "16 passed, 0 failed, 0 unsupported" in out     # the NaN/Inf cases included


def test_cli_exits_1_on_a_wrong_result(fake_ops):
    fake_ops(shift=0.01)
    r = runner.invoke(app, ["selftest", "--op", "softmax", "-b", "cpu", "-d", "float32", "--no-isolate"])
    assert r.exit_code == 1
    assert "FAIL" in r.output and "1 passed, 4 failed" in r.output     # the empty case cannot be wrong


def test_cli_exits_1_when_an_op_is_missing(monkeypatch):
    monkeypatch.delattr(mpskern, "group_norm", raising=False)
    r = runner.invoke(app, ["selftest", "--op", "group_norm", "-b", "cpu", "-d", "float32", "--no-isolate"])
    assert r.exit_code == 1
    assert "module 'mpskern' has no attribute 'group_norm'" in r.output


@pytest.mark.skipif(mpskern.backends.availability("mps")[0], reason="checks the message off a Mac")
def test_cli_asked_for_an_unavailable_backend_says_why(fake_ops):
    fake_ops()
    r = runner.invoke(app, ["selftest", "--op", "softmax", "-b", "mps", "--no-isolate"])
    assert r.exit_code == 1
    assert "cannot test backend 'mps'" in r.output and "mps needs macOS on Apple silicon" in r.output


def test_cli_rejects_bad_options():
    assert runner.invoke(app, ["selftest", "-b", "cuda"]).exit_code == 2
    assert runner.invoke(app, ["selftest", "-d", "float64"]).exit_code == 2
    assert runner.invoke(app, ["selftest", "--op", "fft"]).exit_code == 2


@pytest.mark.skipif(not all(hasattr(mpskern, op) for op in OPS),
                    reason="the public ops are not in this build yet")
def test_real_run_on_cpu_passes():
    rows = st.run(["cpu"])
    assert len(rows) == len(CASES) * 2
    bad = st.failed(rows)
    assert not bad, "\n".join(f"{r.op} {r.label} {r.dtype}: {r.note} (err {r.err_ref})" for r in bad)


@pytest.mark.skipif(not all(hasattr(mpskern, op) for op in OPS) or
                    not mpskern.backends.availability("sim")[0],
                    reason="needs the public ops and the simulator")
def test_real_run_on_sim_when_asked():
    r = runner.invoke(app, ["selftest", "-b", "cpu", "-b", "sim", "--op", "softmax",
                            "--op", "gemm", "-d", "float32"])
    assert r.exit_code == 0, r.output
    assert "backend sim: available (tested)" in r.output
    assert "20 passed, 0 failed, 0 unsupported (cpu, sim; float32)" in r.output   # NaN/Inf and activation cases


def test_default_backends_include_sim_where_there_is_no_gpu(monkeypatch):
    seen = []
    monkeypatch.setattr(st, "run", lambda names, *a, **k: seen.append(names) or [])
    r = runner.invoke(app, ["selftest", "--op", "softmax", "--no-isolate"])
    avail = mpskern.backends.available()
    want = [b for b in avail if b != "sim" or "metal" not in avail]
    assert seen == [want], (seen, r.output)
    if "metal" not in avail and "sim" in avail:
        assert "sim" in seen[0] and "backend sim: available (tested)" in r.output
