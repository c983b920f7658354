"""Backend "mps": Apple's Metal Performance Shaders primitives (objc/mk_mps*.m).
SKELETON: availability only; the op calls land with the Objective-C shim issue."""
import platform
import sys

from mpskern import _native
from mpskern.backends.base import Backend


class MpsBackend(Backend):
    def availability(self):
        n, why = _native.device_count("metal")
        if n > 0:
            return True, "Metal Performance Shaders"
        if sys.platform != "darwin":
            return False, f"mps needs macOS on Apple silicon; this is {platform.system()} {platform.machine()}"
        return False, why


def create(name):
    return MpsBackend(name)
