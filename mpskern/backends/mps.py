"""Backend "mps": Apple's Metal Performance Shaders primitives (objc/mk_mps*.m):
MPSMatrixMultiplication for gemm, MPSGraph for conv2d, pooling, softmax and the norms.

execute() wraps the numpy arrays as buffers of the Metal device (zero-copy where the
memory allows, see mpskern.empty), calls _native.mps_run (the op table's generic entry)
and records (gpu_ms, wall_ms) and what ran (the primitive, whether every array was used in
place, without a copy) for bench. Outputs and in-place inputs (batch_norm's running
stats) are wrapped writable: the shim writes them back.
Where MPS semantics differ from ours the shim computes ours or raises mpskern.Unsupported
(MK_ERR_UNSUPPORTED) with the reason; it never returns a silently different answer.
"""
import platform
import sys
import threading

from mpskern import _native
from mpskern._errors import BackendUnavailable
from mpskern.backends import mps_quirks
from mpskern.backends.base import Backend, device_info
from mpskern.memory import is_page_aligned

def unavailable_reason(native=_native):
    """Why mps cannot run here, or None if it can."""
    n, why = native.device_count("metal")
    if n > 0:
        return None
    if sys.platform != "darwin":
        return f"mps needs macOS on Apple silicon; this is {platform.system()} {platform.machine()}"
    return why or "no Metal device"


class MpsBackend(Backend):
    native = _native          # the Cython layer (tests substitute a fake)

    def __init__(self, name):
        super().__init__(name)
        self._device = None
        self._lock = threading.Lock()

    def availability(self):
        why = unavailable_reason(self.native)
        if why:
            return False, why
        routed = mps_quirks.summary()
        return True, f"Metal Performance Shaders on {self.info['name']}" + (f"; {routed}" if routed else "")

    @property
    def info(self):
        """The Metal device's (Backend.info): MPS runs on it."""
        return device_info(self.device)

    @property
    def device(self):
        """The Metal device (created on first use); BackendUnavailable says why not."""
        if self._device is None:
            with self._lock:
                if self._device is None:
                    why = unavailable_reason(self.native)
                    if why:
                        raise BackendUnavailable(f"backend 'mps' is unavailable: {why}")
                    self._device = self.native.Device("metal")
        return self._device

    def execute(self, kernel, args, dtype, *arrays):
        """mk_mps_<kernel> on `arrays` (ABI order, None for an absent one) wrapped as device
        buffers, the ones the kernel writes (_native.OPS[kernel].written: outputs, and
        batch_norm's running statistics) writable so the shim writes them back; records
        timing and what ran."""
        if kernel == "conv2d":
            quirk = mps_quirks.conv2d_quirk(args, dtype)
            if quirk is not None:    # a known MPSGraph bug on this macOS: mpskern's own kernels
                metal = self.routed_to()
                metal.execute(kernel, args, dtype, *arrays)
                self._record(metal.last_timing, dict(metal.last_config or {},
                                                     primitive=f"mpskern metal kernels (MPSGraph "
                                                               f"bug {quirk.name}, docs/macos.md)"))
                return
        row = _native.OPS[kernel]
        written = row.written
        if len(arrays) != len(written):
            raise TypeError(f"mps {kernel}: takes {len(written)} arrays "
                            f"({', '.join(row.arrays)}), got {len(arrays)}")
        dev = self.device
        bufs = [None if a is None else dev.wrap(a, w) for a, w in zip(arrays, written)]
        timing = self.native.mps_run(kernel, dev, args, dtype, *bufs)
        # MPSMatrix takes a buffer offset; MPSGraph does not, so the shim stages arrays that
        # do not start on a page boundary (mpskern.empty avoids that).
        in_place = all(b.zero_copy and (kernel == "gemm" or is_page_aligned(a))
                       for a, b in zip(arrays, bufs) if b is not None)
        self._record(timing, {"primitive": row.primitive, "zero_copy": in_place})

    def routed_to(self):
        """The backend that computes the cases MPSGraph gets wrong (mps_quirks)."""
        from mpskern import backends
        return backends.get("metal")
