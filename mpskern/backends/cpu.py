"""Backend "cpu": mpskern's C kernels (objc/cpu/) through _native. execute is
_native.cpu_run itself (the op table's generic entry, same signature as backends/base.py),
so a call costs no extra Python frame: this is the per-call overhead floor of the whole
library."""
import os

from mpskern import _native, peaks
from mpskern.backends.base import Backend


class CpuBackend(Backend):
    def availability(self):
        return True, f"mpskern C kernels, {_native.cpu_get_num_threads()} thread(s)"

    @property
    def info(self):
        return {"name": peaks.cpu_device_name(), "family": 0, "memory": _ram(),
                "threads": _native.cpu_get_num_threads()}

    # the native op table's generic entry itself (_native.cpu_run(kernel, args, dtype,
    # *arrays)): a public op's call reaches C with no Python frame in between
    execute = staticmethod(_native.cpu_run)


def _ram():
    """The system's RAM in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
