"""Device peaks for "% of peak" and the roofline: FP32/FP16 FLOP/s and memory bandwidth,
each with its provenance.

Apple GPUs: public estimates (docs/design.md), GPU cores x 128 ALUs x 2 FLOP (FMA) x clock, and
the memory interface's bandwidth. The FP16 SIMD peak equals FP32 on Apple7-9; Apple10 (M5)
adds matrix units whose FP16 peak is not published, so it is left unknown.

CPUs: no table (too many parts); `measure_cpu()` measures what numpy's BLAS sgemm and a
large array copy reach on this machine. Measured peaks are saved per device in the user's
cache (peaks.json) and replace estimates: `lookup()` prefers them.
"""
import json
import os
import platform
import time
from dataclasses import asdict, dataclass

from mpskern import env
from mpskern.atomic_write import atomic_write

ESTIMATE = "public estimate: GPU cores x 128 ALUs x 2 x clock; memory interface bandwidth"


@dataclass(frozen=True)
class Peak:
    fp32_gflops: float
    fp16_gflops: float          # None where unknown
    gbps: float
    source: str                 # provenance: how the numbers were obtained
    measured: bool = False

    def gflops(self, dtype):
        return self.fp16_gflops if str(dtype) == "float16" else self.fp32_gflops

    def as_dict(self):
        return asdict(self)


# ---------------------------------------------------------------- Apple GPUs
# One row per chip: GPU family, GPU cores, GPU clock (GHz), memory bandwidth (GB/s). Every
# figure below derives from these and FAMILIES (the per-core rates), so they live here once.
MB = "philipturner/metal-benchmarks README (commit dc2adc6, 2023): GPU table (GHz, cores)"
DERIVED = ("clock not published: implied by the public FP32 estimate of DESIGN.md "
           "(TFLOPS / (cores x 256 FLOP/cycle))")


@dataclass(frozen=True)
class Chip:
    name: str                   # MTLDevice.name
    family: int                 # Metal GPU family (Apple<N>)
    cores: int
    ghz: float
    gbps: float                 # memory interface bandwidth
    source: str                 # where the clock and core count come from

    @property
    def fp32_gflops(self):      # 128 FMA lanes per core, 2 FLOPs each
        return self.cores * 256 * self.ghz


def _chip(name, family, cores, ghz, gbps, source=MB):
    return Chip(name, family, cores, ghz, float(gbps), source)


def _tf(tflops, cores):
    return round(tflops / (cores * 0.256), 4)


CHIPS = {c.name: c for c in (
    _chip("Apple M1", 7, 8, 1.278, 68), _chip("Apple M1 Pro", 7, 16, 1.296, 205),
    _chip("Apple M1 Max", 7, 32, 1.296, 410), _chip("Apple M1 Ultra", 7, 64, 1.296, 819),
    _chip("Apple M2", 8, 10, 1.398, 102), _chip("Apple M2 Pro", 8, 19, 1.398, 205),
    _chip("Apple M2 Max", 8, 38, 1.398, 410), _chip("Apple M2 Ultra", 8, 76, 1.398, 819),
    _chip("Apple M3", 9, 10, _tf(3.5, 10), 102, DERIVED),
    _chip("Apple M3 Pro", 9, 18, _tf(6.4, 18), 154, DERIVED),
    _chip("Apple M3 Max", 9, 40, _tf(14.1, 40), 410, DERIVED),
    _chip("Apple M4", 9, 10, _tf(3.5, 10), 120, DERIVED),
    _chip("Apple M4 Pro", 9, 20, _tf(7.1, 20), 273, DERIVED),
    _chip("Apple M4 Max", 9, 40, _tf(14.1, 40), 546, DERIVED),
    # M5: 10 GPU cores with a Neural Accelerator each, 153 GB/s (Apple newsroom, 2025-10-15)
    _chip("Apple M5", 10, 10, _tf(4.0, 10), 154, DERIVED),
)}
# the chip each family's model stands for when none is named (the base chip)
FAMILY_CHIP = {7: "Apple M1", 8: "Apple M2", 9: "Apple M3", 10: "Apple M5"}


def _est(chip):
    tflops = round(chip.fp32_gflops / 100) / 10       # DESIGN.md's published precision
    # Apple10 adds matrix units whose FP16 peak is not published
    return Peak(tflops * 1e3, tflops * 1e3 if chip.family < 10 else None, chip.gbps, ESTIMATE)


# Keys are Metal device names (MTLDevice.name), matched longest first.
TABLE = {name: _est(c) for name, c in CHIPS.items()}

# Per-core rates of each GPU family, for the performance model (mpskern/profiling/model.py).
# Cycles are per SIMD-group instruction on one of a core's 4 schedulers (issue slots).
# MB: metal-benchmarks (above; M1 Max and A15 measurements: "Apple 7, 8"); ASSUMED: no
# public measurement, mpskern's assumption until calibration (`mpskern selftest
# --calibrate` on a Mac) measures it.
MB_OPS = MB.replace("GPU table (GHz, cores)", "Operations per Second, Instruction Throughputs")
MB_MEM = MB.replace("GPU table (GHz, cores)", "On-Chip Memory")
MB_ILP = MB.replace("GPU table (GHz, cores)", "ALU Bottlenecks (FFMA32, ILP = 4 table)")
ASSUMED = "assumed (not published; calibration replaces it)"
TECH_TALK_M3 = ("Apple tech talk 'Explore GPU advancements in M3 and A17 Pro' (2023): dynamic "
                "caching, flexible on-chip memory, FP32/FP16/integer pipelines in parallel")


@dataclass(frozen=True)
class Family:
    family: int
    schedulers: int = 4                   # SIMD-group instructions issued per core-cycle
    cycles: tuple = ()                    # (operation, scheduler cycles per SIMD-group instruction)
    int_parallel: bool = False            # integer ops issue beside floating point
    threadgroup_bytes_per_cycle: int = 128    # per core: 32 banks x 4 B, one word per bank
    banks: int = 32
    bank_bytes: int = 4
    threadgroup_memory_per_core: int = 60 * 1024
    max_threads_per_core: int = 3072
    register_file: int = 208 * 1024       # bytes per core
    l1_bytes_per_cycle: int = 64          # per core
    l2_bytes_per_cycle: int = 32          # per core (the core's I/O bus)
    line_bytes: int = 128
    launch_us: float = 5.0                # per dispatch, GPU side
    occupancy: tuple = ((4, 0.37), (8, 0.64), (24, 0.95), (88, 1.0))   # SIMD-groups/core -> ALU efficiency
    sources: tuple = ()                   # (field, provenance)

    def cost(self, op):
        return dict(self.cycles)[op]

    def source(self, field):
        return dict(self.sources).get(field, ASSUMED)


_CYCLES_7 = (
    ("fadd", 1), ("fmul", 1), ("ffma", 1), ("fother", 1), ("fdiv", 6), ("conv", 4),
    ("exp", 4), ("exp2", 4), ("log", 4), ("log2", 4), ("sqrt", 8), ("rsqrt", 8), ("sin", 14.3),
    ("cos", 14.3), ("tanh", 12), ("pow", 12), ("special", 8),
    ("iop", 1), ("idiv_const", 8), ("idiv", 40),
    ("simd_reduce", 14.5), ("simd_shuffle", 2), ("mma_float", 18), ("mma_half", 17),
    ("memory", 1), ("barrier", 4),
)
_SOURCES_7 = (
    ("cycles", MB_OPS + "; integer division by a runtime value: no instruction, " + ASSUMED +
     " (a reciprocal sequence: RECIP32 6 + IMULHI32 8 + fix-ups); barrier: " + ASSUMED),
    ("mma", MB_OPS + ": MATMUL<8x8xF32> ~18, <8x8xF16> ~17 cycles (4 schedulers: 89% / 94% of "
            "the FMA peak; MFA measured 87% / 93% on M1 Max)"),
    ("threadgroup_memory_per_core", MB_MEM + " (~60 KB shared memory per core)"),
    ("max_threads_per_core", MB_MEM + " (384-3072 threads per core)"),
    ("register_file", MB_MEM + " (~208 KB per core)"),
    ("l1_bytes_per_cycle", MB_MEM + " (on-core data 64 B/cycle)"),
    ("l2_bytes_per_cycle", MB_MEM + " (on-GPU data ~32 B/cycle per core)"),
    ("line_bytes", MB_MEM + " (global cache line 128 B)"),
    ("occupancy", MB_ILP + ": 4/8/88 SIMD-groups per core; 24: 'ALU utilization maxes out at "
                  "24 simds/core'"),
    ("banks", "metal-benchmarks lists Apple's bank size and count as TBD: " + ASSUMED +
              " 32 x 4 B as on every other GPU it compares"),
    ("threadgroup_bytes_per_cycle", "metal-benchmarks: TBD; " + ASSUMED),
    ("launch_us", ASSUMED + "; MFA's benchmarks encode up to 256 dispatches per command "
                  "encoder to hide it"),
)
_SOURCES_9 = tuple((k, v if k not in ("cycles", "mma") else v + "; Apple9: not measured "
                    "publicly, taken as Apple8") for k, v in _SOURCES_7) + (
    ("int_parallel", TECH_TALK_M3),
    ("threadgroup_memory_per_core", TECH_TALK_M3 + "; the size is not published: taken as "
                                    "Apple8's ~60 KB"),
)
FAMILIES = {
    7: Family(7, cycles=_CYCLES_7, sources=_SOURCES_7),
    8: Family(8, cycles=_CYCLES_7, sources=_SOURCES_7),
    9: Family(9, cycles=_CYCLES_7, int_parallel=True, sources=_SOURCES_9),
    # M5's Neural Accelerators are reached through Metal 4's tensor operations, which
    # mpskern's kernels do not use: simdgroup_matrix is taken at Apple9's rate
    10: Family(10, cycles=_CYCLES_7, int_parallel=True, sources=_SOURCES_9 + (
        ("mma", "Apple10: simdgroup_matrix taken at Apple9's rate (the Neural Accelerators, "
                "Apple newsroom 2025-10-15, serve Metal 4 tensor ops); " + ASSUMED),)),
}


def chip(name_or_family):
    """The Chip of a device name ("Apple M1 Max", longest table name it starts with) or of a
    family (7..10 or "apple7": its base chip); ValueError listing the names."""
    if isinstance(name_or_family, int) or str(name_or_family).lower().startswith("apple") and \
            str(name_or_family)[5:].isdigit():
        fam = int(name_or_family) if isinstance(name_or_family, int) else int(str(name_or_family)[5:])
        if fam not in FAMILY_CHIP:
            raise ValueError(f"GPU family {name_or_family!r}: the model knows apple7..apple10")
        return CHIPS[FAMILY_CHIP[fam]]
    for key in sorted(CHIPS, key=len, reverse=True):
        if name_or_family == key or str(name_or_family).startswith(key + " "):
            return CHIPS[key]
    raise ValueError(f"unknown Apple GPU {name_or_family!r}; the model knows "
                     f"{', '.join(CHIPS)} (or a family: apple7..apple10)")


def cache_path():
    """peaks.json in mpskern's cache folder (env.cache_dir)."""
    return os.path.join(env.cache_dir(), "peaks.json")


def _load_measured():
    try:
        with open(cache_path(), encoding="utf-8") as f:
            return {k: Peak(**v) for k, v in json.load(f).items()}
    except (OSError, ValueError, TypeError):
        return {}


def save_measured(device, peak):
    """Record a measured peak for `device` (replaces its estimate from now on)."""
    data = {k: v.as_dict() for k, v in _load_measured().items()}
    data[device] = peak.as_dict()
    path = cache_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_write(path) as f:
        json.dump(data, f, indent=1, sort_keys=True)


def lookup(device):
    """The Peak of device name `device` (a measured one first, else the table's estimate,
    matching the longest table key the name starts with), or None."""
    if not device:
        return None
    m = _load_measured().get(device)
    if m is not None:
        return m
    for key in sorted(TABLE, key=len, reverse=True):
        if device == key or device.startswith(key + " "):
            return TABLE[key]
    return None


def cpu_name():
    """A readable CPU model name."""
    try:
        if platform.system() == "Darwin":
            import subprocess
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                 capture_output=True, text=True, timeout=5).stdout.strip()
            if out:
                return out
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except (OSError, ValueError):
        pass
    return platform.processor() or platform.machine()


def cpu_device_name():
    """The device name the cpu backend's results carry: model and logical core count."""
    return f"{cpu_name()} ({os.cpu_count()} cores)"


def _best_rate(fn, work, seconds, min_reps=3):
    """Best rate (work per second) of fn over `seconds` and at least `min_reps` calls, after
    one untimed call (page faults, thread start-up)."""
    fn()
    best, reps, t_end = 0.0, 0, time.perf_counter() + seconds
    while reps < min_reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        best = max(best, work / (time.perf_counter() - t0))
        reps += 1
    return best


def measure_cpu(seconds=0.6):
    """Attainable CPU peaks: numpy's float32 matmul (its BLAS, all threads) at 1536^3 and a
    64 MiB float32 array copy (read + write), best rate over about `seconds` (and at least
    3 calls each). On a busy
    machine this underestimates; cpu_peak() therefore keeps the best measurement seen."""
    import numpy as np
    n = 1536                    # smaller matrices stay well below the BLAS's peak
    a = np.ones((n, n), np.float32)
    b = np.ones((n, n), np.float32)
    c = np.zeros((n, n), np.float32)
    gflops = _best_rate(lambda: np.matmul(a, b, out=c), 2.0 * n ** 3 / 1e9, 0.7 * seconds)
    m = 16 * 1024 * 1024
    src = np.ones(m, np.float32)
    dst = np.zeros(m, np.float32)
    gbps = _best_rate(lambda: np.copyto(dst, src), 2.0 * m * 4 / 1e9, 0.3 * seconds)
    return Peak(round(gflops, 1), None, round(gbps, 1),
                "measured: best numpy float32 matmul 1536^3 (FLOP/s) and 64 MiB copy (GB/s)",
                measured=True)


_session_peak = {}


REMEASURE_ENV = "MPSKERN_REMEASURE_PEAK"


def cpu_peak(measure=True):
    """This CPU's peak: measured once per machine and cached (peaks.json) with its
    provenance (how, when, the load average, the mpskern version), so every later run's
    "% of peak" uses the same figures. MPSKERN_REMEASURE_PEAK=1 measures again, keeping the
    higher of each figure (a measurement on a loaded machine only underestimates).
    Without `measure`, the cached peak or None."""
    dev = cpu_device_name()
    if dev in _session_peak:
        return _session_peak[dev]
    old = _load_measured().get(dev)
    if not measure or (old is not None and not env.flag(REMEASURE_ENV)):
        if old is not None:
            _session_peak[dev] = old
        return old
    p = measure_cpu()
    from mpskern import __version__
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    stamp = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
    p = Peak(p.fp32_gflops, None, p.gbps, f"{p.source}; at {stamp}, load average {load:.2f}, "
             f"mpskern {__version__}; cached in peaks.json ({REMEASURE_ENV}=1 re-measures)",
             measured=True)
    if old is not None:
        src = old.source if old.fp32_gflops >= p.fp32_gflops else p.source
        p = Peak(max(p.fp32_gflops, old.fp32_gflops), None, max(p.gbps, old.gbps), src,
                 measured=True)
    try:
        save_measured(dev, p)
    except OSError:
        pass                    # a read-only home: measure again next time
    _session_peak[dev] = p
    return p


def raise_measured(device, peak, gflops):
    """A measured FLOP/s peak is an attainable one: when a benchmark case on `device`
    attains more (`gflops`, float32), that becomes the device's peak (saved), so "% of
    peak" stays meaningful on a machine whose sgemm measurement was disturbed. Bandwidth is
    not raised: a case above the copy bandwidth ran from cache, which is worth seeing.
    Returns the peak to use."""
    if not peak.measured or not gflops or gflops <= peak.fp32_gflops:
        return peak
    p = Peak(round(gflops, 1), peak.fp16_gflops, peak.gbps,
             peak.source.split(";")[0] + "; FLOP/s raised to the best case measured here",
             measured=True)
    for k, v in list(_session_peak.items()):
        if v == peak:
            _session_peak[k] = p
    try:
        save_measured(device, p)
    except OSError:
        pass
    return p
