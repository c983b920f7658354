import subprocess
import sys

import mpskern
from mpskern import backends


def test_version_and_backends():
    assert mpskern.__version__.count(".") == 2
    names = dict((n, backends.availability(n)) for n in backends.NAMES)
    assert names["cpu"][0] is True
    for n, (ok, why) in names.items():
        assert ok or why, f"{n} unavailable without a reason"


def test_cli_version():
    out = subprocess.run([sys.executable, "-m", "mpskern.cli.main", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"mpskern {mpskern.__version__}"
