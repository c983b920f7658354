"""The tuner's flow (discover the lookup key, search, store, later calls use it) with a
fake GPU backend and a fake op whose encoder consults lookup.choose like the real ones;
the real kernels on the simulator are exercised in test_tuning_sim.py."""
import numpy as np
import pytest

from mpskern import ops
from mpskern.tuner import tune as tuner
from mpskern.tuning import db, lookup

# a family without packaged defaults, so an untuned call uses the generic rule
SIM11 = dict(name="mpskern simulator (apple11)", architecture="", family=11, is_simulator=True,
            max_threads_per_threadgroup=1024, max_threadgroup_memory=32768, simd_width=32)
GENERIC = {"variant": "tiled", "BM": 32, "BN": 32, "BK": 8, "WM": 1, "WN": 1}
FAST = {"variant": "simd", "BM": 32, "BN": 32, "BK": 16, "WM": 1, "WN": 1}
WRONG = {"variant": "simd", "BM": 16, "BN": 16, "BK": 8, "WM": 1, "WN": 1}
HUGE = {"variant": "simd", "BM": 64, "BN": 64, "BK": 64, "WM": 8, "WN": 8}   # 2048 threads
MS = {"tiled": 2.0, "simd": 1.0}


class FakeBackend:
    name = "sim"

    def __init__(self, info):
        self.info = info
        self.broken = False         # every output wrong
        self.last_timing = None
        self.last_config = None


def valid_for(info):
    def valid(c):
        if 32 * c["WM"] * c["WN"] > info["max_threads_per_threadgroup"]:
            return "too many threads"
        return None
    return valid


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setenv(db.ENV_PATH, str(tmp_path / "tuning.json"))
    db.reset()
    be = FakeBackend(dict(SIM11))

    def make(op, shape, dtype="float32", seed=0, **options):
        if isinstance(shape, dict):                     # the CLI's parsed --shape
            shape = (shape["M"], shape["N"], shape["K"])
        M, N, K = shape
        a = np.random.default_rng(seed).uniform(-1, 1, (M, K)).astype(dtype)
        b = np.random.default_rng(seed + 1).uniform(-1, 1, (K, N)).astype(dtype)

        def call(backend):
            c = lookup.choose("gemm", dtype, (1, M, N, K), be.info, generic=GENERIC,
                              valid=valid_for(be.info))
            be.last_config = c.config
            be.last_timing = (MS[c.config["variant"]] * (1.0 + 0.01 * c.config["BK"]), 9.9)
            out = a @ b
            return out + 1.0 if c.config == WRONG or be.broken else out
        return tuner.Problem(op, tuple(shape), dtype, call,
                                a.astype(np.float64) @ b.astype(np.float64))

    monkeypatch.setattr(tuner, "make", make)
    monkeypatch.setattr(tuner, "gpu_backend", lambda name: be)
    yield be
    db.reset()


def test_tune_stores_the_winner_and_later_calls_use_it(fake):
    prob = tuner.make("gemm", (40, 24, 16))
    prob.call("sim")
    assert fake.last_config == GENERIC and lookup.last_choice().level == "generic"

    r = tuner.tune("gemm", (40, 24, 16), backend="sim", budget_s=5,
                   candidates=[WRONG, HUGE, FAST, GENERIC])
    st = {t.status for t in r.result.trials}
    assert r.result.best.config == FAST and r.result.speedup > 1.5
    assert st == {"ok", "wrong", "invalid"} or st == {"ok", "wrong", "invalid", "pruned"}
    assert r.key.shape == (1, 40, 24, 16) and r.key.op == "gemm"      # the encoder's key
    e = db.user_db().entries
    assert len(e) == 1 and e[0].config == FAST and e[0].backend == "sim"
    assert e[0].family == "apple11" and e[0].provenance["measured"] is True
    assert e[0].time_ms < e[0].default_time_ms

    prob.call("sim")                                    # a later call: the exact entry
    assert fake.last_config == FAST and lookup.last_choice().level == "exact"
    c = tuner.show("gemm", (40, 24, 16), backend="sim")
    assert c.level == "exact" and "tuned on this device" in c.explain()
    bigger = tuner.make("gemm", (48, 30, 16))        # same bucket 64x32x16
    bigger.call("sim")
    assert fake.last_config == FAST and lookup.last_choice().level == "bucket"


def test_limits_change_the_space(fake):
    fake.info["max_threads_per_threadgroup"] = 4096
    r = tuner.tune("gemm", (8, 8, 8), backend="sim", budget_s=5, candidates=[HUGE, GENERIC],
                   save=False)
    assert {t.config["WM"]: t.status for t in r.result.trials}[8] == "ok"
    assert r.entry is not None and r.path is None and len(db.user_db()) == 0


def test_the_default_wins_when_nothing_beats_it(fake):
    r = tuner.tune("gemm", (8, 8, 8), backend="sim", budget_s=5, candidates=[WRONG])
    assert r.result.best.config == GENERIC and r.result.speedup == 1.0
    assert db.user_db().entries[0].config == GENERIC


def test_nothing_correct_stores_nothing(fake):
    fake.broken = True
    r = tuner.tune("gemm", (8, 8, 8), backend="sim", budget_s=5, candidates=[FAST])
    assert r.result.best is None and r.entry is None and r.path is None
    assert len(db.user_db()) == 0


def test_unknown_op_and_dtype():
    with pytest.raises(ValueError, match="not a tunable op"):
        tuner.make("fft", (4,))
    with pytest.raises(ValueError, match="float32 or float16"):
        tuner.make("gemm", (4, 4, 4), "float64")
    with pytest.raises(ValueError, match="gemm shape: M,N=M,K=M"):    # the one grammar
        ops.get("gemm").parse("4x4xq")
    assert tuple(ops.get("conv2d").parse("1x2x3x4x5x3x3").values())[:7] == (1, 2, 3, 4, 5, 3, 3)
    with pytest.raises(ValueError, match="sim"):
        tuner.gpu_backend("cpu")


CPU_CASES = [(op, None) for op in ops.TABLE] + [
    ("conv2d", "2,6,9,8,4,3,2,stride=2,pad=1,groups=2"),
    ("conv2d", "1,4,6,6,4,3,3,pad=1,groups=4"),
    ("group_norm", "2,6,3,5,G=3"),
]


@pytest.mark.parametrize("op,shape", CPU_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_problem_references_agree_with_the_cpu_backend(op, shape, dtype):
    """Each problem's float64 reference against mpskern's CPU kernels (an independent
    implementation), and the check rejects a perturbed or mis-shaped output."""
    p = tuner.make(op, shape, dtype, backend="sim")
    ok, err = p.check(p.call("cpu"))
    assert ok, (op, shape, err)
    bad = p.reference.copy()
    bad.flat[0] += 0.05 * np.max(np.abs(bad))
    assert not p.check(bad)[0]
    assert not p.check(p.reference[..., :-1])[0]


def test_cli_tune_show_list_merge(fake, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from mpskern.cli.main import app
    monkeypatch.setattr(tuner, "candidates_for", lambda key, dev: [FAST, WRONG])
    monkeypatch.setenv("COLUMNS", "250")            # rich tables unwrapped
    run = CliRunner().invoke
    r = run(app, ["tune", "gemm", "--backend", "sim", "--shape", "40x24x16", "--budget", "5",
                  "-v"])
    assert r.exit_code == 0, r.output
    assert "BK=16" in r.output and "stored in" in r.output and "wrong" in r.output
    r = run(app, ["tune", "--show", "gemm", "--backend", "sim", "--shape", "40x24x16"])
    assert r.exit_code == 0 and "exact:" in r.output, r.output
    r = run(app, ["tune", "--list"])
    assert r.exit_code == 0 and "1x40x24x16" in r.output and "variant=simd BM=32" in r.output
    other = tmp_path / "other.json"
    r = run(app, ["tune", "--list", "--db", str(other)])
    assert "no entries yet" in r.output
    r = run(app, ["tune", "--merge", str(tmp_path / "tuning.json"), "--db", str(other)])
    assert r.exit_code == 0 and "merged 1 entries" in r.output, r.output
    for bad, msg in ((["tune", "fft"], "not a tunable op"),
                     (["tune", "gemm", "--backend", "sim", "--shape", "1x2xq"],
                      "gemm shape: M,N=M,K=M"),
                     (["tune", "gemm", "--budget", "0"], "positive")):
        r = run(app, bad)
        assert r.exit_code == 2 and msg in r.output, (bad, r.output)


def test_candidate_order_and_limits():
    """Real spaces: packaged defaults first, all valid for the device, none far larger
    than the problem, and smaller device limits give a smaller space."""
    from mpskern.tuning import spaces
    big = dict(SIM11, family=8)
    key = lookup.Choice({}, "generic", "", op="gemm", dtype="float32", shape=(1, 40, 24, 16))
    c = tuner.candidates_for(key, big)
    fam = [e.config for f in (7, 8, 9, 10) for e in db.family_defaults(f).for_op("gemm", "float32")]
    fam += spaces.shipped("gemm")
    fitting = [f for f in fam if f["BN"] <= 48]        # 64-wide tiles are oversized for N=24
    assert c[0] == fitting[0] and all(spaces.problems("gemm", x, big) == [] for x in c)
    assert all(x["BM"] <= 80 and x["BN"] <= 48 for x in c)
    small = dict(big, max_threads_per_threadgroup=64, max_threadgroup_memory=4096)
    cs = tuner.candidates_for(key, small)
    assert cs and len(cs) < len(c) and all(32 * x["WM"] * x["WN"] <= 64 for x in cs)
    assert tuner.candidates_for(key, big) == c                 # seeded: reproducible


def test_split_k_is_searched_only_for_long_k_and_few_tiles():
    info = dict(SIM11, family=8)
    long_k = lookup.Choice({}, "generic", "", op="gemm", dtype="float32", shape=(1, 64, 64, 4096))
    c = tuner.candidates_for(long_k, info)
    splits = [x for x in c if "split_k" in x]
    assert splits and {x["split_k"] for x in splits} == {2, 4, 8, 16}
    square = lookup.Choice({}, "generic", "", op="gemm", dtype="float32", shape=(1, 512, 512, 512))
    assert not [x for x in tuner.candidates_for(square, info) if "split_k" in x]


def test_cli_reports_an_unusable_database_as_one_warning_line(fake, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from mpskern.cli.main import app
    monkeypatch.setenv("COLUMNS", "250")
    (tmp_path / "tuning.json").write_text("{broken")
    r = CliRunner().invoke(app, ["tune", "--show", "gemm", "--backend", "sim", "--shape",
                                 "8x8x8"])
    assert r.exit_code == 0, r.output
    assert r.output.count("warning: mpskern: ignoring the tuning database") == 1
    assert "generic:" in r.output
