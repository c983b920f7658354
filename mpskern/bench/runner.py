"""The case runner: for each shape and dtype, build inputs once and their float64
reference, then per target: check the result against the reference (a failed check is
reported, not timed), time under the protocol, derive throughput, and, once every target
of the case has run, the speedup over cpu. Rows follow mpskern/bench/schema.py.
"""
import datetime
import os
import time
import uuid
import zlib

import numpy as np

from mpskern import ops, peaks
from mpskern.bench import provenance, schema, stats, timing
from mpskern.bench.targets import as_numpy
from mpskern.reference import max_error, tolerance

DTYPES = ("float32", "float16")


class CaseTooBig(ValueError):
    """A case whose inputs cannot even be built (no row: nothing was measured)."""


def new_run_id():
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def _rng(op, key, dtype):
    return np.random.default_rng(zlib.crc32(f"{op}|{key}|{dtype}".encode()))


def run(op, shapes, dtypes, targets, *, budget=0.5, run_id=None, preset="custom",
        on_row=None, on_case=None, min_samples=10, command=None, keep_samples=False):
    """Run `shapes` ([(label, shape dict)]) x `dtypes` x `targets` of `op` (a name in the op
    table, or an entry of it or of mpskern.models: anything with the op table's interface);
    returns the rows.
    on_row(row) is called as each case's rows are complete (for appending to a file);
    on_case(label, dtype, target_name) before each target runs (for progress). `command`:
    the command line recorded in every row; keep_samples: record every sample too."""
    sp = ops.get(op) if isinstance(op, str) else op
    op = sp.name
    run_id = run_id or new_run_id()
    mach = provenance.machine()
    rows = []
    for label, shape in shapes:
        for dtype in dtypes:
            dtype = np.dtype(dtype).name
            if dtype not in DTYPES:
                raise ValueError(f"dtype {dtype} is not benchmarked; use float32 or float16")
            try:
                sp.check_memory(shape, dtype)    # before anything is allocated
            except ValueError as e:
                raise CaseTooBig(str(e)) from None
            try:
                inp = sp.inputs(shape, dtype, _rng(op, sp.key(shape), dtype))
                want = sp.reference(inp)
            except (MemoryError, ValueError) as e:   # numpy: "array is too big", ...
                raise CaseTooBig(f"{op} {label} ({dtype}): cannot build its inputs and float64 "
                                 f"reference here ({type(e).__name__}: {e}); give a smaller "
                                 "--shape") from None
            cost = sp.costs(shape, want.shape, np.dtype(dtype).itemsize)
            tol = tolerance(dtype, sp.reduction(inp))
            case = []
            for t in targets:
                if on_case:
                    on_case(label, dtype, t.name)
                r = _one(sp, t, shape, label, dtype, inp, want, cost, tol, budget, min_samples,
                         keep_samples)
                r.update(run_id=run_id, preset=preset, command=command, **mach)
                case.append(r)
            cpu = next((r["median_ms"] for r in case if r["backend"] == "cpu"
                        and r["median_ms"]), None)
            for r in case:
                if cpu and r["median_ms"] and r["timer"] != "model":   # never modelled vs measured
                    r["speedup_vs_cpu"] = cpu / r["median_ms"]
                if on_row:
                    on_row(r)
            rows += case
    return rows


def _empty_row(sp, t, shape, label, dtype, budget):
    r = dict.fromkeys(schema.COLUMNS)
    r.update(schema_version=schema.SCHEMA_VERSION, op=sp.name, shape=dict(shape),
             shape_key=sp.key(shape), shape_label=label, dtype=dtype, backend=t.name,
             backend_kind=t.kind, simulated=t.simulated, timer=t.timer, budget_s=budget,
             metric=sp.metric, unstable=None)
    return r


def _safe(f):
    try:
        return f()
    except Exception:  # noqa: BLE001 - a metadata query must not stop the benchmark
        return None


def _one(sp, t, shape, label, dtype, inp, want, cost, tol, budget, min_samples, keep_samples=False):
    r = _empty_row(sp, t, shape, label, dtype, budget)
    r.update(flops=cost.flops, bytes=cost.bytes, intensity=cost.intensity, tolerance=tol)
    r.update(device=_safe(t.device), gpu_family=_safe(t.gpu_family), peer_version=_safe(t.version),
             load_avg=_safe(lambda: os.getloadavg()[0]))
    if t.name == "cpu":
        from mpskern import _native
        r["threads"] = _safe(_native.cpu_get_num_threads)
    if t.timer == "model":      # modelled, not timed (targets.ModelTarget)
        try:
            return _stamp(t.model_row(r, sp, shape, dtype, inp, cost))
        except Exception as e:  # noqa: BLE001
            r.update(status="error", error=f"{type(e).__name__}: {e}")
            return _stamp(r)
    try:
        fn = t.bind(sp, inp, want.shape, dtype)
        got = as_numpy(fn, fn())
        r.update(config=_safe(t.config), zero_copy=_safe(t.zero_copy))
        err = max_error(got, want)
        r["max_err"] = err
        if not err <= tol:
            r.update(status="check_failed",
                     error=f"max_err {err:.3g} exceeds tolerance {tol:.3g}: not timed")
            return _stamp(r)
        dev = t.device_ms if t.device_ms() is not None else None
        if dev is None and t.timer != "wall":
            r["timer"] = "wall"     # the backend gave no device time: say what was measured
        tm = timing.measure(fn, budget=budget, device_ms=dev, min_samples=min_samples)
    except Exception as e:  # noqa: BLE001 - one case's failure is reported, the run goes on
        r.update(status="error", error=f"{type(e).__name__}: {e}")
        return _stamp(r)
    s = stats.summarize(tm.samples_ms, min_samples=min_samples)
    w = stats.summarize(tm.wall_samples_ms, min_samples=min_samples)
    r.update(status="ok", median_ms=s.median, p10_ms=s.p10, p90_ms=s.p90, p25_ms=s.p25,
             p75_ms=s.p75, iqr_ms=s.iqr, mean_ms=s.mean, min_ms=s.min, n_samples=s.n,
             inner_loop=tm.inner, n_outliers=s.n_outliers, unstable=s.unstable,
             unstable_reason=s.unstable_reason or None, wall_median_ms=w.median,
             wall_p10_ms=w.p10, wall_p90_ms=w.p90,
             samples_ms=[float(x) for x in tm.samples_ms] if keep_samples else None)
    sec = s.median / 1e3
    if sec > 0:
        r.update(gflops=cost.flops / sec / 1e9, gbps=cost.bytes / sec / 1e9)
    pk = _safe(t.peak)
    if (pk is not None and sec > 0 and dtype == "float32" and r["metric"] == "gflops"
            and sp.work_done):
        pk = peaks.raise_measured(r["device"], pk, r["gflops"])
    if pk is not None and sec > 0:
        schema.set_peak(r, pk, dtype)
    return _stamp(r)


def _stamp(r):
    r["timestamp"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return r


def default_out_file(out):
    """--out is a folder (rows go to OUT/bench.jsonl) or a .jsonl file."""
    out = os.fspath(out)
    return out if out.endswith(".jsonl") else os.path.join(out, "bench.jsonl")
