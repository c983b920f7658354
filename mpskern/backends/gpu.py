"""Backends "metal" and "sim": mpskern's MSL kernels (metal/) on a Metal device or in the
simulator. Both go through the same code: compile (Metal: at run time from source; sim:
mpskern.sim's front-end + host compiler), a pipeline cache keyed by (source, kernel,
macros, check), buffers wrapped around numpy memory, dispatch lists run in one command
buffer. The per-op encoders (which kernel, which tile configuration, which grid) live in
mpskern/gpu_ops/<op>.py and call `pipeline`, `wrap` and `run` below.
"""
import hashlib
import importlib
import platform
import sys
import threading

from mpskern import _native
from mpskern.backends.base import Backend
from mpskern.paths import metal_source


class GpuBackend(Backend):
    def __init__(self, name):
        super().__init__(name)
        self._device = None
        self._pipelines = {}
        self._libraries = {}
        self._lock = threading.RLock()
        self._check = False

    def availability(self):
        n, why = _native.device_count(self.name)
        if n > 0:
            return True, self.device.info()["name"]
        if self.name == "metal" and sys.platform != "darwin":   # the C reason is about the build
            why = (f"metal needs macOS on Apple silicon; this is {platform.system()} "
                   f"{platform.machine()} (mpskern's Metal kernels run here in the simulator: "
                   f"backend='sim')")
        return False, why

    @property
    def device(self):
        """The _native.Device (created on first use)."""
        if self._device is None:
            with self._lock:
                if self._device is None:
                    self._device = _native.Device(self.name)
        return self._device

    @property
    def info(self):
        return self.device.info()

    def set_sim_options(self, **options):
        """Simulator options (see _native.Device.set_sim_options: check_mode, order, seed,
        workers, family, limits). check_mode=True also makes later pipelines compile with
        the checking instrumentation, so every op runs checked until it is turned off."""
        self.device.set_sim_options(**options)
        self._check = bool(options.get("check_mode", False)) and self.name == "sim"

    def pipeline(self, kernel, *, file=None, source=None, macros=None, check=None):
        """A compiled pipeline for `kernel` from a metal/ file (e.g. "gemm.metal") or from
        MSL `source` text, with preprocessor `macros`; cached. check=None follows
        set_sim_options(check_mode=...)."""
        if check is None:
            check = self._check
        if (file is None) == (source is None):
            raise ValueError("give exactly one of file= or source=")
        if file is not None:
            source = metal_source(file)
        macros = {k: macros[k] for k in sorted(macros or {})}
        key = (hashlib.sha1(source.encode()).hexdigest(), kernel, tuple(macros.items()),
               bool(check) and self.name == "sim")
        p = self._pipelines.get(key)
        if p is None:
            with self._lock:
                p = self._pipelines.get(key)
                if p is None:
                    # one library per (source, macros, check): a file's kernels share it
                    lkey = (key[0],) + key[2:]
                    lib = self._libraries.get(lkey)
                    if lib is None:
                        if self.name == "sim":
                            from mpskern import sim
                            lib = self.device.library_load(
                                sim.build_library(source, macros, check=key[3], origin=file))
                        else:
                            lib = self.device.library_from_source(source, macros)
                        self._libraries[lkey] = lib
                    p = lib.pipeline(kernel)
                    self._pipelines[key] = p
        return p

    def wrap(self, array, writable=False):
        return self.device.wrap(array, writable)

    def run(self, dispatches, config=None):
        """Run dispatch dicts (see _native.Device.run) in one command buffer; records
        (gpu_ms, wall_ms) and the configuration for bench."""
        t = self.device.run(dispatches)
        if isinstance(config, dict):
            config = dict(config, zero_copy=_zero_copy(dispatches))
        self._record(t, config)
        return t


    # -- ops: each delegates to its encoder in mpskern/gpu_ops/<module>.py -----------------
    def _encoder(self, module, op):
        try:
            return importlib.import_module(f"mpskern.gpu_ops.{module}")
        except ModuleNotFoundError as e:
            if e.name != f"mpskern.gpu_ops.{module}":
                raise
            raise NotImplementedError(f"backend {self.name!r} has no GPU kernels for {op} yet "
                                      f"(mpskern/gpu_ops/{module}.py); use backend='cpu'") from None

    def gemm(self, args, dtype, A, B, C, out):
        self._encoder("gemm", "gemm").gemm(self, args, dtype, A, B, C, out)

    def conv2d(self, args, dtype, x, w, bias, y):
        self._encoder("conv2d", "conv2d").conv2d(self, args, dtype, x, w, bias, y)

    def pool2d(self, args, dtype, x, y):
        self._encoder("pool", "pool2d").pool2d(self, args, dtype, x, y)

    def softmax(self, args, dtype, x, y):
        self._encoder("softmax", "softmax").softmax(self, args, dtype, x, y)

    def rownorm(self, args, dtype, x, weight, bias, y):
        self._encoder("norm", "rownorm").rownorm(self, args, dtype, x, weight, bias, y)

    def group_norm(self, args, dtype, x, weight, bias, y):
        self._encoder("norm", "group_norm").group_norm(self, args, dtype, x, weight, bias, y)

    def batch_norm(self, args, dtype, x, running_mean, running_var, weight, bias, y):
        self._encoder("norm", "batch_norm").batch_norm(self, args, dtype, x, running_mean,
                                                      running_var, weight, bias, y)


def _zero_copy(dispatches):
    """Whether every numpy array the dispatches bind was used in place (no staging copy);
    device scratch buffers and constant bytes do not count."""
    bufs = [b[0] if isinstance(b, tuple) else b
            for d in dispatches for b in d["bindings"]]
    host = [b for b in bufs if isinstance(b, _native.Buffer) and b.array is not None]
    return all(b.zero_copy for b in host)


def create(name):
    return GpuBackend(name)
