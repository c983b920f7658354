"""`mpskern selftest --calibrate` (a Mac): measured vs modelled GPU times, so the model's
error becomes known per family. For each case the op runs on the Metal GPU (median of
GPU-timestamp times) and in the simulator's profiling mode as the same family (the
model's estimate for this device's chip, uncalibrated); the ratio measured / modelled per
case is recorded, and its median per family becomes the factor model.estimate() applies
from then on (calibration.json beside the tuning database; docs/profiling.md).

Nothing here can run without a Mac: the tests drive it with a fake measurement.
"""
import datetime
import json
import math
import os
import statistics

import numpy as np

from mpskern.atomic_write import atomic_write

# (op, shape fields): each op at its `mpskern tune` shape and a smaller one
CASES = (
    ("gemm", dict(M=1024, N=1024, K=1024, c=0)), ("gemm", dict(M=256, N=256, K=256, c=0)),
    ("gemm", dict(M=2048, N=2048, K=2048, c=0)),
    ("conv2d", dict(N=1, C=64, H=56, W=56, K=64, R=3, pad=1)),
    ("softmax", dict(rows=4096, n=1024)), ("layer_norm", dict(rows=4096, n=1024)),
    ("max_pool2d", dict(N=8, C=64, H=56, W=56, k=3, stride=2, pad=1)),
)


def measure_metal(op, shape, dtype, repeats=20):
    """Median GPU time (ms) of `op` at `shape` on the Metal backend (GPU timestamps)."""
    from mpskern import backends
    from mpskern.profiling.run import problem
    spec, shape, inputs = problem(op, shape, dtype)
    be = backends.get("metal")
    for _ in range(3):
        spec.call(inputs, "metal")
    times = []
    for _ in range(repeats):
        spec.call(inputs, "metal")
        times.append(be.last_timing[0])
    return statistics.median(times)


def modelled(op, shape, dtype, chip):
    """The model's uncalibrated estimate (ms) of `op` at `shape` on `chip`."""
    from mpskern.profiling import model, run
    prof, info = run.profile_op(op, shape, dtype, family=chip.family)
    m = run.model_of(prof, info, chip)
    return sum(e.estimate_ms / (e.calibration or 1.0) for e in m.dispatches), info


def _time(ms):
    """A time in ms, or None for one that is not a finite positive number (a failed GPU
    timestamp): left out of the factor, and the record stays valid JSON."""
    try:
        ms = float(ms)
    except (TypeError, ValueError):
        return None
    return ms if math.isfinite(ms) and ms > 0 else None


def calibrate(device_name, family, *, cases=CASES, dtypes=("float32",), measure=measure_metal,
              save=True, progress=None):
    """Measure and model every case; returns the record (and saves it unless save=False):
    {family, device, chip, factor, spread, rows: [{op, shape, dtype, measured_ms,
    modelled_ms, ratio}]}."""
    from mpskern import peaks
    from mpskern.profiling import model
    try:
        chip = peaks.chip(device_name)
    except ValueError:
        chip = peaks.chip(int(family))
    rows = []
    for op, shape in cases:
        for dt in dtypes:
            if progress:
                progress(op, shape, dt)
            got = _time(measure(op, dict(shape), dt))
            est, _ = modelled(op, dict(shape), dt, chip)
            est = _time(est)
            rows.append(dict(op=op, shape=dict(shape), dtype=dt, measured_ms=got,
                             modelled_ms=est, ratio=got / est if got and est else None))
    ratios = sorted(r["ratio"] for r in rows if r["ratio"])
    if not ratios:
        raise ValueError("calibration: no case gave both a measurement and an estimate")
    rec = dict(family=int(chip.family), device=device_name, chip=chip.name,
               factor=statistics.median(ratios),
               spread=[float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))],
               cases=len(ratios), rows=rows,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    if save:
        path = model.calibration_path()
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict) or not isinstance(data.get("families"), dict):
            data = {"format": "mpskern-model-calibration", "families": {}}
        data["families"][str(rec["family"])] = rec
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_write(path) as f:
            json.dump(data, f, indent=1, allow_nan=False)
        rec["path"] = path
    return rec
