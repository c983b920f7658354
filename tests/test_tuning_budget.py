"""`mpskern tune --budget` is a promise about the whole tune's wall time (inputs, the
reference, the default's compile, every candidate), not only the clock between
candidates: a candidate whose kernels are not compiled is left unrun when its compile would
not fit (a simulator compile takes seconds, its timed runs milliseconds: a 0.2 s budget
took 4.9 s), and the result says why it ran over when the default alone did."""
import collections
import time

import pytest

from mpskern import backends
from mpskern.backends.gpu import compile_budget
from mpskern.sim import compiler
from mpskern.tuner import search
from mpskern.tuner import tune as tuner

OTHER = [{"variant": "rows", "TPR": 32, "RPG": 1, "VPT": 2},
         {"variant": "rows", "TPR": 64, "RPG": 1, "VPT": 1}]


@pytest.fixture
def fresh_sim(monkeypatch, tmp_path):
    """The simulator with an empty compile cache (on disk and loaded), builds counted."""
    ok, why = backends.availability("sim")
    if not ok:
        pytest.skip(f"sim unavailable: {why}")
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(tmp_path / "tuning.json"))
    monkeypatch.setattr(compiler, "_built", {})
    monkeypatch.setattr(compile_budget, "_seen", {})
    monkeypatch.setattr(backends.get("sim")._ctx, "_libraries", collections.OrderedDict())
    builds = []
    real = compiler._compile

    def counted(*a, **k):
        builds.append(a[3])
        return real(*a, **k)
    monkeypatch.setattr(compiler, "_compile", counted)
    return builds


def test_a_compile_that_does_not_fit_is_not_started(fresh_sim):
    """The default's compile (a fresh cache: a second or more) already spends a 0.05 s
    budget: no candidate is compiled after it, and the result says the compile alone took
    longer."""
    t0 = time.perf_counter()
    r = tuner.tune("softmax", "8x64", backend="sim", budget_s=0.05, candidates=OTHER,
                   save=False)
    wall = time.perf_counter() - t0
    assert len(fresh_sim) == 1, f"{len(fresh_sim)} libraries compiled; only the default's may be"
    others = [t for t in r.result.trials if not t.is_default]
    assert others and all(t.status == search.UNRUN for t in others), \
        [(t.status, t.reason) for t in others]
    assert r.result.default.status == search.OK
    # the budget's clock started with the tune: the default's compile is inside it
    assert r.result.elapsed_s >= compile_budget.longest_s() > 0.05
    assert r.result.elapsed_s <= wall
    assert "one compile alone took" in r.over_budget()


def test_before_any_compile_is_timed_a_compile_counts_as_the_prior(fresh_sim):
    """The default already built (so nothing was timed in this process): a candidate that
    needs a compile is not started in a budget shorter than PRIOR_S."""
    import mpskern
    import numpy as np
    mpskern.softmax(np.ones((8, 64), np.float32), backend="sim")     # builds the default
    compile_budget._seen.clear()
    fresh_sim.clear()
    r = tuner.tune("softmax", "8x64", backend="sim", budget_s=0.3, candidates=OTHER,
                   save=False)
    assert fresh_sim == [], "a candidate was compiled although its compile could not fit"
    reasons = [t.reason for t in r.result.trials if not t.is_default]
    assert any("not compiled" in why for why in reasons), reasons


def test_a_generous_budget_still_compiles_candidates(fresh_sim):
    r = tuner.tune("softmax", "8x64", backend="sim", budget_s=120, candidates=OTHER[:1],
                   save=False)
    assert len(fresh_sim) == 2 and r.over_budget() == ""
    assert all(t.status in (search.OK, search.PRUNED) for t in r.result.trials)


def test_the_default_stops_at_min_reps_once_the_budget_is_spent():
    """The budget started 10 s ago (tune's setup): the default still runs, but only its
    warm-up and min_reps timed runs, not all `reps`."""
    runs = []

    def run(cfg):
        runs.append(cfg)
        return 1.0, 1.0
    res = search.search([{"a": 2}], run, lambda out: (True, 0.0), default={"a": 1},
                        budget_s=1.0, reps=5, min_reps=2, started=time.perf_counter() - 10)
    assert len(res.default.times_ms) == 2 and len(runs) == 4     # 2 warm-up + 2 timed
    assert res.trials[1].status == search.UNRUN and "budget" in res.trials[1].reason
