"""Timing statistics and the timing protocol on synthetic samples and a fake clock."""
import numpy as np
import pytest

from mpskern.bench import stats, timing


def test_known_percentiles():
    s = stats.summarize(np.arange(1, 102, dtype=float))      # 1..101
    assert s.median == 51 and s.p10 == 11 and s.p90 == 91
    assert s.p25 == 26 and s.p75 == 76 and s.iqr == 50
    assert s.n == 101 and s.min == 1 and s.max == 101


def test_mad_flags_exactly_the_outliers():
    rng = np.random.default_rng(0)
    x = 1.0 + 0.01 * rng.standard_normal(40)
    x[[3, 17]] = [1.5, 3.0]
    mask = stats.mad_outliers(x)
    assert list(np.flatnonzero(mask)) == [3, 17]
    s = stats.summarize(x)
    assert s.n_outliers == 2 and not s.unstable      # 2/40 is within the 10 % allowance
    assert abs(s.median - 1.0) < 0.01                # the median ignores them


def test_mad_zero_falls_back_to_mean_deviation():
    x = [1.0] * 19 + [5.0]
    assert list(np.flatnonzero(stats.mad_outliers(x))) == [19]
    assert not stats.mad_outliers([2.0] * 10).any()


def test_unstable_reasons():
    wide = stats.summarize([1.0, 1.3] * 10)
    assert wide.unstable and "IQR" in wide.unstable_reason
    many = stats.summarize([1.0] * 16 + [9.0] * 4)
    assert many.unstable and "outliers" in many.unstable_reason
    few = stats.summarize([1.0, 1.0, 1.0])
    assert few.unstable and "only 3 samples" in few.unstable_reason
    ok = stats.summarize([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0, 1.01, 0.99])
    assert not ok.unstable and ok.unstable_reason == ""


def test_bad_samples():
    with pytest.raises(ValueError, match="no samples"):
        stats.summarize([])
    with pytest.raises(ValueError, match="finite"):
        stats.summarize([1.0, float("nan")])


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_protocol_calibrates_inner_loop_and_respects_budget():
    clk = FakeClock()

    dt = 2.0 ** -13                                    # 0.122 ms per call, exact in binary

    def fn():
        clk.t += dt
    tm = timing.measure(fn, budget=0.05, warmup=0.01, clock=clk)
    assert tm.inner == 9                               # ceil(1 ms / 0.122 ms)
    assert tm.warmup_calls == 82                       # ceil(10 ms / 0.122 ms)
    assert len(tm.samples_ms) == 46                    # ceil(50 ms / (9 x 0.122 ms))
    assert np.allclose(tm.samples_ms, dt * 1e3) and tm.samples_ms == tm.wall_samples_ms
    assert not tm.device_timer


def test_protocol_min_samples_and_slow_cases():
    clk = FakeClock()

    def fast_budget(dt):
        def fn():
            clk.t += dt
        return fn
    # 10 ms calls, 20 ms budget: too slow for 10 samples; stops at 4 x budget (8 samples)
    tm = timing.measure(fast_budget(0.01), budget=0.02, warmup=0.0, clock=clk)
    assert tm.inner == 1 and 3 <= len(tm.samples_ms) < 10
    # 2 ms calls, 10 ms budget: the budget is spent after 5 samples, min_samples=10 wins
    tm = timing.measure(fast_budget(0.002), budget=0.01, warmup=0.0, clock=clk)
    assert len(tm.samples_ms) == 10


def test_protocol_uses_device_clock_when_given():
    clk = FakeClock()

    def fn():
        clk.t += 1e-3
    tm = timing.measure(fn, budget=0.01, warmup=0.0, clock=clk, device_ms=lambda: 0.25)
    assert tm.device_timer
    assert np.allclose(tm.samples_ms, 0.25) and np.allclose(tm.wall_samples_ms, 1.0)


def test_protocol_argument_errors():
    with pytest.raises(ValueError, match="budget"):
        timing.measure(lambda: None, budget=0)
    with pytest.raises(ValueError, match="min_samples"):
        timing.measure(lambda: None, min_samples=5, max_samples=2)
