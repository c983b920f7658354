"""--help in narrow terminals (20-39 columns) keeps every word of each option's help whole:
the help goes under the option's names there, so click's column is the width less 4, not
the 10 columns a third-width option column left it at 20 (which cut '(repeatable;' into
'(repe' + 'atable;')."""
import re

import pytest
import typer
from typer.testing import CliRunner

from mpskern.cli.main import app


def _commands():
    group = typer.main.get_command(app)
    return [(name, group.commands[name]) for name in sorted(group.commands)]


@pytest.mark.parametrize("columns", [20, 30, 39])
def test_option_help_words_stay_whole(columns):
    width = columns - 1 if columns > 20 else 20         # cli/app.py's layout width
    checked = 0
    for name, cmd in _commands():
        r = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": str(columns)},
                               prog_name="mpskern")
        assert r.exit_code == 0, r.output
        # a hyphen is where click may break a word ('model-' + 'apple7'): joined again
        words = set(re.sub(r"-\s+", "-", " ".join(r.output.split())).split())
        for p in cmd.params:
            for w in (getattr(p, "help", None) or "").split():
                if len(w) <= width - 4:                  # longer words cannot fit whole
                    assert w in words, (name, p.name, w, r.output)
                    checked += 1
    assert checked > 100
