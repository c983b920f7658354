"""Backend registry: names, availability (with the reason when unavailable), resolution
of "auto". Ops call `get(name)` and then the backend's method for the op.

    cpu    mpskern's CPU kernels (C)                      everywhere
    metal  mpskern's MSL kernels on the Apple GPU          macOS, Apple silicon
    mps    Apple's Metal Performance Shaders primitives    macOS, Apple silicon
    sim    mpskern's MSL kernels in the CPU simulator      everywhere with a C++ compiler
    auto   metal where available, else cpu
"""
import threading

from mpskern._errors import BackendUnavailable

NAMES = ("cpu", "metal", "mps", "sim")
_cache = {}
_lock = threading.Lock()


def _create(name):
    """A new backend object. Each class is imported when first asked for, so a program
    that only runs on the CPU never loads the GPU path (its compilers, the tuning code)."""
    if name == "cpu":
        from mpskern.backends.cpu import CpuBackend
        return CpuBackend(name)
    if name == "mps":
        from mpskern.backends.mps import MpsBackend
        return MpsBackend(name)
    from mpskern.backends.gpu.backend import GpuBackend    # "metal" and "sim"
    return GpuBackend(name)


def _instance(name):
    be = _cache.get(name)
    if be is None:
        with _lock:
            be = _cache.get(name)
            if be is None:
                be = _cache[name] = _create(name)
    return be


def availability(name):
    """(available, reason) for a backend name; reason says why not, or what it runs on."""
    return _instance(name).availability()


def get(name="auto"):
    """The backend object for `name`; raises ValueError for an unknown name and
    BackendUnavailable (saying why) for one this machine lacks."""
    if not isinstance(name, str) or (name != "auto" and name not in NAMES):
        raise ValueError(f"backend={name!r} is not a backend; use one of "
                         f"{', '.join(('auto',) + NAMES)}")
    if name == "auto":
        ok, _ = availability("metal")
        name = "metal" if ok else "cpu"
    be = _instance(name)
    ok, why = be.availability()
    if not ok:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {why}")
    return be


def available():
    """Names of the backends this machine can run."""
    return [n for n in NAMES if availability(n)[0]]
