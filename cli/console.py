"""The one way cli/ writes to the terminal (tests/test_cli_text.py keeps it so).

- No markup parsing: rich would read user text (a dtype, a shape, a path like
  'old[v2].jsonl', a results file's contents, an exception's message) as markup and drop
  or choke on it. Styles are given as Text spans instead (styled(), line()).
- No hard wrapping of messages: an error is one line at any terminal width, because scripts
  grep it. Tables still fit the terminal (wide() for a pipe or a file).
"""
import typer
from rich.console import Console, Group
from rich.measure import Measurement
from rich.text import Text


def console(stderr=False, width=None):
    return Console(stderr=stderr, width=width, markup=False, highlight=False, soft_wrap=True)


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
