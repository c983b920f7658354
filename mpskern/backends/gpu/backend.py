"""Backends "metal" and "sim": mpskern's MSL kernels (metal/) on a Metal device or in the
simulator. execute(kernel, ...) hands the device's Context (context.py: compiling, the pipeline
cache, buffers, running) to the kernel family's encode() (mpskern/backends/family.py: each
family, declared beside its public op, calls its encoder module gemm.py, conv2d.py, pool.py,
softmax.py, norm.py, ...), which picks the kernel, the tile configuration and the grid, and
returns (timing, record) for last_timing / last_config.
"""
import platform
import sys

from mpskern import _native
from mpskern._errors import Unsupported
from mpskern.backends import family
from mpskern.backends.base import Backend
from mpskern.backends.gpu.context import Context


class GpuBackend(Backend):
    def __init__(self, name):
        super().__init__(name)
        self._ctx = Context(name)

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
        return self._ctx.native

    @property
    def info(self):
        return self._ctx.limits

    def set_sim_options(self, **options):
        """See Context.set_sim_options (check_mode, order, seed, workers, family, limits)."""
        self._ctx.set_sim_options(**options)

    # -- users' own kernels (mpskern.kernel) -------------------------------------------------
    def pipeline(self, kernel, *, file=None, source=None, macros=None, check=None, profile=None):
        """A compiled pipeline from a metal/ file or MSL `source` (cached; Context.compiled)."""
        return self._ctx.compiled(kernel, file, macros, source=source, check=check,
                                  profile=profile)

    def wrap(self, array, writable=False):
        return self._ctx.buffer(array, writable)

    def run(self, dispatches, time_limit=None):
        """Run dispatch dicts in one command buffer; records (gpu_ms, wall_ms) for
        last_timing. time_limit: seconds (sim)."""
        return self._keep(self._ctx.submit(dispatches, time_limit=time_limit))

    def _keep(self, reported):
        """Keep what an encoder reports, (timing, record), for last_timing / last_config."""
        timing, record = reported
        self._record(timing, record)
        return timing

    # -- ops (backends/base.py); `config` pins a configuration of the op's tuning space ------
    def execute(self, kernel, args, dtype, *arrays, config=None):
        fam = family.get(kernel)
        if fam is None:
            raise Unsupported(f"backend {self.name!r} has no {kernel} kernel; use backend='cpu'")
        return self._keep(fam.encode(self._ctx, args, dtype, *arrays, config=config))

