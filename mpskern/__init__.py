"""mpskern: compute kernels for Apple GPUs, called from numpy.

Backends: "cpu" (our C kernels), "metal" (our MSL kernels on the GPU), "mps" (Apple's
Metal Performance Shaders), "sim" (our MSL kernels in the CPU simulator), "auto".
"""
from mpskern import _cli_start

_cli_start.quiet_interrupts()  # the mpskern command: Ctrl-C while it starts is one line, 130
from mpskern._version import __version__
from mpskern._errors import (BackendUnavailable, KernelCheckError, KernelCompileError,
                             KernelError, MpskernError, Unsupported)
from mpskern import env as _env

_env.check_at_import()        # every MPSKERN_* variable: a bad value is one clear error now
from mpskern import _blas_preload  # noqa: F401  (loads OpenBLAS before _native)
from mpskern import _unbuilt

_unbuilt.require_native()     # a source checkout without its extension: one error saying why
from mpskern.ops import *  # noqa: F401,F403  (the public ops: mpskern/ops/__init__.py's __all__)
from mpskern.memory import empty  # (page-aligned arrays: zero-copy on Metal)
from mpskern.threads import get_num_threads, set_num_threads  # noqa: F401
from mpskern.kernel import Kernel, metal_kernel  # noqa: F401  (users' own MSL kernels)
from mpskern.bench.measure import BenchmarkResult, benchmark  # noqa: F401  (timing your own code)
