"""The timed search over an abstract space with fake timings: validity, correctness gate,
early stop, budget, default first."""
import numpy as np
import pytest

from mpskern.tuner import search as S

REF = np.arange(6.0)


class Fake:
    """run(config) -> (output, ms): ms from the config's "ms"; "wrong" ones return garbage,
    "boom" ones raise. A fake clock advances by each run's time plus a compile cost."""

    def __init__(self, compile_s=0.0):
        self.now = 0.0
        self.runs = {}
        self.compile_s = compile_s

    def clock(self):
        return self.now

    def run(self, cfg):
        k = cfg["id"]
        first = k not in self.runs
        self.runs[k] = self.runs.get(k, 0) + 1
        self.now += cfg["ms"] / 1e3 + (self.compile_s if first else 0.0)
        if cfg.get("boom"):
            raise RuntimeError("compile failed: tile too big")
        out = REF + (1.0 if cfg.get("wrong") else 1e-7)
        return out, cfg["ms"]


def check(out):
    err = float(np.max(np.abs(out - REF)) / np.max(np.abs(REF)))
    return err < 1e-4, err


def cfg(i, ms, **kw):
    return dict(id=i, ms=ms, **kw)


def test_fastest_correct_valid_candidate_wins():
    f = Fake()
    cands = [cfg(1, 3.0), cfg(2, 0.5, wrong=True), cfg(3, 0.2, threads=2048), cfg(4, 1.0),
             cfg(5, 0.1, boom=True)]
    valid = lambda c: None if c.get("threads", 0) <= 1024 else "2048 threads > 1024"  # noqa: E731
    r = S.search(cands, f.run, check, default=cfg(0, 2.0), valid=valid, budget_s=100,
                 clock=f.clock)
    st = {t.config["id"]: t.status for t in r.trials}
    assert st == {0: "ok", 1: "pruned", 2: "wrong", 3: "invalid", 4: "ok", 5: "error"}
    assert r.trials[0].is_default and r.default.config["id"] == 0
    assert r.best.config["id"] == 4
    assert r.speedup == pytest.approx(2.0)
    assert 3 not in f.runs                                    # invalid: never dispatched
    assert f.runs[2] == 2                                     # wrong: warm-up only, never timed
    assert "2048 threads" in r.trials[3].reason and "RuntimeError" in r.trials[5].reason


def test_hopeless_candidates_stop_early():
    f = Fake()
    r = S.search([cfg(1, 10.0), cfg(2, 1.1)], f.run, check, default=cfg(0, 1.0),
                 budget_s=100, reps=5, clock=f.clock)
    assert f.runs[0] == 7 and f.runs[2] == 7                 # 2 warm-up + 5 timed
    assert f.runs[1] == 4 and r.trials[1].status == "pruned"  # 2 warm-up + 2 timed
    assert r.best.config["id"] == 0 and r.speedup == 1.0


def test_warm_up_lasts_until_times_settle():
    times = iter([50.0, 20.0, 8.0, 3.0, 2.9] + [3.0] * 20)
    n = [0]

    def run(c):
        n[0] += 1
        return REF, next(times)
    r = S.search([], run, check, default=cfg(0, 0), budget_s=100, reps=3)
    assert n[0] == 5 + 3 and r.default.times_ms == [3.0, 3.0, 3.0]
    slow = iter([100.0 / 2 ** i for i in range(40)])
    n[0] = 0
    S.search([], lambda c: (n.__setitem__(0, n[0] + 1), (REF, next(slow)))[1], check,
             default=cfg(0, 0), budget_s=100, reps=1)
    assert n[0] == S.MAX_WARMUP + 1                     # never settles: capped


def test_budget_bounds_the_search_but_the_default_completes():
    f = Fake(compile_s=1.0)
    cands = [cfg(i, 1.0) for i in range(1, 20)]
    r = S.search(cands, f.run, check, default=cfg(0, 1.0), budget_s=2.5, reps=3, min_reps=2,
                 clock=f.clock)
    c = r.counts()
    assert r.default.status == "ok" and len(r.default.times_ms) == 3
    # each candidate costs ~1 s (compile): started at 0, 1.004, 2.008; none after 2.5 s
    assert c["ok"] == 3 and c["unrun"] == 17
    assert r.elapsed_s < 2.5 + 1.01                           # bounded overrun: one candidate
    assert all("budget" in t.reason for t in r.trials if t.status == "unrun")


def test_a_default_among_the_candidates_is_timed_once():
    f = Fake()
    d = cfg(0, 1.0)
    r = S.search([cfg(1, 2.0), dict(d)], f.run, check, default=d, budget_s=10, clock=f.clock)
    assert [t.config["id"] for t in r.trials] == [0, 1]


def test_wrong_default_gives_no_speedup_but_a_winner():
    f = Fake()
    r = S.search([cfg(1, 2.0)], f.run, check, default=cfg(0, 1.0, wrong=True), budget_s=10,
                 clock=f.clock)
    assert r.default.status == "wrong" and r.best.config["id"] == 1 and r.speedup is None


def test_nothing_correct_means_no_best():
    f = Fake()
    r = S.search([cfg(1, 1.0, wrong=True)], f.run, check, budget_s=10, clock=f.clock)
    assert r.best is None and r.default is None and r.speedup is None


def test_progress_is_reported_per_candidate():
    f = Fake()
    seen = []
    S.search([cfg(1, 2.0), cfg(2, 0.5)], f.run, check, default=cfg(0, 1.0), budget_s=10,
             clock=f.clock, progress=lambda d, n, t, b: seen.append((d, n, b.config["id"])))
    assert seen == [(1, 3, 0), (2, 3, 0), (3, 3, 2)]


def test_bad_arguments():
    with pytest.raises(ValueError, match="budget_s"):
        S.search([], None, check, budget_s=0)
    with pytest.raises(ValueError, match="at least 1"):
        S.search([], None, check, budget_s=1, reps=0)
