"""Device peaks for "% of peak" and the roofline: FP32/FP16 FLOP/s and memory bandwidth,
each with its provenance.

Apple GPUs: public estimates (DESIGN.md), GPU cores x 128 ALUs x 2 FLOP (FMA) x clock, and
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


def _est(tflops, gbps, fp16=True):
    return Peak(tflops * 1e3, tflops * 1e3 if fp16 else None, float(gbps), ESTIMATE)


# Keys are Metal device names (MTLDevice.name), matched longest first.
TABLE = {
    "Apple M1": _est(2.6, 68), "Apple M1 Pro": _est(5.3, 205), "Apple M1 Max": _est(10.6, 410),
    "Apple M1 Ultra": _est(21.2, 819),
    "Apple M2": _est(3.6, 102), "Apple M2 Pro": _est(6.8, 205), "Apple M2 Max": _est(13.6, 410),
    "Apple M2 Ultra": _est(27.2, 819),
    "Apple M3": _est(3.5, 102), "Apple M3 Pro": _est(6.4, 154), "Apple M3 Max": _est(14.1, 410),
    "Apple M4": _est(3.5, 120), "Apple M4 Pro": _est(7.1, 273), "Apple M4 Max": _est(14.1, 546),
    "Apple M5": _est(4.0, 154, fp16=False),
}


def cache_path():
    """peaks.json in $MPSKERN_CACHE_DIR, else $XDG_CACHE_HOME/mpskern, else ~/.cache/mpskern."""
    base = os.environ.get("MPSKERN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "mpskern")
    return os.path.join(base, "peaks.json")


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
    tmp = path + f".{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


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


def cpu_peak(measure=True):
    """This CPU's peak: measured once per process and merged with the cached one, keeping
    the higher of each figure (a measurement on a loaded machine only underestimates).
    Without `measure`, the cached peak or None."""
    dev = cpu_device_name()
    if dev in _session_peak:
        return _session_peak[dev]
    old = _load_measured().get(dev)
    if not measure:
        return old
    p = measure_cpu()
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
