"""What the CLI prints is the user's text as given and never hard-wrapped (issue 15 items 8
and 15): rich markup in any argument, option or file ('[/red]', 'old[v2].jsonl') is shown
verbatim instead of a MarkupError traceback or vanishing; an error is one line at any
terminal width (scripts grep them), usage errors included; and cli/ writes only through
cli/console.py, which keeps it so."""
import ast
import json
import pathlib
import re

import pytest
from typer.testing import CliRunner

from mpskern.bench import schema
from mpskern.cli.main import app
from test_bench import fake_make

CLI_DIR = pathlib.Path(__file__).resolve().parent.parent / "cli"
MARKUP = "[/red]"
WIDTHS = ["40", "80", None]          # None: COLUMNS unset (no terminal: rich's 80)


def _invoke(args, columns):
    env = {"COLUMNS": columns} if columns else {"COLUMNS": None}
    return CliRunner().invoke(app, args, env=env)


def _error_line(r):
    """The one line of stderr that holds the error."""
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(("error:", "Error:"))]
    assert len(lines) == 1, f"expected one error line, got:\n{r.stderr}"
    return lines[0]


@pytest.fixture
def fakes(monkeypatch):
    from mpskern.bench import targets
    monkeypatch.setattr(targets, "make", fake_make)
    monkeypatch.setattr(targets, "default_names", lambda: ["cpu"])


# (argv, text that must appear verbatim in the error line)
CASES = [
    (["bench", "conv2d", "--no-save", "--dtype", MARKUP], f"--dtype '{MARKUP}'"),
    (["bench", "conv2d", "--no-save", "--shape", MARKUP], f"--shape '{MARKUP}'"),
    (["bench", "conv2d", "--no-save", "--backend", MARKUP], MARKUP),
    (["bench", "conv2d", "--no-save", "--preset", MARKUP], MARKUP),
    (["bench", "conv2d", "--no-save", "--budget", "nan"], "--budget must be > 0 seconds (and finite)"),
    (["bench", MARKUP], f"'{MARKUP}' is not one of"),                  # click's usage error
    (["report", "old[v2].jsonl"], "old[v2].jsonl"),
    (["report", "[bold]x[/bold].jsonl"], "[bold]x[/bold].jsonl"),
    (["tune", MARKUP], f"'{MARKUP}' is not a tunable op"),
    (["tune", "gemm", "--backend", "sim", "--dtype", MARKUP], f"--dtype '{MARKUP}'"),
    (["selftest", "--backend", MARKUP], MARKUP),
    (["selftest", "--op", MARKUP], MARKUP),
    (["selftest", "--dtype", MARKUP], MARKUP),
]


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("args,shown", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_user_text_is_shown_verbatim_on_one_line(fakes, args, shown, columns):
    r = _invoke(args, columns)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "MarkupError" not in r.output
    assert shown in _error_line(r)


def test_long_error_is_one_line_in_a_narrow_terminal(fakes, tmp_path):
    """The error of an unwritable --out names the path, far wider than 40 columns."""
    f = tmp_path / ("a-long-file-name-" * 4)
    f.write_text("x")
    r = _invoke(["bench", "conv2d", "--preset", "tiny", "--out", str(f / "sub")], "40")
    assert r.exit_code == 2
    line = _error_line(r)
    assert str(f / "sub") in line and "cannot append to" in line


def test_results_file_text_is_not_markup(tmp_path):
    """Case names come from a results file: a regression of a case named with markup is
    printed as it is."""
    rows = _rows_with_backend(f"x{MARKUP}")
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    schema.append_jsonl(old, rows)
    slow = [dict(r, median_ms=r["median_ms"] * 3, p10_ms=r["p90_ms"] * 2, p90_ms=r["p90_ms"] * 4)
            for r in rows]
    schema.append_jsonl(new, slow)
    r = _invoke(["report", "--compare", str(old), str(new), "-o", str(tmp_path / "rep")], "40")
    assert r.exit_code == 0, r.output
    assert f"x{MARKUP}" in r.stderr and "regression" in r.stderr
    html = (tmp_path / "rep" / "index.html").read_text()
    assert f"x{MARKUP}" in html                 # HTML-escaped only where needed ('[' is fine)


def _rows_with_backend(name):
    from mpskern import ops
    from mpskern.bench import runner
    from test_bench import FakeTarget
    cases = ops.get("softmax").preset("tiny")[:1]
    rows = runner.run("softmax", cases, ["float32"], [FakeTarget("cpu"), FakeTarget(name)],
                      budget=0.02)
    return json.loads(json.dumps(schema.clean(rows)))


# -- cli/ writes through cli/console.py only -----------------------------------------------
def _sources():
    return sorted(p for p in CLI_DIR.glob("*.py") if p.name != "console.py")


def test_cli_builds_no_console_of_its_own():
    """A rich Console made anywhere else would parse markup and wrap again."""
    for path in _sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
                assert name != "Console", f"{path.name}:{node.lineno}: use cli/console.py"
            if isinstance(node, ast.ImportFrom) and node.module == "rich.console":
                raise AssertionError(f"{path.name}:{node.lineno}: import cli/console.py instead")


def test_cli_sources_hold_no_markup():
    tag = re.compile(r"\[/?(red|green|yellow|bold|dim|italic|blue|cyan|magenta)\b[^\]]*\]|\[/\]")
    for path in _sources():
        for i, text in enumerate(path.read_text().splitlines(), 1):
            assert not tag.search(text), f"{path.name}:{i}: markup in {text.strip()!r}"


def test_help_is_whole_at_40_columns():
    """Option help wraps instead of being cut with an ellipsis (rich's panels did)."""
    r = _invoke(["bench", "--help"], "40")
    assert r.exit_code == 0 and "…" not in r.output
    flat = " ".join(r.output.split())
    assert "[default: every available one except sim, plus installed peers]" in flat
