"""The interface every backend implements. Arguments arrive validated: arrays are
C-contiguous numpy arrays of the op's dtype (float32/float16; per-channel vectors always
float32), `args` is a dict with exactly the fields of the op's struct in metal/mk_args.h,
`dtype` is _native.F32 / F16, outputs are preallocated. Methods fill the outputs and
return nothing; GPU backends leave (gpu_ms, wall_ms) of the last call in
`last_timing` (per thread) for the benchmark, and the kernel configuration they used in
`last_config`.
"""
import threading


class Backend:
    name = "?"

    def __init__(self, name):
        self.name = name
        self._tls = threading.local()

    # -- availability ---------------------------------------------------------------------
    def availability(self):
        """(available: bool, reason: str)."""
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

    # -- ops --------------------------------------------------------------------------------
    def gemm(self, args, dtype, A, B, C, out):
        raise NotImplementedError(f"{self.name}: gemm")

    def conv2d(self, args, dtype, x, w, bias, y):
        raise NotImplementedError(f"{self.name}: conv2d")

    def pool2d(self, args, dtype, x, y):
        raise NotImplementedError(f"{self.name}: pool2d")

    def softmax(self, args, dtype, x, y):
        raise NotImplementedError(f"{self.name}: softmax")

    def rownorm(self, args, dtype, x, weight, bias, y):
        raise NotImplementedError(f"{self.name}: rownorm")

    def group_norm(self, args, dtype, x, weight, bias, y):
        raise NotImplementedError(f"{self.name}: group_norm")

    def batch_norm(self, args, dtype, x, running_mean, running_var, weight, bias, y):
        raise NotImplementedError(f"{self.name}: batch_norm")
