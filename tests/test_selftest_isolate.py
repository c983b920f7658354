"""`mpskern selftest --isolate`: each op x dtype x backend in its own process, so a crash (an
MPSGraph assertion aborts the process) becomes a row and the run goes on; the default when
stdout is not a terminal; `--json FILE` for bug reports. And the NaN/Inf cases: every op
again with NaN, +Inf and -Inf inputs, expected to propagate as torch (the float64
reference) does."""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mpskern.cli import selftest as st
from mpskern.cli.main import app

runner = CliRunner()
SOFTMAX = [c for c in st.CASES if c.op == "softmax"][:1]


def test_isolated_rows_equal_the_in_process_ones():
    a = st.run(["cpu"], ["float32"], 0, SOFTMAX)
    b = st.run_isolated(["cpu"], ["float32"], 0, SOFTMAX)
    assert [(r.op, r.label, r.status, r.err_ref) for r in a] == [(r.op, r.label, r.status, r.err_ref) for r in b]


@pytest.mark.parametrize("code,words", [
    ("import os; os.abort()", "crashed (SIGABRT)"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "crashed (SIGSEGV)"),
    ("import sys; sys.stderr.write('MPSGraph assertion failed\\\\n'); sys.exit(3)", "crashed (exit status 3)"),
])
def test_a_crashing_case_becomes_a_row_and_the_run_goes_on(monkeypatch, code, words):
    monkeypatch.setattr(st, "_CHILD_CODE", code)
    rows = st.run_isolated(["cpu", "sim"], ["float32", "float16"], 0, SOFTMAX)
    assert len(rows) == 4 and all(r.status == "crashed" for r in rows)
    assert all(r.note.startswith(words) for r in rows), rows[0].note
    if "exit status" in words:
        assert "MPSGraph assertion failed" in rows[0].note          # the child's last words
    assert st.failed(rows) == rows


def test_a_hanging_case_times_out(monkeypatch):
    monkeypatch.setattr(st, "_CHILD_CODE", "import time; time.sleep(30)")
    (row,) = st.run_isolated(["cpu"], ["float32"], 0, SOFTMAX, timeout=1)
    assert row.status == "crashed" and "no result after 1 s" in row.note


def test_isolation_is_the_default_without_a_terminal_and_json_is_written(tmp_path, monkeypatch):
    calls = []
    real = st.run_isolated
    monkeypatch.setattr(st, "run_isolated", lambda *a, **k: calls.append(1) or real(*a, **k))
    path = tmp_path / "report.json"
    r = runner.invoke(app, ["selftest", "-b", "cpu", "--op", "softmax", "-d", "float32", "--json", str(path)])
    assert r.exit_code == 0, r.output
    assert calls and "each case in its own process" in r.output and f"report written to {path}" in r.output
    data = json.loads(path.read_text())
    assert data["format"] == "mpskern-selftest" and data["isolated"] is True
    assert data["backends"] == ["cpu"] and any(h.startswith("OS: ") for h in data["header"])
    n = sum(c.op == "softmax" for c in st.CASES)
    assert data["summary"]["pass"] == n == len(data["rows"])
    assert {row["label"] for row in data["rows"]} >= {"(5,37) axis -1 NaN/Inf"}
    calls.clear()
    r = runner.invoke(app, ["selftest", "-b", "cpu", "--op", "softmax", "-d", "float32", "--no-isolate"])
    assert r.exit_code == 0 and not calls


def test_json_to_an_unwritable_place(tmp_path):
    r = runner.invoke(app, ["selftest", "-b", "cpu", "--op", "softmax", "-d", "float32", "--no-isolate",
                            "--json", str(tmp_path / "missing" / "r.json")])
    assert r.exit_code == 2 and "cannot write" in r.output


def test_crashed_rows_fail_the_run_and_are_listed(monkeypatch):
    monkeypatch.setattr(st, "_CHILD_CODE", "import os; os.abort()")
    r = runner.invoke(app, ["selftest", "-b", "cpu", "--op", "softmax", "-d", "float32", "--isolate"])
    assert r.exit_code == 1
    assert "crashed (SIGABRT)" in r.output and "crashed)" in r.output


# ---------------------------------------------------------------- NaN/Inf cases
def test_every_op_has_a_nonfinite_case_with_nan_and_infinities():
    cases = [c for c in st.CASES if c.label.endswith("NaN/Inf")]
    assert {c.op for c in cases} == set(st.OPS)
    for c in cases:
        _call, ref, _ = c.build(np.random.default_rng(0), np.dtype("float32"))
        assert ref is not None and not np.all(np.isfinite(ref)), c.op


def test_nonfinite_comparison():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0])
    assert st._error(ref.copy(), ref) == 0.0
    assert st._error(np.array([np.nan, np.inf, -np.inf, 1.0, 2.0 + 1e-3]), ref) == pytest.approx(5e-4)
    for bad in ([0.0, np.inf, -np.inf, 1, 2], [np.nan, -np.inf, -np.inf, 1, 2], [np.nan, np.inf, -np.inf, np.nan, 2]):
        assert st._error(np.array(bad), ref) == float("inf"), bad
    assert st._error(np.ones(3), np.ones(3)) == 0.0                 # finite: as before


def test_a_backend_that_drops_nan_fails_the_nonfinite_case(monkeypatch):
    import mpskern
    real = mpskern.softmax

    def nan_dropping(x, *a, **k):
        return real(np.nan_to_num(x, nan=0.0), *a, **k)
    monkeypatch.setattr(mpskern, "softmax", nan_dropping)
    (case,) = [c for c in st.CASES if c.op == "softmax" and c.label.endswith("NaN/Inf")]
    (row,) = st.run(["cpu"], ["float32"], 0, [case])
    assert row.status == "FAIL"
