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


# -- every command's output at 20 / 40 / 200 columns and with no terminal --------------------
def _sim():
    from mpskern import sim
    return sim.available()[0]


def _commands(tmp_path):
    """(name, args, needs the simulator) of one run of every command that prints."""
    rows = tmp_path / "bench.jsonl"
    r = CliRunner().invoke(app, ["bench", "softmax", "--shape", "4,4", "--backend", "cpu",
                                 "--budget", "0.05", "--out", str(rows)])
    assert r.exit_code == 0, r.output
    return [("devices", ["devices"], False),
            ("bench", ["bench", "softmax", "--shape", "4,4", "--backend", "cpu", "--no-save",
                       "--budget", "0.05"], False),
            ("selftest", ["selftest", "-b", "cpu", "--op", "softmax", "-d", "float32",
                          "--no-isolate"], False),
            ("report", ["report", str(rows), "-o", str(tmp_path / "rep")], False),
            ("profile", ["profile", "softmax", "--shape", "4,4"], "clang"),
            ("tune --show", ["tune", "gemm", "--backend", "sim", "--show"], True),
            ("bad --shape", ["bench", "softmax", "--shape", "4,,4"], False)]


def _fold_run(args, columns):
    env = {"NO_COLOR": "1", "TTY_COMPATIBLE": "1", "COLUMNS": str(columns)}
    r = CliRunner().invoke(app, args, env=env)
    assert r.exit_code in (0, 2), r.output
    return [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", t) for t in (r.stdout, r.stderr)]


@pytest.mark.parametrize("columns", [20, 40, 200])
def test_every_command_fits_the_terminal(columns, tmp_path):
    """On a terminal every line of every command, errors too, is folded at its width (before:
    `devices` printed 36-character lines at 20 columns, selftest's header 151 at 40).
    check-msl is left out: its `file:line: message` lines are a compiler's, for editors and
    grep (cli/console.py)."""
    from mpskern.sim import profile_build
    for name, args, needs in _commands(tmp_path):
        if needs and not _sim() or needs == "clang" and profile_build.clang()[0] is None:
            continue
        out, err = _fold_run(args, columns)
        assert out.strip() or err.strip(), name
        for text in (out, err.replace("\r", "\n")):
            long = [ln for ln in text.splitlines() if len(ln) > columns]
            assert not long, (name, columns, long)


def test_piped_output_is_whole_lines(tmp_path):
    """No terminal (COLUMNS unset, or set): an error is one line (scripts grep it), the
    devices reasons too; tables keep whole cells."""
    for columns in (None, "20"):
        r = CliRunner().invoke(app, ["bench", "softmax", "--shape", "4,,4"],
                               env={"COLUMNS": columns, "TTY_COMPATIBLE": None})
        assert r.exit_code == 2
        (line,) = r.stderr.splitlines()
        assert line.startswith("error: softmax: --shape '4,,4' has an empty value"), line
        r = CliRunner().invoke(app, ["devices"], env={"COLUMNS": columns,
                                                      "TTY_COMPATIBLE": None})
        assert "…" not in r.stdout and any(ln.startswith("sim: ") or "| sim" in ln or
                                           ln.lstrip("│ ").startswith("sim ")
                                           for ln in r.stdout.splitlines()), r.stdout


@pytest.mark.parametrize("columns", [20, 40, 60, 200])
def test_help_fits_the_terminal(columns):
    """--help is folded at the terminal's width (click's minimum was 50 columns, its option
    column 30). Narrower than 40 columns the usage line and an option's names (e.g.
    '-b, --backend <list[str]>', which click never breaks) may be wider: those lines only."""
    for cmd in ([], ["bench"], ["tune"], ["profile"], ["selftest"], ["devices"], ["check-msl"],
                ["report"]):
        r = CliRunner().invoke(app, cmd + ["--help"], env={"COLUMNS": str(columns)},
                               prog_name="mpskern")
        assert r.exit_code == 0, r.output
        long = [ln for ln in r.output.splitlines() if len(ln) > columns]
        if columns >= 40:
            assert not long, (cmd, long)
        else:
            assert all(len(ln) <= columns + 20 for ln in long), (cmd, long)
