"""The one way cli/ writes to the terminal (tests/test_cli_text.py keeps it so).

- No markup parsing: rich would read user text (a dtype, a shape, a path like
  'old[v2].jsonl', a results file's contents, an exception's message) as markup and drop
  or choke on it. Styles are given as Text spans instead (styled(), line()).
- Piped or written to a file, every message is one line, whatever COLUMNS says, because
  scripts grep it (rich's soft wrap). On a terminal rich folds every line at its width
  (words; a word longer than the width is cut), down to 20 columns. Tables fit the
  terminal (fit() lists their rows when they cannot; wide() for a pipe or a file).
- --help is click's plain layout (cli/app.py), folded at the terminal's width too; below
  40 columns each option's help goes under its names, and the usage line and an option's
  names ("-b, --backend <list[str]>") can be wider, as click never breaks them. check-msl prints a compiler's `file:line: message`
  lines (typer.echo), whole at any width: editors and grep parse them.
"""
import os
import sys

import typer
from rich.console import Console, Group
from rich.measure import Measurement
from rich.text import Text


BROKEN_PIPE = 128 + 13


def broken_pipe():
    """The reader of stdout went away (`mpskern selftest | head`): stop quietly with 141,
    the shell's status of a writer killed by SIGPIPE (what `yes | head` reports). rich and
    click said 1, which is selftest's "a check failed" and every command's failure. stdout
    goes to /dev/null first, so the interpreter's last flush has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(BROKEN_PIPE)


class _Console(Console):
    def on_broken_pipe(self):
        self.quiet = True
        broken_pipe()


def console(stderr=False, width=None):
    c = _Console(stderr=stderr, width=width, markup=False, highlight=False)
    c.soft_wrap = not c.is_terminal     # a terminal folds at its width; a pipe gets whole lines
    return c


def wide(width, stderr=False):
    """The terminal's console; piped or written to a file (or COLUMNS unset without a
    terminal), one `width` columns wide so tables keep whole cells."""
    c = console(stderr)
    return c if c.is_terminal else console(stderr, width=width)


def fit(con, table):
    """`table` when `con` is wide enough for it, else its rows as blocks of "column: value"
    lines, empty and "-" cells left out (a headerless table: "name: value" lines): narrower
    than its cells (a 40-column terminal) a table cuts every cell to "…", numbers included."""
    if Measurement.get(con, con.options.update(max_width=10**6), table).minimum <= con.width:
        return table
    cols = [(str(c.header), list(c.cells)) for c in table.columns]
    out = [Text(str(table.title), style="italic")] if table.title else []
    for r in range(table.row_count):
        cells = [(h, cs[r] if isinstance(cs[r], Text) else Text(str(cs[r]))) for h, cs in cols]
        if not table.show_header:
            out.append(Text(": ").join(v for _, v in cells if v.plain.strip()))
            continue
        for i, (h, v) in enumerate(cells):
            if v.plain.strip() not in ("", "-") or not i:
                out.append(Text.assemble("  " if i else "", (f"{h}: ", "bold"), v))
    return Group(*out)


def styled(text, style):
    return Text(str(text), style=style)


def progress_line(con, text):
    """`text` as one line of `con`'s width (cut with "…", padded over the last one) for a
    progress line ending in "\r": folded, its first row would stay on screen."""
    t = Text(str(text), no_wrap=True)
    t.truncate(con.width - 1, overflow="ellipsis", pad=True)
    return t


def line(*parts):
    """Text from parts: plain str, or (str, style)."""
    return Text.assemble(*[(str(p[0]), p[1]) if isinstance(p, tuple) else str(p) for p in parts])


def error(msg, code=2, con=None):
    """Print 'error: msg' on stderr (or `con`) and exit with `code`."""
    (con or console(stderr=True)).print(line(("error:", "bold red"), " ", msg))
    raise typer.Exit(code)


def warning(con, msg):
    con.print(line(("warning:", "yellow"), " ", msg))


def note(con, msg):
    con.print(line(("note:", "yellow"), " ", msg))


def interrupted(msg):
    """Ctrl-C: print 'interrupted: msg' (what was kept, what was not) on stderr, exit 130."""
    console(stderr=True).print(line(("interrupted:", "yellow"), " ", msg))
    raise typer.Exit(130)
