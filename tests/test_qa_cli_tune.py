"""QA regressions: `mpskern tune` names the bad option (not a numpy/internal message) for
out-of-range --dtype/--stride/--padding/--reps, before any search starts."""
import json

import pytest
from typer.testing import CliRunner

from mpskern.cli.main import app


@pytest.mark.parametrize("extra, msg", [
    (["--dtype", "float64"], "--dtype 'float64': use float32 or float16"),
    (["--stride", "0"], "--stride 0: give a positive number"),
    (["--padding", "-1"], "--padding -1: give 0 or a positive number"),
    (["--reps", "0"], "--reps 0: give a positive number"),
])
def test_bad_tune_options_name_the_option(extra, msg, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(tmp_path / "t.json"))
    r = CliRunner().invoke(app, ["tune", "conv2d", "--backend", "sim", "--shape",
                                 "1x4x8x8x4x3x3", "--budget", "1"] + extra)
    assert r.exit_code == 2, r.output
    assert msg in r.output and "tuning conv2d" not in r.output, r.output
    assert not (tmp_path / "t.json").exists()


def test_list_is_readable_in_80_columns(monkeypatch, tmp_path):
    """--list cut every cell to 'mpske…', 'float…' in an 80-column terminal."""
    import json
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / ("deep" * 15) / "t.json"        # the line naming it is > 80 columns
    path.parent.mkdir()
    entry = {"op": "conv2d", "dtype": "float16", "backend": "sim", "family": "apple8",
             "device": "mpskern simulator (apple8)", "architecture": "",
             "config": {"variant": "simd", "BM": 64, "BN": 64, "BK": 16, "WM": 2, "WN": 2},
             "shape": [1, 64, 3136, 576], "bucket": "1x64x4096x1024", "time_ms": 12.5,
             "default_time_ms": 20.0, "provenance": {"date": "2026-11-29T18:00:00Z"}}
    path.write_text(json.dumps({"format": "mpskern-tuning-db", "version": 1,
                                "entries": [entry]}))
    r = CliRunner().invoke(app, ["tune", "--list", "--db", str(path)])
    assert r.exit_code == 0, r.output
    assert "…" not in r.output, r.output
    for cell in ("mpskern simulator (apple8) (sim)", "conv2d", "float16", "1x64x3136x576",
                 "variant=simd", "12.5", "1.60x", "2026-11-29"):
        assert cell in r.output, (cell, r.output)
    assert max(len(line) for line in r.output.splitlines()) <= 80, r.output  # a long --db path folds


def test_tune_help_in_the_command_list_is_not_broken_mid_sentence(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = CliRunner().invoke(app, ["--help"])
    lines = [ln.strip("│ ").rstrip() for ln in r.output.splitlines()]
    i = next(k for k, ln in enumerate(lines) if ln.startswith("tune "))
    # the broken docstring gave a line holding only "the tuning", then "database; ..."
    assert all(len(ln) > 40 for ln in lines[i:i + 2]), r.output


def test_an_unwritable_database_fails_before_the_search(monkeypatch, tmp_path):
    """Was: the whole search ran, then '[Errno 2] No such file or directory: ...'."""
    monkeypatch.setenv("COLUMNS", "250")
    blocker = tmp_path / "file"
    blocker.write_text("")                      # a file where the folder should be
    db = blocker / "sub" / "tuning.json"
    r = CliRunner().invoke(app, ["tune", "gemm", "--backend", "sim", "--shape", "8x8x8",
                                 "--budget", "1", "--db", str(db)])
    assert r.exit_code == 2, r.output
    assert f"cannot write the tuning database {db}" in r.output, r.output
    assert "best" not in r.output, r.output     # no candidate was timed
    r = CliRunner().invoke(app, ["tune", "--merge", str(db), "--db", str(db)])
    assert r.exit_code == 2


def test_tune_without_backend_ranks_by_the_model_off_a_mac_and_says_so(monkeypatch, tmp_path):
    """No Metal GPU: the default tunes (exit 0, an entry stored for the simulated device)
    ranked by the family's performance model, and says so in one line naming the backend."""
    from mpskern import backends
    if backends.availability("metal")[0]:
        pytest.skip("a Mac: the default is its GPU")
    monkeypatch.setenv("COLUMNS", "250")
    db = tmp_path / "t.json"
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(db))
    r = CliRunner().invoke(app, ["tune", "softmax", "--shape", "8x64", "--budget", "0.3",
                                 "--reps", "1"])
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.output.splitlines() if ln.startswith("no Metal GPU here")]
    assert len(said) == 1, r.output
    fam = backends.get("sim").info.get("family") or 8
    assert f"ranking by the model (--backend model-apple{fam}" in said[0]
    assert "not measurements" in said[0] and "simulator" in said[0]
    assert f"(model-apple{fam})" in r.output and "not measured" in r.output
    entries = json.loads(db.read_text())["entries"]     # tuned and stored, said to be modelled
    assert [e["op"] for e in entries] == ["softmax"], entries
    assert entries[0]["provenance"]["measured"] is False, entries
