"""devices(): one record per backend, available or not (and why not)."""
import os
import platform
from dataclasses import dataclass
from typing import Optional

from mpskern import backends


@dataclass(frozen=True)
class Device:
    """What a backend runs on. family is the Apple GPU family number (7 = Apple7 ...) or
    None for the CPU; memory in bytes (the GPU's recommended working set, or system RAM
    for the CPU); the peaks are None where no figure is known."""
    name: str
    backend: str
    available: bool
    reason: str
    family: Optional[int] = None
    memory: Optional[int] = None
    peak_gflops_fp32: Optional[float] = None
    peak_gbps: Optional[float] = None


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def devices():
    """A Device for each backend (cpu, metal, mps, sim), whether this machine can run it
    or not; `reason` says what it runs on, or why it is unavailable."""
    out = []
    for name in backends.NAMES:
        ok, why = backends.availability(name)
        if name == "cpu":
            out.append(Device(_cpu_name(), name, ok, why, memory=_ram()))
            continue
        info = {}
        if ok and name != "mps":
            info = backends.get(name).info
        elif ok:
            info = backends.get("metal").info
        out.append(Device(info.get("name", name), name, ok, why, family=info.get("family"),
                          memory=info.get("recommended_working_set")))
    return out
