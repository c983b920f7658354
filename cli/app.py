"""The typer app every subcommand module registers on (kept apart from main.py so that
`python -m mpskern.cli.main` and the `mpskern` entry point see one app)."""
import typer

from mpskern import __version__

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="mpskern: run, tune and measure compute kernels on Apple GPUs from numpy.")


def _version(value: bool):
    if value:
        typer.echo(f"mpskern {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")):
    pass
