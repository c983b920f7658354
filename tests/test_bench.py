"""mpskern bench: shape grammar, costs, references, the check, the runner, the results
schema and the CLI, on fake targets (the float64 reference cast to the dtype) so they run
whatever backends exist. FakeTarget is shared with test_report.py."""
import json
import math
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from mpskern import ops, peaks, reference, structs
from mpskern.bench import runner, schema, targets


class FakeTarget(targets.Target):
    """Computes the reference and casts it (slowed by `delay` s; `broken` adds 1; `raises`
    fails): a stand-in backend with a known speed and known correctness."""

    def __init__(self, name="cpu", delay=0.0, broken=False, raises=False, simulated=False):
        self.name, self.delay, self.broken, self.raises = name, delay, broken, raises
        self.simulated = simulated
        self.timer = "sim" if simulated else "wall"

    def device(self):
        return "Fake CPU"

    def peak(self):
        return None if self.simulated else peaks.Peak(100.0, None, 20.0, "fake peak")

    def bind(self, spec, inputs, out_shape, dtype):
        want = spec.reference(inputs).astype(dtype)

        def run():
            if self.raises:
                raise NotImplementedError("fake: no kernel")
            if self.delay:
                time.sleep(self.delay)
            return want + 1 if self.broken else want.copy()
        return run


_real_make = targets.make


def fake_make(name):
    """Fake targets by name; other names go to the real targets.make (its errors)."""
    fakes = {"cpu": FakeTarget("cpu"), "metal": FakeTarget("metal", delay=2e-4),
             "sim": FakeTarget("sim", delay=5e-4, simulated=True),
             "mps": FakeTarget("mps", broken=True),
             "torch-cpu": FakeTarget("torch-cpu", raises=True)}
    return fakes[name] if name in fakes else _real_make(name)


# -- shapes ---------------------------------------------------------------------------------
def test_shape_grammar_positional_keys_defaults():
    sp = ops.get("conv2d")
    s = sp.parse("2,64,56,56,128,3,pad=1")
    assert s == dict(N=2, C=64, H=56, W=56, K=128, R=3, S=3, stride=1, pad=1, dil=1, groups=1,
                     bias=1, act=0)
    assert sp.parse("c=8 h=10 k=4 r=1") == dict(N=1, C=8, H=10, W=10, K=4, R=1, S=1, stride=1,
                                                 pad=0, dil=1, groups=1, bias=1, act=0)
    assert ops.get("matmul").parse("512") == dict(M=512, N=512, K=512, batch=1)


SHAPE_ERRORS = {     # op: [(a malformed --shape, what the error says)]
    "conv2d": [("1,64,56", "lacks W|lacks K"),
               ("C=8,H=8,K=4,R=3,bogus=1", "unknown shape field 'bogus'"),
               ("C=8,H=8,K=4,R=x", "not an integer"),
               ("C=6,H=8,K=4,R=3,groups=4", "groups=4 must divide"),
               ("C=8,H=2,K=4,R=5", "larger than the padded input")],
    "matmul": [("0", "must be > 0"), ("1,2,3,4,5", "too many values")],
    "max_pool2d": [("1,8,16,16,3,2,2", "at most half"),
                   ("1,8,16,16,3,ceil=2", "ceil=2 must be 0 or 1"),
                   ("1,8,4,4,3,pad=1,dil=3", "larger than the padded input")],
    "avg_pool2d": [("1,8,16,16,3,dil=2", "unknown shape field 'dil'")],
    "group_norm": [("1,30,4,4,G=4", "G=4 must divide C=30")],
}


@pytest.mark.parametrize("op,text,msg", [(op, text, msg) for op, cases in SHAPE_ERRORS.items()
                                         for text, msg in cases])
def test_shape_grammar_errors(op, text, msg):
    with pytest.raises(ValueError, match=msg) as e:
        ops.get(op).parse(text)
    assert str(e.value).startswith(op + ":")               # names the op


def test_pool_fields_added_later_keep_old_keys():
    """dil and ceil came after results were saved: at their defaults they stay out of the
    shape key, so `report --compare` still matches rows of older runs."""
    sp = ops.get("max_pool2d")
    assert sp.key(sp.parse("1,64,112,112,3,2,1")) == "N=1,C=64,H=112,W=112,k=3,stride=2,pad=1"
    s = sp.parse("1,64,112,112,3,2,1,dil=2,ceil=1")
    assert sp.key(s).endswith("pad=1,dil=2,ceil=1") and sp.label(s).endswith("d2 ceil")


def test_every_preset_is_valid_and_the_default_conv_preset_is_small():
    for op, sp in ops.TABLE.items():
        for name, entries in sp.presets.items():
            assert entries, (op, name)
            for label, fields in entries:
                sp.complete(fields)
    total = 0.0
    sp = ops.get("conv2d")
    for _, s in sp.preset("small"):
        P = (s["H"] + 2 * s["pad"] - s["R"]) // s["stride"] + 1
        total += sp.costs(s, (1, s["K"], P, P), 4).flops
    assert total < 1.5e9            # `mpskern bench conv2d` stays about a minute on 2 cores


# -- costs and references -------------------------------------------------------------------
def test_costs():
    c = structs.conv2d_cost(N=1, C=64, H=56, W=56, K=64, R=3, S=3, P=56, Q=56, itemsize=4)
    assert c.flops == 2 * 64 * 56 * 56 * 64 * 9
    assert c.bytes == 4 * (64 * 56 * 56 * 2 + 64 * 64 * 9)
    g = ops.get("matmul").costs(dict(M=3, N=4, K=5, batch=2), (2, 3, 4), 2)
    assert g.flops == 2 * 2 * 3 * 4 * 5 and g.bytes == 2 * 2 * (15 + 20 + 12)
    assert math.isclose(g.intensity, g.flops / g.bytes)
    assert ops.get("conv2d").metric == "gflops" and ops.get("softmax").metric == "gbps"
    with pytest.raises(ValueError, match="unknown op 'fft'"):
        ops.get("fft")


def test_reference_conv_and_pool_against_loops():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 2))
    b = rng.standard_normal(6)
    st, pad, dil, g = 2, 1, 2, 2
    y = reference.conv2d(x, w, b, stride=st, padding=pad, dilation=dil, groups=g)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    want = np.zeros(y.shape)
    for n in range(2):
        for k in range(6):
            gi = k // 3
            for p in range(y.shape[2]):
                for q in range(y.shape[3]):
                    acc = b[k]
                    for c in range(2):
                        for r in range(3):
                            for s in range(2):
                                acc += w[k, c, r, s] * xp[n, gi * 2 + c, p * st + r * dil, q * st + s * dil]
                    want[n, k, p, q] = acc
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    x = rng.standard_normal((1, 2, 5, 5))
    m = reference.max_pool2d(x, 3, 2, 1)
    a = reference.avg_pool2d(x, 3, 2, 1)
    xm = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    xa = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for p in range(3):
        for q in range(3):
            assert m[0, 1, p, q] == xm[0, 1, 2 * p:2 * p + 3, 2 * q:2 * q + 3].max()
            assert np.isclose(a[0, 1, p, q], xa[0, 1, 2 * p:2 * p + 3, 2 * q:2 * q + 3].mean())


def test_reference_norms():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8, 2, 2))
    w, b = rng.standard_normal(8), rng.standard_normal(8)
    gn = reference.group_norm(x, 4, w, b, 0.0)
    blk = gn[1, 2:4]                                  # group 1 of sample 1, undo the affine
    z = (blk - b[2:4, None, None]) / w[2:4, None, None]
    assert abs(z.mean()) < 1e-12 and abs(z.var() - 1) < 1e-9
    s = reference.softmax(x.reshape(12, 8) * 50)
    np.testing.assert_allclose(s.sum(-1), 1.0)
    np.testing.assert_allclose(reference.log_softmax(x.reshape(12, 8)),
                               np.log(reference.softmax(x.reshape(12, 8))), atol=1e-12)


def test_check_tolerance_and_error():
    assert reference.tolerance("float16", 1) > reference.tolerance("float32", 1)
    assert reference.tolerance("float32", 10000) > reference.tolerance("float32", 1)
    assert reference.tolerance("float32", 10 ** 6) == 1e-4      # the ceiling
    assert reference.tolerance("float16", 10 ** 6) == 5e-3
    ref = np.array([1.0, -2.0, 4.0])
    assert reference.max_error(np.float32(ref), ref) == 0
    assert math.isclose(reference.max_error(ref + [0, 0.04, 0], ref), 0.01)
    assert reference.max_error(np.array([1, np.nan, 4]), ref) == math.inf
    assert reference.max_error(ref[:2], ref) == math.inf
    with pytest.raises(ValueError, match="no tolerance"):
        reference.tolerance("float64")


# -- runner and schema ----------------------------------------------------------------------
def _run(op="conv2d", tg=("cpu", "metal", "mps", "torch-cpu"), dtypes=("float32",)):
    sp = ops.get(op)
    cases = sp.preset("tiny")
    return runner.run(op, cases, dtypes, [fake_make(n) for n in tg], budget=0.02)


# conv2d's tiny preset's first case: its name and its full shape (N x C x H x W, R x S -> K,
# stride and padding), as Op.preset labels every preset row
TINY_3X3 = "tiny 3x3 16 (1x16x16x16 3x3->16 s1p1)"


def test_runner_checks_times_and_derives():
    rows = _run()
    assert len(rows) == 2 * 4
    for r in rows:
        schema.validate(r)
        assert r["schema_version"] == schema.SCHEMA_VERSION and r["op"] == "conv2d"
    by = {(r["shape_label"], r["backend"]): r for r in rows}
    cpu, metal = by[(TINY_3X3, "cpu")], by[(TINY_3X3, "metal")]
    for r in (cpu, metal):
        assert r["status"] == "ok" and r["n_samples"] >= 10
        assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert math.isclose(r["gflops"], r["flops"] / r["median_ms"] / 1e6)
        assert math.isclose(r["pct_peak"], r["gflops"])          # fake peak: 100 GFLOP/s
        assert r["max_err"] <= r["tolerance"] and r["device"] == "Fake CPU"
    assert cpu["speedup_vs_cpu"] == 1.0
    assert math.isclose(metal["speedup_vs_cpu"], cpu["median_ms"] / metal["median_ms"])
    assert metal["median_ms"] > 0.2                              # its 0.2 ms sleep is in there
    bad = by[(TINY_3X3, "mps")]
    assert bad["status"] == "check_failed" and bad["median_ms"] is None
    assert "exceeds tolerance" in bad["error"] and bad["max_err"] > bad["tolerance"]
    err = by[(TINY_3X3, "torch-cpu")]
    assert err["status"] == "error" and "NotImplementedError: fake: no kernel" in err["error"]


def test_runner_every_op_and_float16():
    for op in ops.TABLE:
        rows = _run(op, tg=("cpu",), dtypes=("float32", "float16"))
        assert rows and all(r["status"] == "ok" for r in rows), (op, rows[0]["error"])
        assert all(r[r["metric"]] > 0 for r in rows)


def test_jsonl_roundtrip_csv_and_version(tmp_path):
    rows = _run(tg=("cpu", "mps"))
    p = tmp_path / "r" / "bench.jsonl"
    schema.append_jsonl(p, rows[:2])
    schema.append_jsonl(p, rows[2:])
    back = schema.read_jsonl([tmp_path / "r"])
    assert len(back) == len(rows) and back[0]["shape"] == rows[0]["shape"]
    for line in p.read_text().splitlines():
        json.loads(line)                                    # one valid object per line
    schema.write_csv(tmp_path / "r.csv", back)
    import pandas as pd
    df = pd.read_csv(tmp_path / "r.csv")
    assert {"shape.C", "shape.R", "median_ms", "git_commit", "numpy"} <= set(df.columns)
    assert len(df) == len(rows)
    with open(p, "a") as f:
        f.write(json.dumps(dict(back[0], schema_version=schema.SCHEMA_VERSION + 1)) + "\n")
    with pytest.raises(ValueError, match="schema_version"):
        schema.read_jsonl([p])
    with pytest.raises(ValueError, match="missing columns"):
        schema.append_jsonl(p, [{"op": "x"}])


# -- CLI ------------------------------------------------------------------------------------
@pytest.fixture
def cli(monkeypatch):
    from mpskern.cli.main import app
    monkeypatch.setattr(targets, "make", fake_make)
    monkeypatch.setattr(targets, "default_names", lambda: ["cpu", "metal"])
    return lambda *args: CliRunner().invoke(app, list(args))


def test_cli_bench_table_jsonl_csv(cli, tmp_path):
    r = cli("bench", "conv2d", "--preset", "tiny", "--budget", "0.02", "--out", str(tmp_path),
            "--csv", str(tmp_path / "x.csv"))
    assert r.exit_code == 0, r.output
    assert "mpskern bench conv2d" in r.stdout and "tiny 3x3 16" in r.stdout
    rows = schema.read_jsonl([tmp_path / "bench.jsonl"])
    assert rows[0]["shape_label"] == TINY_3X3           # the preset's name and its full shape
    assert [x["backend"] for x in rows] == ["cpu", "metal"] * 2
    assert (tmp_path / "x.csv").read_text().count("\n") == 5


def test_cli_bench_json_only_on_stdout(cli, tmp_path):
    r = cli("bench", "softmax", "--shape", "16,100", "-s", "rows=4,n=33", "-d", "float16",
            "-b", "cpu", "-b", "sim", "--budget", "0.02", "--out", str(tmp_path), "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)                  # nothing but JSON on stdout
    assert [(x["shape_label"], x["backend"], x["simulated"]) for x in rows] == [
        ("16x100", "cpu", False), ("16x100", "sim", True), ("4x33", "cpu", False),
        ("4x33", "sim", True)]
    assert all(x["dtype"] == "float16" and x["preset"] == "custom" for x in rows)
    assert "simulator" in r.stderr


def test_cli_bench_failed_check_exits_1(cli, tmp_path):
    r = cli("bench", "matmul", "--preset", "tiny", "-b", "cpu", "-b", "mps", "--budget", "0.02",
            "--no-save")
    assert r.exit_code == 1 and "check_failed" in r.stderr
    assert not (tmp_path / "bench.jsonl").exists()


@pytest.mark.parametrize("args,msg", [
    (["--shape", "1,2"], "lacks"),
    (["--preset", "huge"], "no preset 'huge'"),
    (["--dtype", "float64"], "float32 or float16"),
    (["--backend", "cuda"], "unknown backend 'cuda'"),
    (["--budget", "0"], "must be > 0"),
])
def test_cli_bench_bad_arguments(cli, args, msg):
    r = cli("bench", "conv2d", "--no-save", *args)
    assert r.exit_code == 2 and msg in " ".join(r.stderr.split()), r.stderr


def test_cli_bench_out_not_writable(cli, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    r = cli("bench", "conv2d", "--preset", "tiny", "--out", str(f / "sub"))
    assert r.exit_code == 2 and "cannot append" in r.stderr


def test_unavailable_backend_says_why():
    from mpskern import backends
    from mpskern.cli.main import app
    missing = [n for n in backends.NAMES if not backends.availability(n)[0]]
    if not missing:
        pytest.skip("every backend is available here")
    r = CliRunner().invoke(app, ["bench", "softmax", "-b", missing[0], "--no-save"])
    assert r.exit_code == 2 and "unavailable" in r.stderr
    assert backends.availability(missing[0])[1].split()[0] in r.stderr


def test_mpskern_target_device_info_for_gpu_backends():
    class MpsLike:                         # every backend describes its device in .info
        info = {"name": "Apple M2", "family": 8, "memory": 2 ** 34}
        last_timing = (0.5, 0.9)
        last_config = {"primitive": "MPSMatrixMultiplication", "zero_copy": True}

    class MetalLike:
        info = {"name": "Apple M2", "family": 8}
        last_timing = None
        last_config = None

    for be in (MpsLike(), MetalLike()):
        t = targets.MpskernTarget("mps")
        t._be = be
        assert t.device() == "Apple M2" and t.gpu_family() == "apple8"
        assert t.peak() == peaks.lookup("Apple M2") and t.timer == "gpu"
    t = targets.MpskernTarget("mps")
    t._be = MpsLike()
    assert t.device_ms() == 0.5 and t.zero_copy() is True


def test_default_backends_exclude_sim():
    names = targets.default_names()
    assert "cpu" in names and "sim" not in names
