"""Backend registry: names, availability (with the reason when unavailable), resolution
of "auto". Ops call `get(name)` and then the backend's method for the op.

    cpu    mpskern's CPU kernels (C)                      everywhere
    metal  mpskern's MSL kernels on the Apple GPU          macOS, Apple silicon
    mps    Apple's Metal Performance Shaders primitives    macOS, Apple silicon
    sim    mpskern's MSL kernels in the CPU simulator      everywhere with a C++ compiler
    auto   metal where available, else cpu
"""
import importlib
import threading

from mpskern._errors import BackendUnavailable

NAMES = ("cpu", "metal", "mps", "sim")
_MODULES = {"cpu": "mpskern.backends.cpu", "metal": "mpskern.backends.gpu",
            "mps": "mpskern.backends.mps", "sim": "mpskern.backends.gpu"}
_cache = {}
_lock = threading.Lock()


def _instance(name):
    be = _cache.get(name)
    if be is None:
        with _lock:
            be = _cache.get(name)
            if be is None:
                be = importlib.import_module(_MODULES[name]).create(name)
                _cache[name] = be
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
