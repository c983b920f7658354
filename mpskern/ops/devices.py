"""devices(): one record per backend, available or not (and why not)."""
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


def devices():
    """A Device for each backend (cpu, metal, mps, sim), whether this machine can run it
    or not; `reason` says what it runs on, or why it is unavailable.

    Returns
    -------
    list of Device
        One per backend, in the order cpu, metal, mps, sim.

    Example
    -------
        for d in mk.devices():
            print(d.backend, d.available, d.reason)
    """
    out = []
    for name in backends.NAMES:
        ok, why = backends.availability(name)
        info = backends.get(name).info if ok else {}
        dev = info.get("name", name)
        p = peaks.lookup(dev) if ok else None
        out.append(Device(dev, name, ok, why, info.get("family") or None, info.get("memory"),
                          p.fp32_gflops if p else None, p.gbps if p else None))
    return out
