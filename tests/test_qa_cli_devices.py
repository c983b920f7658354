"""QA regression: `mpskern devices` fits the terminal (it always printed 160-column lines,
which an 80-column terminal wraps into an unreadable grid); piped output stays wide."""
import subprocess
import sys

from typer.testing import CliRunner

from mpskern import backends
from mpskern.cli.main import app


def test_devices_fits_80_columns_with_reasons_below(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = CliRunner().invoke(app, ["devices"])
    assert r.exit_code == 0, r.output
    assert max(len(ln) for ln in r.output.splitlines()) <= 80, r.output
    for name in backends.NAMES:
        ok, why = backends.availability(name)
        assert f"{name}: {why.split()[0]}" in r.output, r.output


def test_devices_piped_keeps_whole_lines():
    env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "mpskern.cli.main", "devices"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "details" in out and max(len(ln) for ln in out.splitlines()) > 80

