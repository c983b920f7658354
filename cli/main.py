"""Entry point of the `mpskern` command: imports each subcommand module (each registers
itself on cli/app.py's app; import order = help order) and runs the app."""
from mpskern.cli.app import app
from mpskern.cli import devices  # noqa: F401
from mpskern.cli import tune  # noqa: F401
from mpskern.cli import bench  # noqa: F401
from mpskern.cli import report  # noqa: F401
from mpskern.cli import selftest  # noqa: F401
from mpskern.cli import check_msl  # noqa: F401
from mpskern.cli import profile  # noqa: F401


def main():
    app()


if __name__ == "__main__":
    main()
