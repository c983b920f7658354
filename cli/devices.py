"""`mpskern devices`: every backend, available or not, and why."""
from rich.console import Console
from rich.table import Table

from mpskern import backends
from mpskern.cli.app import app


@app.command()
def devices():
    """List every backend: available or not, and why."""
    t = Table(title="mpskern backends")
    t.add_column("backend")
    t.add_column("available")
    t.add_column("details")
    for name in backends.NAMES:
        ok, why = backends.availability(name)
        t.add_row(name, "yes" if ok else "no", why)
    Console().print(t)
