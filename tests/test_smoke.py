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


def test_metal_unavailable_says_why_off_macos():
    import platform

    import pytest
    if sys.platform == "darwin":
        pytest.skip("the reason differs on macOS")
    ok, why = backends.availability("metal")
    assert not ok
    assert why.startswith(f"metal needs macOS on Apple silicon; this is {platform.system()}")
    with pytest.raises(mpskern.BackendUnavailable, match="metal needs macOS on Apple silicon"):
        mpskern.softmax(__import__("numpy").ones((2, 2), "float32"), backend="metal")
