"""mpskern: compute kernels for Apple GPUs, called from numpy.

Backends: "cpu" (our C kernels), "metal" (our MSL kernels on the GPU), "mps" (Apple's
Metal Performance Shaders), "sim" (our MSL kernels in the CPU simulator), "auto".
"""
import os as _os

# A source checkout keeps the CLI in ../cli, installed as mpskern.cli by package_dir:
# map it the same way when running from the checkout (in-place build).
_cli_src = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "cli")
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "cli")) and _os.path.isfile(
        _os.path.join(_cli_src, "__init__.py")):
    import importlib.util as _ilu
    import sys as _sys
    _spec = _ilu.spec_from_file_location("mpskern.cli", _os.path.join(_cli_src, "__init__.py"),
                                         submodule_search_locations=[_cli_src])
    _sys.modules["mpskern.cli"] = _ilu.module_from_spec(_spec)
    _spec.loader.exec_module(_sys.modules["mpskern.cli"])

from mpskern._version import __version__
from mpskern._errors import (BackendUnavailable, KernelCheckError, KernelCompileError,
                             KernelError, MpskernError, Unsupported)
from mpskern import _blas_preload  # noqa: F401  (loads OpenBLAS before _native)
from mpskern.ops import *  # noqa: E402,F401,F403  (the public ops: mpskern/ops/__init__.py's __all__)
from mpskern.memory import empty  # noqa: E402  (page-aligned arrays: zero-copy on Metal)
from mpskern.threads import get_num_threads, set_num_threads  # noqa: E402,F401
from mpskern.kernel import Kernel, metal_kernel  # noqa: E402,F401  (users' own MSL kernels)
