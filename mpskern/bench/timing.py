"""The timing protocol (docs/design.md, "Benchmarks and reports"), after triton's do_bench and
pyperf:

1. warm-up: call for `warmup` seconds (at least once) and keep the fastest call;
2. calibrate an inner loop so one sample lasts at least `target_sample_ms` (timer
   resolution and Python's call overhead then stay small beside the sample);
3. take samples until both `min_samples` are in and `budget` seconds are spent, or
   `max_samples`; a case too slow for that stops at 4 x budget with at least 3 samples
   (and the statistics flag it).

Wall time comes from perf_counter. A backend with its own device clock (GPU command-buffer
timestamps) passes `device_ms`, a callable giving the device time of the last call; then
each sample's primary time is the device time summed over the inner loop, and wall time is
kept alongside. The garbage collector is off while sampling (as timeit does).
"""
import gc
import math
import time
from dataclasses import dataclass

from mpskern import _args

SLOW_CASE_FACTOR = 4.0
SLOW_CASE_MIN_SAMPLES = 3
MAX_INNER = 100_000


@dataclass
class Timing:
    samples_ms: list            # per-call time of each sample, primary timer
    wall_samples_ms: list       # per-call wall time of each sample
    inner: int                  # calls per sample
    warmup_calls: int
    elapsed_s: float            # sampling time
    device_timer: bool          # samples_ms come from the device clock


def measure(fn, *, budget=0.5, warmup=None, min_samples=10, max_samples=10_000,
            target_sample_ms=1.0, device_ms=None, clock=time.perf_counter):
    """Time `fn()` (no arguments; its result is ignored) under the protocol above."""
    if isinstance(budget, bool):           # float(True) is 1.0: a slip, not a budget
        raise TypeError(f"benchmark: budget must be a real number, got {budget!r}")
    budget = _args.real(budget, "budget", "benchmark")
    if not 0 < budget < math.inf:           # NaN ran until max_samples, inf the same
        raise ValueError(f"budget must be > 0 seconds (and finite), got {budget}")
    min_samples = _args.whole(min_samples, "min_samples", "benchmark", 1)
    if max_samples < min_samples:
        raise ValueError(f"need 1 <= min_samples <= max_samples, got {min_samples}, {max_samples}")
    if warmup is None:
        warmup = min(0.25, 0.2 * budget)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # 1. warm-up
        fastest = math.inf
        calls = 0
        start = clock()
        while True:
            t0 = clock()
            fn()
            t1 = clock()
            calls += 1
            fastest = min(fastest, t1 - t0)
            if t1 - start >= warmup:
                break
        # 2. calibrate
        target = target_sample_ms / 1e3
        inner = MAX_INNER if fastest <= 0 else max(1, min(MAX_INNER, math.ceil(target / fastest)))
        # 3. sample
        samples, walls = [], []
        start = clock()
        while True:
            dev = 0.0
            t0 = clock()
            for _ in range(inner):
                fn()
                if device_ms is not None:
                    dev += device_ms()
            t1 = clock()
            wall = (t1 - t0) * 1e3 / inner
            walls.append(wall)
            samples.append(dev / inner if device_ms is not None else wall)
            n, spent = len(samples), t1 - start
            if n >= max_samples or (n >= min_samples and spent >= budget):
                break
            if spent >= SLOW_CASE_FACTOR * budget and n >= SLOW_CASE_MIN_SAMPLES:
                break
        return Timing(samples_ms=samples, wall_samples_ms=walls, inner=inner,
                      warmup_calls=calls, elapsed_s=clock() - start,
                      device_timer=device_ms is not None)
    finally:
        if gc_was_enabled:
            gc.enable()
