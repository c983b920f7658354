"""Peers under the same protocol: PyTorch on the CPU where it is installed (never required).
Every op's torch mapping must pass the same float64 check as mpskern's backends."""
import pytest

from mpskern import ops
from mpskern.bench import runner, targets

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("op", list(ops.TABLE))
def test_torch_cpu_matches_the_reference(op, monkeypatch):
    from mpskern import peaks
    monkeypatch.setattr(peaks, "cpu_peak", lambda measure=True: None)   # no peak measuring
    t = targets.make("torch-cpu")
    assert t.availability()[0] and t.kind == "peer"
    sp = ops.get(op)
    cases = sp.preset("tiny")[:1]
    rows = runner.run(op, cases, ["float32", "float16"], [t], budget=0.01, min_samples=3)
    assert len(rows) == 2
    for r in rows:
        assert r["status"] == "ok", (r["dtype"], r["error"])
        assert r["max_err"] <= r["tolerance"] and r["peer_version"] == torch.__version__
        assert r["timer"] == "wall" and r["backend_kind"] == "peer"
