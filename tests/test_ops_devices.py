"""mpskern.devices() and `mpskern devices`: every backend listed, available or not, with
a reason; the cpu backend is always there."""
import subprocess
import sys

import mpskern
from mpskern import backends


def test_devices_lists_every_backend_with_a_reason():
    devs = mpskern.devices()
    assert [d.backend for d in devs] == list(backends.NAMES)
    for d in devs:
        assert isinstance(d, mpskern.Device)
        assert d.available == backends.availability(d.backend)[0]
        assert d.reason, f"{d.backend} has no reason"
        if not d.available:
            assert d.family is None and d.peak_gflops_fp32 is None
    cpu = devs[0]
    assert cpu.available and cpu.name and cpu.family is None
    assert cpu.memory is None or cpu.memory > 2 ** 26


def test_gpu_devices_report_their_family():
    for d in mpskern.devices():
        if d.available and d.backend in ("metal", "sim"):
            assert d.family in (7, 8, 9, 10), d


def test_cli_devices_table():
    out = subprocess.run([sys.executable, "-m", "mpskern.cli.main", "devices"], capture_output=True,
                         text=True, check=True).stdout
    for name in backends.NAMES:
        assert name in out
    assert "metal" in out and ("yes" in out)
