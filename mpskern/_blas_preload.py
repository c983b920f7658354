"""Load the BLAS the extension links (scipy-openblas32 off macOS) before _native is
imported, so the dynamic loader finds it whatever rpath the build could record."""
import ctypes
import os
import sys

if sys.platform != "darwin":
    try:
        import scipy_openblas32 as _ob
        ctypes.CDLL(os.path.join(_ob.get_lib_dir(), _ob.get_library(fullname=True)),
                    mode=ctypes.RTLD_GLOBAL)
    except (ImportError, OSError):  # the rpath may still find it; _native's import says if not
        pass
