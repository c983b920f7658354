"""The tuner on the simulator with the real kernels: it picks a valid configuration and
stores it, a later call uses it, a simulated family with other limits has another space
and other defaults, and unusable databases fall back with a warning. Kept tiny: small
shapes, 2 candidates, small budgets (every new configuration is a compile)."""
import json

import numpy as np
import pytest

import mpskern
from mpskern import backends
from mpskern.tuner import tune as tuner
from mpskern.tuning import db, spaces

pytestmark = [
    pytest.mark.skipif(not backends.availability("sim")[0],
                       reason=f"sim backend: {backends.availability('sim')[1]}"),
    pytest.mark.skipif(not hasattr(mpskern, "matmul"), reason="the public ops are not here yet"),
]

SHAPE = (24, 16, 40)              # M, N, K: the gemm key is (1, 24, 16, 40)
CANDS = [{"variant": "tiled", "BM": 16, "BN": 16, "BK": 8, "WM": 1, "WN": 1},
         {"variant": "simd", "BM": 32, "BN": 16, "BK": 8, "WM": 1, "WN": 1}]


@pytest.fixture
def sim(monkeypatch, tmp_path):
    monkeypatch.setenv(db.ENV_PATH, str(tmp_path / "tuning.json"))
    db.reset()
    be = backends.get("sim")
    be.set_sim_options(family=8)
    yield be
    be.set_sim_options()
    db.reset()


def matmul(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (SHAPE[0], SHAPE[2])).astype(np.float32)
    b = rng.uniform(-1, 1, (SHAPE[2], SHAPE[1])).astype(np.float32)
    out = mpskern.matmul(a, b, backend="sim")
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    return out


def test_tune_stores_a_valid_winner_and_the_next_call_uses_it(sim):
    matmul()
    assert sim.last_config["level"] == "family"          # apple8's packaged default
    r = tuner.tune("gemm", SHAPE, backend="sim", budget_s=20, reps=2, candidates=CANDS)
    assert r.key.op == "gemm" and r.key.shape == (1,) + SHAPE
    best = r.result.best
    assert best is not None and best.status == "ok"
    assert spaces.problems("gemm", best.config, sim.info) == []
    assert [t.status for t in r.result.trials].count("ok") >= 2
    stored = db.user_db().entries
    assert len(stored) == 1 and stored[0].config == best.config and stored[0].backend == "sim"
    assert stored[0].family == "apple8" and stored[0].time_ms > 0

    matmul(seed=1)                                        # a later call
    cfg = {k: v for k, v in sim.last_config.items() if k in best.config}
    assert sim.last_config["level"] == "exact" and cfg == best.config
    assert "exact:" in tuner.show("gemm", SHAPE, backend="sim").explain()


def test_a_family_with_other_limits_has_another_space_and_default(sim):
    roomy = spaces.candidates("gemm", sim.info)
    matmul()
    sim.set_sim_options(family=9, max_threads_per_threadgroup=256, max_threadgroup_memory=16384)
    info = sim.info
    assert info["family"] == 9 and info["max_threads_per_threadgroup"] == 256
    tight = spaces.candidates("gemm", info)
    assert tight and len(tight) < len(roomy)
    assert all(spaces.threads("gemm", c) <= 256 and spaces.threadgroup_memory("gemm", c) <= 16384
               for c in tight)
    matmul()
    apple9 = db.family_defaults(9).for_op("gemm", "float32")[0].config
    assert sim.last_config["level"] == "family"
    assert {k: sim.last_config[k] for k in apple9} == apple9   # (the same tiles as apple8's)


@pytest.mark.parametrize("text", ["", "{not json", json.dumps({"format": db.FORMAT, "version": 7,
                                                                "entries": []})])
def test_unusable_databases_warn_and_the_op_still_runs(sim, text):
    p = db.user_path()
    with open(p, "w") as f:
        f.write(text)
    with pytest.warns(db.TuningDatabaseWarning, match="ignoring"):
        matmul()
    assert sim.last_config["level"] == "family"


def test_cli_tunes_on_the_simulator(sim, monkeypatch):
    from typer.testing import CliRunner

    from mpskern.cli.main import app
    monkeypatch.setenv("COLUMNS", "200")
    r = CliRunner().invoke(app, ["tune", "gemm", "--backend", "sim", "--shape", "24x16x40",
                                 "--budget", "2", "--reps", "2"])
    assert r.exit_code == 0, r.output
    assert "stored in" in r.output and "1x24x16x40" in r.output
    e = db.user_db().entries
    assert len(e) == 1 and spaces.problems("gemm", e[0].config, sim.info) == []


def test_row_ops_and_depthwise_tune_through_their_own_spaces(sim):
    r = tuner.tune("softmax", (4, 96), backend="sim", budget_s=10, reps=2,
                   candidates=spaces.shipped("softmax")[:2])
    assert r.key.op == "softmax" and r.key.shape == (4, 96, 1) and r.result.best is not None
    assert len(r.result.trials) == 2 and all(t.status in ("ok", "pruned") for t in r.result.trials)
    r = tuner.tune("conv2d", "1,4,5,5,4,3,3,pad=1,groups=4", backend="sim", budget_s=10, reps=2,
                   candidates=[{"variant": "depthwise", "threads": 64}])
    assert r.key.op == "conv2d_depthwise" and r.result.best is not None
    assert {e.op for e in db.user_db().entries} == {"softmax", "conv2d_depthwise"}


def test_show_on_a_family_chosen_by_environment(tmp_path):
    """`MPSKERN_SIM_FAMILY=apple9 mpskern tune --show gemm`: a fresh process simulating
    Apple9 uses Apple9's packaged default and says so."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, MPSKERN_SIM_FAMILY="apple9", COLUMNS="200",
               MPSKERN_TUNING_DB=str(tmp_path / "none.json"))
    out = subprocess.run([sys.executable, "-m", "mpskern.cli.main", "tune", "--show", "gemm",
                          "--backend", "sim", "--shape", "24x16x40"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    apple9 = db.family_defaults(9).for_op("gemm", "float32")[0].config
    assert "family apple9" in out.stdout and "family: the packaged default" in out.stdout
    assert " ".join(f"{k}={v}" for k, v in apple9.items()) in out.stdout
