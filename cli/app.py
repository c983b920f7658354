"""The typer app every subcommand module registers on (kept apart from main.py so that
`python -m mpskern.cli.main` and the `mpskern` entry point see one app)."""
import functools
import shutil

import typer
from typer.core import TyperCommand, TyperGroup

from mpskern import __version__, _cli_start


class _Context(TyperCommand.context_class):      # (typer >= 0.24 bundles its own click)
    """--help at the terminal's width (read now: COLUMNS or the terminal), 20 to 80 columns:
    click lays help out at least 50 columns wide, its option column up to 30 of them."""

    def make_formatter(self):
        width = min(max(shutil.get_terminal_size().columns - 1, 20), 80)
        f = self.formatter_class(width=width, max_width=width)
        write_dl = f.write_dl
        # the option column takes at most a third: its help keeps >= 2/3 of the width;
        # below 40 columns none (each help under its names): a third of 20 left click 10
        # columns of help, which cut words ('(repe' 'atable;')
        f.write_dl = lambda rows, col_max=30, col_spacing=2: write_dl(
            rows, min(col_max, width // 3 if width >= 40 else 0), col_spacing)
        return f


class _Command(TyperCommand):
    context_class = _Context


class _Group(TyperGroup):
    context_class = _Context


class _App(typer.Typer):
    """typer.Typer whose commands end a Ctrl-C the one way: 'interrupted: ...' on stderr,
    exit 130 (typer's own handler exits 130 silently). bench and tune say what they kept
    (tty.interrupted inside them); every other command writes its files whole or not at
    all (mpskern/atomic_write.py), so that is what it says. A closed stdout (`| head`)
    ends them quietly with 141 (console.broken_pipe)."""

    def command(self, *args, **kwargs):
        register = super().command(*args, cls=kwargs.pop("cls", _Command), **kwargs)

        def decorator(f):
            @functools.wraps(f)
            def guarded(*a, **k):
                _cli_start.app_interrupts()   # until here: 'interrupted: while starting'
                try:
                    return f(*a, **k)
                except KeyboardInterrupt:
                    from mpskern.cli import console as tty
                    tty.interrupted("stopped before the end; its output files are written "
                                    "whole or not at all, so none is partial")
                except BrokenPipeError:     # stdout's reader went away (typer.echo's writes)
                    from mpskern.cli import console as tty
                    tty.broken_pipe()
            register(guarded)
            return f
        return decorator


# Plain click help and errors (rich_markup_mode=None): rich boxes usage errors in a panel
# hard-wrapped at the terminal width (scripts grep them) and cuts option help short with
# an ellipsis in narrow terminals; tracebacks of real bugs stay plain text too.
app = _App(cls=_Group, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
           pretty_exceptions_enable=False,
           help="mpskern: run, tune and measure compute kernels on Apple GPUs from numpy.")


def _version(value: bool):
    if value:
        typer.echo(f"mpskern {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")):
    pass
