"""mpskern bench on the real cpu backend (and the simulator for one op): every op's call
through the public API passes the float64 check and gets timed."""
import json

import pytest
from typer.testing import CliRunner

from mpskern import backends, peaks
from mpskern import ops
from mpskern.bench import runner, targets


@pytest.fixture(autouse=True)
def _no_peak_measuring(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(peaks, "cpu_peak", lambda measure=True: None)


@pytest.mark.parametrize("op", list(ops.TABLE))
def test_every_op_on_cpu(op):
    sp = ops.get(op)
    cases = sp.preset("tiny")
    rows = runner.run(op, cases, ["float32", "float16"], [targets.make("cpu")], budget=0.01,
                      min_samples=3)
    for r in rows:
        assert r["status"] == "ok", (r["shape_label"], r["dtype"], r["error"])
        assert r["median_ms"] > 0 and r["speedup_vs_cpu"] == 1.0 and r["timer"] == "wall"


@pytest.mark.parametrize("op, text", [("max_pool2d", "2,3,9,9,3,2,1,dil=2,ceil=1"),
                                      ("avg_pool2d", "2,3,10,10,3,2,1,ceil=1")])
def test_pool_options_checked_on_cpu_and_sim(op, text):
    """dilation and ceil_mode reach the kernels: the float64 check runs on each backend."""
    sp = ops.get(op)
    tg = [targets.make("cpu")] + ([targets.make("sim")] if backends.availability("sim")[0] else [])
    rows = runner.run(op, [("opts", sp.parse(text))], ["float32"], tg, budget=0.01, min_samples=3)
    assert [r["status"] for r in rows] == ["ok"] * len(tg), [r["error"] for r in rows]


def test_cli_json_real_cpu_and_sim(tmp_path):
    from mpskern.cli.main import app
    be = ["-b", "cpu"] + (["-b", "sim"] if backends.availability("sim")[0] else [])
    r = CliRunner().invoke(app, ["bench", "matmul", "--shape", "32,24,40", *be, "--budget",
                                 "0.02", "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert all(x["status"] == "ok" for x in rows) and len(rows) == len(be) // 2
    sim = [x for x in rows if x["backend"] == "sim"]
    for x in sim:            # the simulator's own clock, its kernel, and the label
        assert x["simulated"] and x["timer"] == "sim" and x["config"]["kernel"]
        assert x["wall_median_ms"] >= x["median_ms"] * 0.5
    assert (tmp_path / "bench.jsonl").read_text().count("\n") == len(rows)
