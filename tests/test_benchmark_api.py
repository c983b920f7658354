"""mpskern.benchmark: any code timed with `mpskern bench`'s protocol and statistics. A device
clock with known times gives exactly known statistics; a busy-wait of known length is
never measured shorter; an mpskern.metal_kernel is timed by its own run time (the
simulator's here); the result prints as one line and appends a row that `mpskern report`
reads and shows."""
import json
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import mpskern
from mpskern import sim
from mpskern.bench import schema
from mpskern.cli.main import app


def _busy(ms):
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1e3:
        pass


def test_statistics_of_a_known_device_clock():
    times = iter(np.tile([1.0, 2.0, 3.0, 4.0, 5.0], 100_000))
    r = mpskern.benchmark(lambda: None, device_ms=lambda: next(times), budget=0.05, min_samples=10,
                          name="known")
    assert r.timer == "gpu" and r.backend == "python" and r.name == "known"
    # every sample averages whole cycles of 1..5 when inner is a multiple of 5, else close to 3
    assert r.median_ms == pytest.approx(3.0, rel=0.35) and r.summary.n >= 10
    assert r.summary.min >= 1.0 and r.summary.max <= 5.0
    s = r.summary
    assert s.p10 <= s.p25 <= s.median <= s.p75 <= s.p90 and r.inner >= 1


def test_a_function_of_known_cost_is_never_measured_shorter():
    r = mpskern.benchmark(_busy, 2.0, budget=0.1, min_samples=5)
    assert r.timer == "wall" and r.name == "_busy"
    assert r.summary.min >= 2.0 and r.median_ms < 2.0 * 20      # a loaded machine only slows it
    assert r.inner == 1                                          # a 2 ms call needs no inner loop
    assert abs(r.wall.median - r.median_ms) < 1e-9               # wall timer: one and the same


def test_prints_as_one_line_with_the_figures():
    r = mpskern.benchmark(_busy, 0.5, budget=0.05, flops=1e6, bytes=4e6, name="spin")
    text = str(r)
    assert "\n" not in text and text.startswith("spin (python, wall time): median ")
    assert "p10-p90" in text and "samples x" in text and "GFLOP/s" in text and "GB/s" in text


@pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")
def test_a_metal_kernel_is_timed_by_its_own_run_time(tmp_path):
    k = mpskern.metal_kernel("""#include <metal_stdlib>
using namespace metal;
kernel void inc(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] += 1.0f; }
""", "inc")
    y = np.zeros(256, np.float32)
    r = mpskern.benchmark(k, y, grid=(256,), threadgroup=(64,), backend="sim", budget=0.1,
                          bytes=2 * y.nbytes, shape={"n": 256}, dtype="float32")
    assert r.timer == "sim" and r.backend == "sim" and r.name == "inc"
    assert "simulated" in str(r) and r.device.startswith("mpskern simulator")
    assert y[0] >= r.summary.n * r.inner + 1          # it really ran: every sampled call, the first
    path = tmp_path / "mine.jsonl"
    r.append(path)
    r.append(path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 2 and all(schema.validate(row) is None for row in rows)
    assert rows[0]["op"] == "inc" and rows[0]["timer"] == "sim" and rows[0]["simulated"] is True
    assert rows[0]["median_ms"] == pytest.approx(r.median_ms) and rows[0]["gbps"] > 0
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert "## inc" in md and "n=256" in md and "sim" in md


def test_bad_arguments():
    with pytest.raises(TypeError, match="needs a callable"):
        mpskern.benchmark(3)
    with pytest.raises(ValueError, match="flops must be a finite number >= 0"):
        mpskern.benchmark(lambda: None, flops=-1)
    with pytest.raises(TypeError, match="shape must be a dict"):
        mpskern.benchmark(lambda: None, shape=(1, 2))
    with pytest.raises(ValueError, match="budget must be > 0"):
        mpskern.benchmark(lambda: None, budget=0)


@pytest.mark.parametrize("kw, err, msg", [
    ({"budget": float("nan")}, ValueError, "budget must be > 0 seconds .and finite., got nan"),
    ({"budget": float("inf")}, ValueError, "budget must be > 0 seconds .and finite., got inf"),
    ({"budget": "1"}, TypeError, "budget must be a real number, got '1'"),
    ({"budget": True}, TypeError, "budget must be a real number, got True"),
    ({"min_samples": 2.5}, TypeError, "min_samples must be an int, got 2.5"),
    ({"min_samples": True}, TypeError, "min_samples must be an int, got True"),
    ({"min_samples": 0}, ValueError, "min_samples=0 must be >= 1"),
    ({"flops": float("nan")}, ValueError, "flops must be a finite number >= 0"),
    ({"flops": float("inf")}, ValueError, "flops must be a finite number >= 0"),
    ({"bytes": True}, ValueError, "bytes must be a finite number >= 0")])
def test_bad_budgets_and_counts_say_what_is_wrong(kw, err, msg):
    """budget=nan/inf sampled until 10,000 samples (nan < budget is never true), '1' was a
    str-vs-int TypeError from inside the loop, True ran 1 s; flops=inf gave inf GFLOP/s (qa10)."""
    calls = []
    with pytest.raises(err, match=msg):
        mpskern.benchmark(lambda: calls.append(1), **kw)
    assert not calls, "the refusal came after timing had started"

