"""The typer app every subcommand module registers on (kept apart from main.py so that
`python -m mpskern.cli.main` and the `mpskern` entry point see one app)."""
import functools

import typer

from mpskern import __version__


class _App(typer.Typer):
    """typer.Typer whose commands end a Ctrl-C the one way: 'interrupted: ...' on stderr,
    exit 130 (typer's own handler exits 130 silently). bench and tune say what they kept
    (tty.interrupted inside them); every other command writes its files whole or not at
    all (mpskern/atomic_write.py), so that is what it says."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)

        def decorator(f):
            @functools.wraps(f)
            def guarded(*a, **k):
                try:
                    return f(*a, **k)
                except KeyboardInterrupt:
                    from mpskern.cli import console as tty
                    tty.interrupted("stopped before the end; its output files are written "
                                    "whole or not at all, so none is partial")
            register(guarded)
            return f
        return decorator


# Plain click help and errors (rich_markup_mode=None): rich boxes usage errors in a panel
# hard-wrapped at the terminal width (scripts grep them) and cuts option help short with
# an ellipsis in narrow terminals; tracebacks of real bugs stay plain text too.
app = _App(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
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
