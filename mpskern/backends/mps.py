"""Backend "mps": Apple's Metal Performance Shaders primitives (objc/mk_mps*.m):
MPSMatrixMultiplication for gemm, MPSGraph for conv2d, pooling, softmax and the norms.

Each op wraps its numpy arrays as buffers of the Metal device (zero-copy where the memory
allows, see mpskern.empty), calls _native.mps_<op> and records (gpu_ms, wall_ms) and what
ran (the primitive, whether every array was used in place, without a copy) for bench. Outputs and in-place
inputs (batch_norm's running stats) are wrapped writable: the shim writes them back.
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

# which buffers each primitive writes, in objc/mpskern.h's argument order (outputs, and
# batch_norm's running statistics, updated in place by training): the shim writes them back
WRITES = {"gemm": (0, 0, 0, 1), "conv2d": (0, 0, 0, 1), "pool2d": (0, 1), "softmax": (0, 1),
          "rownorm": (0, 0, 0, 1), "group_norm": (0, 0, 0, 1), "batch_norm": (0, 1, 1, 0, 0, 1),
          "attention": (0, 0, 0, 0, 1)}
PRIMITIVES = {
    "gemm": "MPSMatrixMultiplication",
    "conv2d": "MPSGraph convolution2D",
    "pool2d": "MPSGraph pooling2D",
    "softmax": "MPSGraph softMax",
    "rownorm": "MPSGraph normalization",
    "group_norm": "MPSGraph normalization",
    "batch_norm": "MPSGraph normalization",
    "attention": "MPSGraph attention (scaledDotProductAttention on macOS 15, else matmul/softmax)",
}


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

    def _run(self, op, fn, args, dtype, *arrays):
        """Call the native op with `arrays` (in the ABI's argument order, None for an absent
        one) wrapped as device buffers, the ones WRITES[op] marks writable; record timing
        and what ran."""
        dev = self.device
        bufs = [None if a is None else dev.wrap(a, w) for a, w in zip(arrays, WRITES[op])]
        timing = fn(dev, args, dtype, *bufs)
        # MPSMatrix takes a buffer offset; MPSGraph does not, so the shim stages arrays that
        # do not start on a page boundary (mpskern.empty avoids that).
        in_place = all(b.zero_copy and (op == "gemm" or is_page_aligned(a))
                       for a, b in zip(arrays, bufs) if b is not None)
        self._record(timing, {"primitive": PRIMITIVES[op], "zero_copy": in_place})

    # -- ops (backends/base.py) ------------------------------------------------------------
    def gemm(self, args, dtype, A, B, C, out):
        self._run("gemm", self.native.mps_gemm, args, dtype, A, B, C, out)

    def conv2d(self, args, dtype, x, w, bias, y):
        quirk = mps_quirks.conv2d_quirk(args, dtype)
        if quirk is not None:        # a known MPSGraph bug on this macOS: mpskern's own kernels
            metal = self.routed_to()
            metal.conv2d(args, dtype, x, w, bias, y)
            self._record(metal.last_timing, dict(metal.last_config or {},
                                                   primitive=f"mpskern metal kernels (MPSGraph bug "
                                                             f"{quirk.name}, docs/macos.md)"))
            return
        self._run("conv2d", self.native.mps_conv2d, args, dtype, x, w, bias, y)

    def routed_to(self):
        """The backend that computes the cases MPSGraph gets wrong (mps_quirks)."""
        from mpskern import backends
        return backends.get("metal")

    def pool2d(self, args, dtype, x, y):
        self._run("pool2d", self.native.mps_pool2d, args, dtype, x, y)

    def softmax(self, args, dtype, x, y):
        self._run("softmax", self.native.mps_softmax, args, dtype, x, y)

    def rownorm(self, args, dtype, x, weight, bias, y):
        self._run("rownorm", self.native.mps_rownorm, args, dtype, x, weight, bias, y)

    def group_norm(self, args, dtype, x, weight, bias, y):
        self._run("group_norm", self.native.mps_group_norm, args, dtype, x, weight, bias, y)

    def batch_norm(self, args, dtype, x, running_mean, running_var, weight, bias, y):
        self._run("batch_norm", self.native.mps_batch_norm, args, dtype, x, running_mean,
                  running_var, weight, bias, y)

    def attention(self, args, dtype, q, k, v, mask, out):
        self._run("attention", self.native.mps_attention, args, dtype, q, k, v, mask, out)
