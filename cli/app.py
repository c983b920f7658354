"""The typer app every subcommand module registers on (kept apart from main.py so that
`python -m mpskern.cli.main` and the `mpskern` entry point see one app)."""
import typer

from mpskern import __version__

# Plain click help and errors (rich_markup_mode=None): rich boxes usage errors in a panel
# hard-wrapped at the terminal width (scripts grep them) and cuts option help short with
# an ellipsis in narrow terminals; tracebacks of real bugs stay plain text too.
app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
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
