"""The device peak table (estimates with provenance) and measured peaks replacing them."""
from mpskern import peaks


def test_table_lookup_longest_name_first(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))
    m1 = peaks.lookup("Apple M1")
    pro = peaks.lookup("Apple M1 Pro")
    assert (m1.fp32_gflops, m1.gbps) == (2600.0, 68.0)
    assert (pro.fp32_gflops, pro.gbps) == (5300.0, 205.0)
    assert pro.source == peaks.ESTIMATE and not pro.measured
    assert pro.gflops("float16") == pro.gflops("float32")      # Apple7-9: FP16 SIMD = FP32
    assert peaks.lookup("Apple M5").gflops("float16") is None   # matrix units: not published
    assert peaks.lookup("Apple M10") is None and peaks.lookup("AMD Radeon") is None
    assert peaks.lookup(None) is None


def test_measured_peak_replaces_estimate(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))
    mine = peaks.Peak(2000.0, 2000.0, 60.0, "measured: test", measured=True)
    peaks.save_measured("Apple M1", mine)
    assert peaks.lookup("Apple M1") == mine
    assert peaks.lookup("Apple M1 Max").fp32_gflops == 10600.0  # others keep their estimate
    assert (tmp_path / "peaks.json").exists()


def test_cpu_peak_measured_once_per_machine_cached_with_provenance(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(peaks.REMEASURE_ENV, raising=False)
    monkeypatch.setattr(peaks, "_session_peak", {})
    p = peaks.measure_cpu(seconds=0.1)
    assert p.measured and p.fp32_gflops > 0.5 and p.gbps > 0.5 and "measured" in p.source
    calls = []
    monkeypatch.setattr(peaks, "measure_cpu", lambda: calls.append(1) or p)
    first = peaks.cpu_peak()
    assert peaks.cpu_peak() == first and calls == [1]
    assert (first.fp32_gflops, first.gbps) == (p.fp32_gflops, p.gbps)
    for needle in ("matmul", " at 20", "load average", "mpskern ", peaks.REMEASURE_ENV):
        assert needle in first.source, (needle, first.source)
    assert peaks.lookup(peaks.cpu_device_name()) == first
    # a later process (any load) uses the cached figures: no new measurement, same % of peak
    monkeypatch.setattr(peaks, "_session_peak", {})
    low = peaks.Peak(p.fp32_gflops / 2, None, p.gbps * 2, "measured: low", measured=True)
    monkeypatch.setattr(peaks, "measure_cpu", lambda: calls.append(2) or low)
    assert peaks.cpu_peak() == first and calls == [1]
    # asked to re-measure: measured again, the higher of each figure kept
    monkeypatch.setattr(peaks, "_session_peak", {})
    monkeypatch.setenv(peaks.REMEASURE_ENV, "1")
    q = peaks.cpu_peak()
    assert calls == [1, 2] and (q.fp32_gflops, q.gbps) == (p.fp32_gflops, p.gbps * 2)


def test_attained_flops_raise_a_measured_peak_only(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))
    m = peaks.Peak(50.0, None, 10.0, "measured: x", measured=True)
    assert peaks.raise_measured("cpu0", m, 40.0) is m
    up = peaks.raise_measured("cpu0", m, 80.0)
    assert up.fp32_gflops == 80.0 and up.gbps == 10.0 and "raised" in up.source
    assert peaks.lookup("cpu0") == up
    est = peaks.lookup("Apple M2")
    assert peaks.raise_measured("Apple M2", est, 1e6) is est    # estimates stay as published


def test_only_ops_that_count_work_done_raise_the_peak(monkeypatch, tmp_path):
    """conv2d counts direct-convolution FLOPs; the cpu backend's Winograd path does ~4x
    fewer, so its 'GFLOP/s' may pass the FMA peak. Was: such a case raised the saved peak,
    and every later case's % of peak read low."""
    from mpskern import ops
    from mpskern.bench import runner, targets
    monkeypatch.setenv("MPSKERN_CACHE_DIR", str(tmp_path))
    low = peaks.Peak(0.01, None, 10.0, "measured: test", measured=True)   # any machine beats it
    monkeypatch.setattr(peaks, "_session_peak", {})
    monkeypatch.setattr(peaks, "cpu_peak", lambda measure=True: low)
    cpu = targets.make("cpu")
    conv = ops.get("conv2d")
    rows = runner.run("conv2d", [("c", conv.parse("2,32,16,16,32,3,pad=1"))], ["float32"], [cpu],
                      budget=0.01, min_samples=3)
    assert rows[0]["status"] == "ok" and rows[0]["gflops"] > 0.01
    assert rows[0]["pct_peak"] > 100 and peaks.lookup(peaks.cpu_device_name()) is None
    mm = ops.get("matmul")
    rows = runner.run("matmul", [("m", mm.parse("128"))], ["float32"], [cpu], budget=0.01,
                      min_samples=3)
    assert rows[0]["status"] == "ok"
    assert peaks.lookup(peaks.cpu_device_name()).fp32_gflops == round(rows[0]["gflops"], 1)
