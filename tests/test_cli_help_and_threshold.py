"""CLI details users see: help texts keep their bracketed defaults (rich would read
"[default: ...]" as markup and drop it), and report's --threshold refuses values that make
no sense (negative, nan) instead of a traceback or a silent no-op."""
import math

import pytest
from typer.testing import CliRunner

from mpskern.cli.main import app
from mpskern.report import compare as cmpmod

runner = CliRunner()


def _flat(text):
    """The help text without rich's box borders and line breaks."""
    return " ".join(text.replace("│", " ").split())


def test_bench_help_shows_defaults():
    out = _flat(runner.invoke(app, ["bench", "--help"]).output)
    assert "[default: float32]" in out
    assert "[default: every available one except sim" in out


def test_report_help_shows_default():
    out = _flat(runner.invoke(app, ["report", "--help"]).output)
    assert "[default: NEW of --compare, else the bench's default folder, results/]" in out


@pytest.mark.parametrize("bad", ["-1", "nan", "inf"])
def test_report_threshold_is_checked(bad, tmp_path):
    r = runner.invoke(app, ["report", "--compare", str(tmp_path), str(tmp_path),
                            "--threshold", bad, "-o", str(tmp_path / "out")])
    assert r.exit_code == 2
    assert "--threshold must be a finite fraction >= 0" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("bad", [-0.1, math.nan])
def test_compare_function_refuses_bad_threshold(bad):
    with pytest.raises(ValueError, match="threshold must be a finite fraction"):
        cmpmod.compare(None, None, bad)
