"""Issue 15's file classes on `mpskern selftest --calibrate`'s record (calibration.json
beside the tuning database, read by every modelled estimate: `bench -b model-*`, `profile`,
`tune` on Linux): a damaged record is left out with one warning naming the file, never a
traceback, a NaN or a negative estimate; a measurement that is not a finite positive time
(a failed GPU timestamp) is left out of the factor and the record stays valid JSON.
No Mac here: the measurement is a fake, as in tests/test_profile_model.py."""
import json
import math
import os
import warnings

import pytest
from test_profile_model import counters

from mpskern import peaks, sim
from mpskern.profiling import calibrate, model
from mpskern.sim import profile_build


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))


DAMAGED = {
    "torn": '{"format": "mpskern-model-calibration", "families": {"7": {"fac',
    "not json": "\x89PNG\r\n\x1a\n",
    "a list": "[1, 2]",
    "families a list": '{"families": [7]}',
    "entry a number": '{"families": {"7": 3}}',
    "factor a string": '{"families": {"7": {"factor": "2"}}}',
    "factor NaN": '{"families": {"7": {"factor": NaN}}}',
    "factor Infinity": '{"families": {"7": {"factor": Infinity}}}',
    "factor negative": '{"families": {"7": {"factor": -2.0}}}',
    "factor true": '{"families": {"7": {"factor": true}}}',
    "family not a number": '{"families": {"seven": {"factor": 2.0}}}',
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_calibration_record_is_left_out_with_a_warning(name):
    path = model.calibration_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(DAMAGED[name])
    c = counters(groups=100, device=dict(footprint=68e6))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s = model.summarize([c], "Apple M1")
    assert not s.calibrated
    assert math.isfinite(s.estimate_ms) and s.estimate_ms > 0
    assert s.estimate_ms == pytest.approx(model.summarize([c], "Apple M1", calibrate=False).estimate_ms)
    said = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert any(path in m and "selftest --calibrate" in m for m in said), said


def test_a_good_calibration_record_still_applies():
    path = model.calibration_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"families": {"7": {"factor": 2.0}}}, f)
    c = counters(groups=100, device=dict(footprint=68e6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = model.summarize([c], "Apple M1")
    assert s.calibrated
    assert s.estimate_ms == pytest.approx(2 * model.summarize([c], "Apple M1", calibrate=False).estimate_ms)


@pytest.mark.skipif(not sim.available()[0] or profile_build.clang()[0] is None,
                    reason="calibration models its cases in the simulator's profiling mode")
def test_failed_measurements_are_left_out_and_the_record_stays_json():
    cases = (("softmax", dict(rows=64, n=128)), ("gemm", dict(M=64, N=64, K=64, c=0)),
             ("softmax", dict(rows=32, n=128)), ("gemm", dict(M=32, N=32, K=32, c=0)))
    bad = iter([float("nan"), float("inf"), 0.0])

    def measure(op, shape, dtype):     # three failed timestamps, then twice the model
        v = next(bad, None)
        if v is not None:
            return v
        est, _ = calibrate.modelled(op, shape, dtype, peaks.chip("Apple M1"))
        return 2 * est
    rec = calibrate.calibrate("Apple M1", 7, cases=cases, measure=measure)
    assert rec["cases"] == 1 and rec["factor"] == pytest.approx(2.0)
    assert [r["measured_ms"] for r in rec["rows"][:3]] == [None, None, None]
    with open(model.calibration_path(), encoding="utf-8") as f:
        saved = json.loads(f.read(), parse_constant=lambda c: pytest.fail(f"{c} in the record"))
    assert saved["families"]["7"]["factor"] == pytest.approx(2.0)
