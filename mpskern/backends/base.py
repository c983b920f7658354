"""The interface every backend implements. Arguments arrive validated: arrays are
C-contiguous numpy arrays of the op's dtype (float32/float16; per-channel vectors always
float32), `args` is a dict with exactly the fields of the op's struct in metal/mk_args.h,
`dtype` is _native.F32 / F16, outputs are preallocated. execute() fills the outputs;
GPU backends leave (gpu_ms, wall_ms) of the last call in `last_timing` (per thread) for
the benchmark, and the kernel configuration they used in `last_config`. An op a backend
cannot run for valid arguments raises mpskern.Unsupported saying why.
"""
import threading

from mpskern._errors import Unsupported


class Backend:
    name = "?"

    def __init__(self, name):
        self.name = name
        self._tls = threading.local()

    # -- what it is -------------------------------------------------------------------------
    def availability(self):
        """(available: bool, reason: str): what it runs on, or why it cannot run here."""
        raise NotImplementedError

    @property
    def info(self):
        """What it runs on, a dict: "name" (device name), "family" (Apple GPU family number,
        0 for the CPU), "memory" (bytes it can use: RAM, or the GPU's recommended working
        set), and on GPUs the device's limits (_native.Device.info())."""
        raise NotImplementedError

    # -- what the last call on this thread did (for bench) --------------------------------
    @property
    def last_timing(self):
        return getattr(self._tls, "timing", None)

    @property
    def last_config(self):
        return getattr(self._tls, "config", None)

    def _record(self, timing=None, config=None):
        self._tls.timing = timing
        self._tls.config = config

    # -- the one op entry ---------------------------------------------------------------------
    def execute(self, kernel, args, dtype, *arrays):
        """Run `kernel` (a row of the native op table, _native.OPS: "gemm", "softmax", ...)
        on `arrays` in the C ABI's order (None for an absent one; _native.OPS[kernel].arrays
        names them), `args` the fields of its struct. A backend without it says so."""
        raise Unsupported(f"backend {self.name!r} has no {kernel} kernel; use backend='cpu'")


def device_info(device):
    """Backend.info of a Metal (or simulated) _native.Device: its info() plus "memory",
    the recommended working set (metal, sim and mps all describe their device this way)."""
    info = device.info()
    info["memory"] = info.get("recommended_working_set")
    return info
