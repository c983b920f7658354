"""Backends "metal" and "sim": mpskern's MSL kernels (metal/) on a Metal device or on the
simulator. SKELETON: availability only; the op encoders land with the kernels issue."""
from mpskern import _native
from mpskern.backends.base import Backend


class GpuBackend(Backend):
    def availability(self):
        n, why = _native.device_count(self.name)
        return (n > 0), why


def create(name):
    return GpuBackend(name)
