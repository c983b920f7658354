"""Backends "metal" and "sim": mpskern's MSL kernels (metal/) on a Metal device or in the
simulator. Both go through the same code: compile (Metal: at run time from source; sim:
mpskern.sim's front-end + host compiler), a pipeline cache keyed by (source, kernel,
macros, check), buffers wrapped around numpy memory, dispatch lists run in one command
buffer. Each op method hands an encode Context (context.py) to its encoder module
(gemm.py, conv2d.py, pool.py, softmax.py, norm.py), which picks the kernel, the tile
configuration and the grid, and returns (timing, record) for last_timing / last_config.
"""
import hashlib
import platform
import sys
import threading

from mpskern import _native
from mpskern.backends.base import Backend, device_info
from mpskern.backends.gpu import attention, conv2d, gemm, norm, pool, softmax
from mpskern.backends.gpu.context import Context
from mpskern.paths import metal_source


class GpuBackend(Backend):
    def __init__(self, name):
        super().__init__(name)
        self._device = None
        self._pipelines = {}
        self._libraries = {}
        self._lock = threading.RLock()
        self._check = False
        self._ctx = Context(self)

    def availability(self):
        n, why = _native.device_count(self.name)
        if n > 0:
            return True, self.info["name"]
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
        """The device's names and limits (a new _native.Device.info() dict each time:
        set_sim_options may change the simulated family and limits)."""
        return device_info(self.device)

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

    def run(self, dispatches, time_limit=None):
        """Run dispatch dicts (see _native.Device.run) in one command buffer (users' own
        kernels: mpskern.kernel); records (gpu_ms, wall_ms) for last_timing. time_limit:
        seconds (sim)."""
        t = self.device.run(dispatches, time_limit)
        self._record(t, None)
        return t

    def _encode(self, encoder, *args, config=None):
        """Run an encoder with this backend's Context; keep what it reports."""
        timing, record = encoder(self._ctx, *args, config=config)
        self._record(timing, record)
        return timing

    # -- ops (backends/base.py); `config` pins a configuration of the op's tuning space ------
    def gemm(self, args, dtype, A, B, C, out, config=None):
        return self._encode(gemm.gemm, args, dtype, A, B, C, out, config=config)

    def conv2d(self, args, dtype, x, w, bias, y, config=None):
        return self._encode(conv2d.conv2d, args, dtype, x, w, bias, y, config=config)

    def pool2d(self, args, dtype, x, y, config=None):
        return self._encode(pool.pool2d, args, dtype, x, y, config=config)

    def softmax(self, args, dtype, x, y, config=None):
        return self._encode(softmax.softmax, args, dtype, x, y, config=config)

    def rownorm(self, args, dtype, x, weight, bias, y, config=None):
        return self._encode(norm.rownorm, args, dtype, x, weight, bias, y, config=config)

    def group_norm(self, args, dtype, x, weight, bias, y, config=None):
        return self._encode(norm.group_norm, args, dtype, x, weight, bias, y, config=config)

    def batch_norm(self, args, dtype, x, running_mean, running_var, weight, bias, y,
                   config=None):
        return self._encode(norm.batch_norm, args, dtype, x, running_mean, running_var,
                            weight, bias, y, config=config)

    def attention(self, args, dtype, q, k, v, mask, out, config=None):
        return self._encode(attention.attention, args, dtype, q, k, v, mask, out, config=config)
