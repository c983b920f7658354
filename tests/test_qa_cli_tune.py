"""QA regressions: `mpskern tune` names the bad option (not a numpy/internal message) for
out-of-range --dtype/--stride/--padding/--reps, before any search starts."""
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
