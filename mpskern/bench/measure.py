"""Timing your own code: `mpskern.benchmark(fn, *args, **kwargs)`, with the protocol and
statistics of `mpskern bench` (mpskern/bench/timing.py: warm-up, an inner loop calibrated
to >= 1 ms samples, samples until the budget is spent; mpskern/bench/stats.py: median,
p10..p90, MAD outliers, the `unstable` verdict).

    r = mpskern.benchmark(k, x, y, np.float32(2), grid=(n,), threadgroup=(256,))
    print(r)                     # "saxpy (sim): median 0.84 ms, p10-p90 0.81-0.90 ms, ..."
    r.append("results/mine.jsonl")   # a row `mpskern report results/mine.jsonl` reads

Device time where there is one: for an mpskern.metal_kernel the kernel's own run time
(GPU command-buffer timestamps on Metal, the simulator's run time on sim); for anything
else wall time, or pass device_ms=callable (the device time of the last call, in ms).
"""
import datetime
import math
import os
from dataclasses import dataclass, field

from mpskern.bench import provenance, runner, schema, stats, timing


@dataclass
class BenchmarkResult:
    """One function's timing (milliseconds per call) and what was measured."""
    name: str
    timer: str                     # "wall", "gpu" or "sim"
    backend: str                   # the kernel's backend, or "python" for a plain function
    summary: stats.Summary
    wall: stats.Summary
    inner: int                     # calls per sample
    samples_ms: list = field(repr=False)
    budget_s: float = 0.5
    flops: float = None
    bytes: float = None
    shape: dict = None
    dtype: str = None
    device: str = None

    @property
    def median_ms(self):
        return self.summary.median

    def __str__(self):
        s = self.summary
        scale, unit = (1e3, "us") if s.median < 1 else (1, "ms")
        v = lambda x: f"{x * scale:.4g}"  # noqa: E731
        text = (f"{self.name} ({self.backend}, {self.timer} time): median {v(s.median)} {unit}, "
                f"p10-p90 {v(s.p10)}-{v(s.p90)} {unit}, {s.n} samples x {self.inner} calls")
        if self.flops:
            text += f", {self.flops / (s.median / 1e3) / 1e9:.3g} GFLOP/s"
        if self.bytes:
            text += f", {self.bytes / (s.median / 1e3) / 1e9:.3g} GB/s"
        if self.timer == "sim":
            text += " (simulated: says nothing about GPU speed)"
        if s.unstable:
            text += f"; UNSTABLE ({s.unstable_reason})"
        return text

    def _repr_pretty_(self, p, cycle):      # IPython / Jupyter
        p.text(str(self))

    def row(self, run_id=None):
        """This result as a results-schema row (mpskern/bench/schema.py)."""
        s, w = self.summary, self.wall
        shape = dict(self.shape or {})
        r = dict.fromkeys(schema.COLUMNS)
        r.update(schema_version=schema.SCHEMA_VERSION, run_id=run_id or runner.new_run_id(),
                 op=self.name, shape=shape,
                 shape_key=",".join(f"{k}={v}" for k, v in shape.items()) or "-",
                 shape_label=",".join(f"{k}={v}" for k, v in shape.items()) or self.name,
                 preset="custom", dtype=self.dtype or "-", backend=self.backend, device=self.device,
                 backend_kind="user", simulated=self.timer == "sim", timer=self.timer,
                 status="ok", budget_s=self.budget_s,
                 median_ms=s.median, p10_ms=s.p10, p90_ms=s.p90, p25_ms=s.p25, p75_ms=s.p75,
                 iqr_ms=s.iqr, mean_ms=s.mean, min_ms=s.min, n_samples=s.n,
                 inner_loop=self.inner, n_outliers=s.n_outliers, unstable=s.unstable,
                 unstable_reason=s.unstable_reason or None, wall_median_ms=w.median,
                 wall_p10_ms=w.p10, wall_p90_ms=w.p90, flops=self.flops, bytes=self.bytes,
                 load_avg=_load())
        sec = s.median / 1e3
        if self.flops and self.bytes:
            r["intensity"] = self.flops / self.bytes
        if sec > 0 and self.flops:
            r.update(gflops=self.flops / sec / 1e9, metric="gflops")
        if sec > 0 and self.bytes:
            r["gbps"] = self.bytes / sec / 1e9
            r["metric"] = r["metric"] or "gbps"
        r.update(provenance.machine())
        r["timestamp"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return r

    def append(self, path, run_id=None):
        """Append this result as one row to the JSON Lines file `path` (made if missing)."""
        schema.append_jsonl(os.fspath(path), [self.row(run_id)])
        return path


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def benchmark(fn, *args, name=None, budget=0.5, min_samples=10, device_ms=None, flops=None,
              bytes=None, shape=None, dtype=None, **kwargs):  # noqa: A002 - the schema's word
    """Time fn(*args, **kwargs) with `mpskern bench`'s protocol and statistics: a warm-up,
    an inner loop calibrated to samples of >= 1 ms, samples until the budget is spent;
    median, p10..p90, MAD outliers and the `unstable` verdict.

    Parameters
    ----------
    fn : callable
        What to time. An mpskern.metal_kernel is timed by its own run time (GPU
        command-buffer timestamps on Metal, the simulator's run time on sim).
    args, kwargs : any
        Passed to every call of fn.
    name : str, optional
        The result's (and the row's op) name; default: the kernel's or function's name.
    budget : float
        Seconds of sampling (default 0.5), at least min_samples samples.
    min_samples : int
        Fewest samples (default 10); fewer (a slow call) is flagged unstable.
    device_ms : callable, optional
        The device time in ms of the last call, for other device-timed code; default:
        wall time (perf_counter).
    flops, bytes : float, optional
        Work per call: the result then gives GFLOP/s and GB/s.
    shape : dict, optional
        Fields labelling the row (e.g. {"n": 4096}).
    dtype : str, optional
        The dtype the row is filed under.

    Returns
    -------
    BenchmarkResult
        Prints as one line; .median_ms, .summary (all statistics), .samples_ms;
        .append(path) adds a row to a JSON Lines file `mpskern report` reads.

    Example
    -------
        r = mk.benchmark(np.dot, np.ones((64, 64), np.float32), np.ones((64, 64), np.float32),
                         budget=0.05, flops=2 * 64 ** 3)
        print(r)              # dot (python, wall time): median ... us, p10-p90 ..., GFLOP/s
    """
    from mpskern.kernel import Kernel
    if not callable(fn):
        raise TypeError(f"benchmark needs a callable, got {type(fn).__name__}")
    for what, v in (("flops", flops), ("bytes", bytes)):
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and 0 <= v < math.inf):
            raise ValueError(f"{what} must be a finite number >= 0 per call, got {v!r}")
    if shape is not None and not isinstance(shape, dict):
        raise TypeError(f"shape must be a dict (field -> value) labelling the row, got {type(shape).__name__}")
    from mpskern import backends, peaks
    backend, timer, device = "python", "wall", peaks.cpu_device_name()
    if isinstance(fn, Kernel):
        fn(*args, **kwargs)                  # the backend, and whether it reports device time
        backend = fn._backend_used
        device = backends.get(backend).info.get("name")
        if device_ms is None and fn.last_timing and fn.last_timing[0] is not None:
            device_ms = lambda: fn.last_timing[0]  # noqa: E731
            timer = "sim" if backend == "sim" else "gpu"
    elif device_ms is not None:
        timer = "gpu"
    name = name or getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__
    tm = timing.measure(lambda: fn(*args, **kwargs), budget=budget, min_samples=min_samples,
                        device_ms=device_ms)
    return BenchmarkResult(name=str(name), timer=timer, backend=backend,
                           summary=stats.summarize(tm.samples_ms, min_samples=min_samples),
                           wall=stats.summarize(tm.wall_samples_ms, min_samples=min_samples),
                           inner=tm.inner, samples_ms=list(tm.samples_ms), budget_s=budget,
                           flops=flops, bytes=bytes, shape=shape, dtype=dtype, device=device)
