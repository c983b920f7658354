"""devices(): one record per backend, available or not (and why not)."""
import os
from dataclasses import dataclass
from typing import Optional

from mpskern import backends, peaks


@dataclass(frozen=True)
class Device:
    """What a backend runs on. family: the Apple GPU family number (7 = Apple7, M1 ...;
    None for the CPU or an unavailable GPU); memory: bytes (the GPU's recommended working
    set, or the system RAM for the CPU); peaks: FP32 GFLOP/s and memory GB/s from
    mpskern.peaks (a measured figure, else a public estimate), None where unknown."""
    name: str
    backend: str
    available: bool
    reason: str
    family: Optional[int] = None
    memory: Optional[int] = None
    peak_gflops_fp32: Optional[float] = None
    peak_gbps: Optional[float] = None


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
            dev, family, memory = peaks.cpu_device_name(), None, _ram()
        elif ok:  # mps runs on the Metal device
            info = backends.get("metal" if name == "mps" else name).info
            dev, family, memory = info["name"], info["family"], info["recommended_working_set"]
        else:
            dev, family, memory = name, None, None
        p = peaks.lookup(dev) if ok else None
        out.append(Device(dev, name, ok, why, family, memory,
                          p.fp32_gflops if p else None, p.gbps if p else None))
    return out
