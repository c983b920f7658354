"""Backend "cpu": mpskern's C kernels (objc/cpu/) through _native. The op methods are
the _native wrappers themselves (same signatures as backends/base.py), so a call costs
no extra Python frame: this is the per-call overhead floor of the whole library."""
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

    gemm = staticmethod(_native.cpu_gemm)              # (args, dtype, A, B, C, out)
    conv2d = staticmethod(_native.cpu_conv2d)          # (args, dtype, x, w, bias, y)
    pool2d = staticmethod(_native.cpu_pool2d)          # (args, dtype, x, y)
    softmax = staticmethod(_native.cpu_softmax)        # (args, dtype, x, y)
    rownorm = staticmethod(_native.cpu_rownorm)        # (args, dtype, x, weight, bias, y)
    group_norm = staticmethod(_native.cpu_group_norm)  # (args, dtype, x, weight, bias, y)
    batch_norm = staticmethod(_native.cpu_batch_norm)  # (args, dtype, x, rm, rv, w, b, y)
    attention = staticmethod(_native.cpu_attention)    # (args, dtype, q, k, v, mask, out)


def _ram():
    """The system's RAM in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
