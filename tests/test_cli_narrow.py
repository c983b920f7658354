"""Every command's tables at any terminal width: narrower than a table's cells, the rows
come as "column: value" blocks (cli/console.py fit()), never cells cut to "…". A terminal
is emulated with rich's TTY_COMPATIBLE=1 (CliRunner's output is no terminal, so the
commands would print their wide, pipe form)."""
import re

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from mpskern.cli import console as tty
from mpskern.cli.main import app


def _terminal(args, columns):
    r = CliRunner().invoke(app, args, env={"COLUMNS": str(columns), "TTY_COMPATIBLE": "1",
                                           "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", r.stdout)      # styles only, no colour


def _readable(out, *words):
    # (messages are never hard-wrapped, by design: cli/console.py; the blocks' lines are short)
    assert "…" not in out, out
    for w in words:
        assert w in out, (w, out)


@pytest.mark.parametrize("columns", [40, 60])
def test_bench_table_in_a_narrow_terminal(columns):
    # at 40 columns every cell of the bench table was "…" (shape, dtype, backend, times)
    out = _terminal(["bench", "softmax", "--shape", "4,4", "--backend", "cpu", "--no-save"], columns)
    _readable(out, "shape: 4x4", "dtype: float32", "backend: cpu", "median ms: ", "max err: ")


def test_selftest_table_in_a_narrow_terminal():
    out = _terminal(["selftest", "-b", "cpu", "--op", "softmax", "-d", "float32", "--no-isolate"], 40)
    _readable(out, "op: softmax", "dtype: float32", "result: pass")


@pytest.mark.parametrize("columns", [40, 60])
def test_devices_in_a_narrow_terminal(columns):
    out = _terminal(["devices"], columns)
    _readable(out, "backend: cpu", "backend: sim", "available: yes")
    assert max(len(ln) for ln in out.splitlines()) <= columns, out


def test_fit_keeps_a_table_that_fits_and_lists_one_that_does_not():
    t = Table(title="t")
    for c in ("a", "b"):
        t.add_column(c)
    t.add_row("x" * 35, "-")
    t.add_row("x", tty.styled("y", "red"))
    wide = Console(width=120)
    assert tty.fit(wide, t) is t
    narrow = Console(width=40, record=True, color_system=None)
    narrow.print(tty.fit(narrow, t))
    text = narrow.export_text()
    assert text.splitlines() == ["t", "a: " + "x" * 35, "a: x", "  b: y"], text
