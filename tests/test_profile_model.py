"""The per-family performance model: its arithmetic on counters with known answers, the
chip/family table it reads, calibration (with a fake measurement: no Mac here), and where
its numbers surface: model-appleN bench rows (never compared with measured ones), the
tuner ranking by it (register rule respected), selftest --calibrate."""
import json

import pytest
from typer.testing import CliRunner

from mpskern import peaks, sim
from mpskern.profiling import calibrate, model
from mpskern.sim import profile_build

needs_profiler = [pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler"),
                  pytest.mark.skipif(profile_build.clang()[0] is None, reason="profiling needs clang")]


def counters(**over):
    """Counters of a dispatch that does nothing, with `over` replacing parts."""
    c = dict(groups=1, threads_per_group=256, tg_memory=0, simd_lanes_active=1.0, barriers=0,
             flops=dict(f32={}, f16={}, total=0.0), conversions=0.0, special={}, int_ops=0.0,
             int_div=dict(total=0.0, by_constant=0.0), simd_collectives={},
             simdgroup_matrix=dict(by_type={}, macs=0.0, flops=0.0),
             device=dict(load=dict(instr=0.0), store=dict(instr=0.0), line_traffic=0.0,
                         group_line_traffic=0.0, footprint=0.0),
             threadgroup=dict(load=dict(instr=0.0), store=dict(instr=0.0), bank_cycles=0.0))
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(c.get(k), dict):
            c[k] = dict(c[k], **v)
        else:
            c[k] = v
    return c


@pytest.fixture(autouse=True)
def _no_calibration(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))


def test_dram_bound_dispatch():
    m1 = peaks.chip("Apple M1")
    c = counters(groups=1000, device=dict(footprint=68e6))
    e = model.estimate(c, m1)
    assert e.bound == "DRAM" and e.times_ms["DRAM"] == pytest.approx(1.0)
    fam = peaks.FAMILIES[7]
    assert e.estimate_ms == pytest.approx(1.0 + fam.launch_us / 1e3)
    assert e.lower_ms == pytest.approx(e.estimate_ms)        # footprint is compulsory
    assert e.label == "modelled"



@pytest.mark.parametrize("dispatches", [2, 3])
def test_one_registers_estimate_serves_every_dispatch(dispatches):
    """registers_of's (value, source) pair applies to each dispatch of a call (gemm split-K:
    gemm + reduce; a three-dispatch op): it was indexed as one value per dispatch, so the
    second got the source text ('invalid literal for int()': `mpskern profile gemm --shape
    M=64,N=64,K=16384` failed) and a third an IndexError."""
    c = counters(groups=64, device=dict(footprint=1e6))
    s = model.summarize([c] * dispatches, "Apple M1", registers=(200, "estimated: test"))
    assert [e.registers for e in s.dispatches] == [200] * dispatches
    assert [e.registers_source for e in s.dispatches] == ["estimated: test"] * dispatches
    s = model.summarize([c] * 2, "Apple M1", registers=[(200, "a"), (None, None)])
    assert s.dispatches[0].registers == 200 and s.dispatches[1].registers != 200

def test_sampled_grids_dram_bytes_are_scaled_to_the_grid():
    # 2 of 8 threadgroups profiled: a buffer they touched 10 lines of (of 64) stands for 40
    # lines; a buffer every group reads (4 lines) is counted once, not 4 times
    dev = dict(footprint=14 * 128, footprint_exact=False, line_bytes=128,
               buffers=[dict(bytes=64 * 128, lines_touched=10),
                        dict(bytes=4 * 128 - 3, lines_touched=4)])
    c = counters(groups=8, groups_profiled=2, device=dev)
    assert model.dram_bytes(c) == (40 + 4) * 128
    assert model.dram_bytes(counters(groups=8, groups_profiled=8,
                                     device=dict(dev, footprint_exact=True))) == 14 * 128


@pytest.mark.parametrize("op,shape", [("softmax", "512,1024"), ("layer_norm", "300,200")])
def test_sampled_dram_time_matches_the_full_grid(op, shape):
    # before: a sampled grid's DRAM time counted only the profiled groups' lines (16 of
    # 512 groups: 3% of the bytes; softmax 4096x1024 was "134% of the roofline")
    _skip_without_profiler()
    from mpskern.profiling.run import model_of, profile_op
    times = []
    for max_groups in (16, 0):
        prof, info = profile_op(op, shape, max_groups=max_groups, sampled_only=False)
        assert prof.dispatches[0]["sampled"] == (max_groups == 16)
        times.append(model_of(prof, info).dispatches[0].times_ms["DRAM"])
    assert times[0] == pytest.approx(times[1], rel=0.05)


def test_matrix_bound_dispatch_and_occupancy():
    m1 = peaks.chip("apple7")
    n = 8 * 100_000                                   # simdgroup multiplies, 8 cores' worth
    c = counters(groups=800, threads_per_group=128, tg_memory=16384,
                 simdgroup_matrix=dict(by_type={"float,float,float,float": n}, macs=512 * n))
    e = model.estimate(c, m1, registers=48)
    # 60 KB of threadgroup memory per core holds 3 groups of 16 KB: 12 SIMD-groups per core
    assert e.resident_groups_per_core == 3 and e.occupancy_limit == "threadgroup memory"
    assert e.simdgroups_per_core == 12
    eff = model._interp(peaks.FAMILIES[7].occupancy, 12)
    assert e.occupancy_efficiency == pytest.approx(eff)
    issue = n * 18 / 8 / (4 * 1.278e9) * 1e3 / eff     # per core: n/8 multiplies, 4 schedulers
    assert e.bound == "issue" and e.times_ms["issue"] == pytest.approx(issue)
    assert e.lower_ms < e.estimate_ms
    # half multiplies are cheaper (17 cycles); registers limit occupancy when many
    ch = model.estimate(counters(**dict(c, simdgroup_matrix=dict(
        by_type={"float,half,half,float": n}, macs=512 * n))), m1, registers=48)
    assert ch.times_ms["issue"] == pytest.approx(issue * 17 / 18)
    big = model.estimate(dict(c, tg_memory=0), m1, registers=200)
    assert big.occupancy_limit == "registers" and big.resident_groups_per_core == 2


def test_few_groups_use_few_cores_and_integer_work_overlaps_from_apple9():
    c = counters(groups=2, int_ops=32 * 4e6, flops=dict(f32=dict(add=32 * 4e6), total=32 * 4e6))
    e7 = model.estimate(c, "Apple M1")                 # 2 groups: 2 of 8 cores busy
    e9 = model.estimate(c, "Apple M3")
    f7 = 4e6 * 2 / 2 / (4 * 1.278e9) * 1e3 / e7.occupancy_efficiency
    assert e7.times_ms["issue"] == pytest.approx(f7)             # fp + int add up
    clock9 = peaks.chip("Apple M3").ghz * 1e9
    f9 = 4e6 / 2 / (4 * clock9) * 1e3 / e9.occupancy_efficiency  # max(fp, int)
    assert e9.times_ms["issue"] == pytest.approx(f9)


def test_chips_and_families_table():
    for name, c in peaks.CHIPS.items():
        assert c.family in peaks.FAMILIES and c.cores > 0 and c.ghz > 0 and c.source
        assert peaks.TABLE[name].fp32_gflops == pytest.approx(c.fp32_gflops, rel=0.02)
    assert peaks.chip("apple9").name == "Apple M3" and peaks.chip(10).name == "Apple M5"
    assert peaks.chip("Apple M1 Max (32-core)").cores == 32
    with pytest.raises(ValueError, match="apple7..apple10"):
        peaks.chip("apple6")
    with pytest.raises(ValueError, match="unknown Apple GPU"):
        peaks.chip("Radeon")
    for fam in peaks.FAMILIES.values():          # every rate says where it comes from
        for f in ("cycles", "mma", "threadgroup_memory_per_core", "occupancy", "banks",
                  "l2_bytes_per_cycle", "launch_us"):
            assert fam.source(f) != peaks.ASSUMED, (fam.family, f)


def test_calibration_with_a_fake_device(tmp_path):
    c = counters(groups=100, device=dict(footprint=68e6))
    before = model.estimate(c, "Apple M1")

    def fake_measure(op, shape, dtype):          # "the GPU" takes twice the model's time
        est, _ = calibrate.modelled(op, shape, dtype, peaks.chip("Apple M1"))
        return 2 * est
    if not sim.available()[0] or profile_build.clang()[0] is None:
        pytest.skip("calibration models its cases in the simulator")
    cases = (("softmax", dict(rows=64, n=128)), ("gemm", dict(M=64, N=64, K=64, c=0)))
    rec = calibrate.calibrate("Apple M1", 7, cases=cases, measure=fake_measure)
    assert rec["factor"] == pytest.approx(2.0) and rec["cases"] == 2 and rec["chip"] == "Apple M1"
    saved = json.loads(open(model.calibration_path()).read())
    assert saved["families"]["7"]["factor"] == pytest.approx(2.0)
    after = model.summarize([c], "Apple M1")
    assert after.calibrated and after.estimate_ms == pytest.approx(2 * before.estimate_ms)
    assert not model.summarize([c], "Apple M2").calibrated       # other families unchanged


def test_selftest_calibrate_needs_a_mac():
    from mpskern.cli.main import app
    r = CliRunner().invoke(app, ["selftest", "--calibrate"], env={"COLUMNS": "200"})
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "nothing recorded" in text and "Metal GPU" in text


def test_register_rule_in_the_tile_spaces():
    from mpskern.tuning import spaces, tiles
    info = dict(max_threads_per_threadgroup=1024, max_threadgroup_memory=32768, simd_width=32)
    for op in ("gemm", "conv2d"):      # every configuration the tuner may try
        cands = spaces.candidates(op, info)
        assert cands and all(tiles.accumulators(c) <= 64 for c in cands), op
    big = {"variant": "simd", "BM": 128, "BN": 128, "BK": 8, "WM": 1, "WN": 1}
    assert tiles.accumulators(big) == 512
    assert any("accumulators per lane" in p for p in spaces.problems("gemm", big, info))
    for op in ("gemm", "conv2d"):
        for c in spaces.shipped(op):
            assert not spaces.problems(op, c, info), c


def test_model_rows_are_never_compared_with_measured_ones():
    _skip_without_profiler()
    from mpskern.bench import runner, targets
    tg = [targets.make("cpu"), targets.make("model-apple7"), targets.make("model-Apple M1 Max")]
    rows = runner.run("gemm", [("t", dict(M=64, N=64, K=64, ta=0, tb=0, c=0, act=0))], ["float32"], tg,
                      budget=0.05, min_samples=3)
    cpu, m7, mmax = rows
    assert cpu["timer"] == "wall" and cpu["speedup_vs_cpu"] == 1.0
    for r in (m7, mmax):
        assert r["status"] == "ok" and r["timer"] == "model" and r["backend_kind"] == "model"
        assert r["simulated"] and r["speedup_vs_cpu"] is None and r["max_err"] is None
        assert r["median_ms"] == pytest.approx(r["model"]["estimate_ms"])
        assert r["model"]["lower_ms"] <= r["median_ms"] and r["p10_ms"] is None
        assert r["pct_peak"] > 0 and r["config"]["kernel"].startswith("gemm_")
    assert m7["gpu_family"] == "apple7" and m7["device"] == "Apple M1 (model)"
    assert mmax["median_ms"] < m7["median_ms"]        # 32 cores vs 8
    with pytest.raises(ValueError, match="unknown Apple GPU"):
        targets.make("model-nothing")


def _skip_without_profiler():
    for m in needs_profiler:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])


def test_tuner_ranks_by_the_model(tmp_path):
    _skip_without_profiler()
    from mpskern.tuner import search
    from mpskern.tuner import tune as tuner
    cands = [{"variant": "simd", "BM": 32, "BN": 32, "BK": 8, "WM": 1, "WN": 1},
             {"variant": "tiled", "BM": 16, "BN": 16, "BK": 8, "WM": 1, "WN": 1},
             {"variant": "simd", "BM": 128, "BN": 128, "BK": 8, "WM": 1, "WN": 1}]
    r = tuner.tune("gemm", dict(M=64, N=64, K=64, c=0), "float32", "model-apple9", budget_s=600,
                   db_path=str(tmp_path / "db.json"), candidates=cands)
    by = {json.dumps(t.config, sort_keys=True): t for t in r.result.trials}
    assert by[json.dumps(cands[2], sort_keys=True)].status == search.INVALID     # 512 accumulators
    ok = [t for t in r.result.trials if t.status == search.OK]
    assert len(ok) >= 2 and r.result.best is min(ok, key=lambda t: t.median_ms)
    assert "verified in full" in r.result.best.reason
    assert r.device["model_chip"] == "Apple M3" and r.device["family"] == 9
    prov = r.entry.provenance
    assert prov["measured"] is False and "model of Apple M3" in prov["timer"]
    assert json.loads((tmp_path / "db.json").read_text())["entries"][0]["family"] == "apple9"


def test_prerank_keeps_the_models_best(tmp_path):
    _skip_without_profiler()
    from mpskern.tuner import model_rank
    from mpskern.tuner import tune as tuner
    prob = tuner.make("gemm", dict(M=64, N=64, K=64, c=0), "float32", backend="sim")
    with model_rank.as_family(8):
        key = tuner.key_of(prob, "sim")
    cands = [{"variant": "simd", "BM": 32, "BN": 32, "BK": 8, "WM": 1, "WN": 1},
             {"variant": "tiled", "BM": 16, "BN": 16, "BK": 8, "WM": 1, "WN": 1},
             {"variant": "simd", "BM": 16, "BN": 16, "BK": 8, "WM": 1, "WN": 1}]
    keep = model_rank.prerank(prob, key, 8, cands, 2, budget_s=600)
    assert len(keep) == 2
    with model_rank.as_family(8):
        times = {json.dumps(c): model_rank.modelled_ms(prob, key.op, c, peaks.chip(8))
                 for c in cands}
    assert [json.dumps(c) for c in keep] == sorted(times, key=times.get)[:2]
