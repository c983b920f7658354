"""User errors in bench, report and tune end in one clear line on stderr, exit status 2,
no traceback, and before any time is spent (issue 15 items 9, 10, 11): non-finite budgets;
shapes too big to build; unwritable outputs checked before measuring; results files that
are binary, lack columns or end in a torn line (skipped and counted, and the next append
starts on a new line), also while 4 processes append; tune's errors on stderr; NaN never
written to a tuning database; Ctrl-C in bench or tune says in one line what was kept (130)."""
import json
import math

import pytest
from typer.testing import CliRunner

import foreground
from mpskern.bench import schema
from mpskern.cli.main import app
from test_bench import FakeTarget, fake_make


def cli(*args):
    return CliRunner().invoke(app, list(args))


def _clean_failure(r, *needles):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    err = " ".join(r.stderr.split())
    for n in needles:
        assert n in err, r.stderr


class Counting(FakeTarget):
    calls = 0

    def bind(self, spec, inputs, out_shape, dtype):
        Counting.calls += 1
        return super().bind(spec, inputs, out_shape, dtype)


@pytest.fixture
def fakes(monkeypatch):
    from mpskern.bench import targets
    Counting.calls = 0
    monkeypatch.setattr(targets, "make",
                        lambda n: Counting("cpu") if n == "cpu" else fake_make(n))
    monkeypatch.setattr(targets, "default_names", lambda: ["cpu"])


# -- item 9: budgets --------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "0", "-1"])
def test_bench_refuses_non_finite_or_non_positive_budget(fakes, bad):
    _clean_failure(cli("bench", "softmax", "--no-save", "--budget", bad),
                   "--budget must be > 0 seconds (and finite)")
    assert Counting.calls == 0


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_tune_refuses_non_finite_budget_on_stderr(bad, tmp_path):
    db = tmp_path / "tuning.json"
    r = cli("tune", "gemm", "--backend", "sim", "--shape", "8x8x8", "--budget", bad,
            "--db", str(db))
    _clean_failure(r, "give a finite, positive number of seconds")
    assert "error" not in r.stdout
    assert not db.exists()


def test_search_refuses_non_finite_budget():
    from mpskern.tuner import search
    for bad in (math.inf, math.nan):
        with pytest.raises(ValueError, match="finite, positive"):
            search.search([{}], None, None, budget_s=bad)


def test_tuning_database_never_holds_nan(tmp_path):
    from mpskern.tuning import db
    e = db.Entry(op="gemm", dtype="float32", config={"BM": 32}, device="d", architecture="",
                 family="apple7", backend="sim", shape=(8, 8, 8), bucket=None,
                 time_ms=float("nan"), default_time_ms=None, provenance={"budget_s": math.inf})
    with pytest.raises(ValueError):
        db.dump([e])
    path = tmp_path / "t.json"
    with pytest.raises(ValueError):
        db.save([e], str(path))
    assert not path.exists() or "NaN" not in path.read_text()


# -- item 11: shapes too big, outputs checked first ---------------------------------------
@pytest.mark.parametrize("shape", ["1000000,1000000", "99999999999999999999,2"])
def test_bench_shape_too_big_is_an_error_not_a_traceback(fakes, shape):
    _clean_failure(cli("bench", "softmax", "--no-save", "--shape", shape),
                   "softmax --shape rows=", "of memory", "is available here",
                   "give a smaller --shape")


def test_tune_shape_too_big_is_an_error_not_a_traceback(tmp_path):
    r = cli("tune", "gemm", "--backend", "sim", "--shape", "1000000x1000000x1000000",
            "--db", str(tmp_path / "t.json"))
    _clean_failure(r, "gemm --shape M=1000000,N=1000000,K=1000000", "of memory",
                   "give a smaller --shape")


# Shapes that numpy would allocate (lazily, on an overcommitting OS) but that do not fit in
# the memory available: refused from the shapes alone, before any input is built (else the
# inputs' random fill or the float64 reference gets the process OOM-killed). The available
# memory is patched to 64 MiB so that the cases stay small if the check were missing.
SMALL_MEMORY = 64 * 2**20
TOO_BIG = [("softmax", "4096,8192"), ("layer_norm", "8192,4096"), ("conv2d", "8,64,128,128,64,3"),
           ("matmul", "2048"), ("scaled_dot_product_attention", "1,8,2048,64"),
           ("max_pool2d", "16,64,128,128,3"), ("group_norm", "8,256,64,64")]


@pytest.fixture
def small_memory(monkeypatch):
    from mpskern import memory, ops
    from mpskern.ops.op import _ShapeRng
    monkeypatch.setattr(memory, "available_bytes", lambda: SMALL_MEMORY)
    built = []

    def guard(inputs):                  # building any real input is the failure
        return lambda self, s, dt, rng: (inputs(self, s, dt, rng) if isinstance(rng, _ShapeRng)
                                         else built.append(s) or 1 / 0)
    for sp in ops.TABLE.values():
        monkeypatch.setattr(type(sp), "inputs", guard(type(sp).inputs))
    return built


def _needs_line(r, op, dtype="float32"):
    _clean_failure(r, f"{op} --shape ", f"({dtype}) needs about", "bytes) of memory",
                   "64.0 MiB is available here", "give a smaller --shape")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("op,shape", TOO_BIG)
def test_bench_shape_beyond_available_memory_is_refused_before_allocating(fakes, small_memory,
                                                                         op, shape):
    r = cli("bench", op, "--no-save", "--shape", shape, "--dtype", "float16")
    _needs_line(r, op, "float16")
    assert Counting.calls == 0


@pytest.mark.parametrize("op,shape", TOO_BIG[:4])
def test_tune_shape_beyond_available_memory_is_refused_before_allocating(small_memory, tmp_path,
                                                                        op, shape):
    _needs_line(cli("tune", op, "--backend", "sim", "--shape", shape, "--db",
                    str(tmp_path / "t.json")), op)
    assert not small_memory


@pytest.mark.parametrize("op,shape", TOO_BIG[:4])
def test_profile_shape_beyond_available_memory_is_refused_before_allocating(small_memory, op,
                                                                           shape):
    _needs_line(cli("profile", op, "--shape", shape), op)
    assert not small_memory


def test_footprint_covers_the_inputs_and_results_it_estimates():
    """Op.footprint's shapes-only inputs are the real inputs' shapes and dtypes, its result
    size the op's, for every op's small presets; and what fits is not refused."""
    import numpy as np

    from mpskern import ops
    from mpskern.ops.op import _ShapeRng, _Shaped
    n = 0
    for name, sp in ops.TABLE.items():
        for p in ("tiny", "small"):
            for _, s in sp.preset(p) if p in sp.presets else ():
                for dt in ("float32", "float16"):
                    dry = {k: v for k, v in sp.inputs(s, np.dtype(dt), _ShapeRng()).items()
                           if isinstance(v, _Shaped)}
                    if sum(v.size for v in dry.values()) > 2e6:
                        continue
                    inp = sp.inputs(s, np.dtype(dt), np.random.default_rng(0))
                    real = {k: v for k, v in inp.items() if isinstance(v, np.ndarray)}
                    assert ({k: (v.shape, v.dtype) for k, v in real.items()} ==
                            {k: (v.shape, v.dtype) for k, v in dry.items()}), (name, s)
                    want = sp.reference(inp)
                    assert sp.out_elements(s, dry) == want.size, (name, s)
                    assert sp.footprint(s, dt) >= sum(v.nbytes for v in real.values()) + want.nbytes
                    sp.check_memory(s, dt)
                    n += 1
    assert n > 40


def test_bench_csv_unwritable_fails_before_measuring(fakes, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    r = cli("bench", "softmax", "--preset", "tiny", "--out", str(tmp_path / "res"),
            "--csv", str(f / "x.csv"))
    _clean_failure(r, f"--csv '{f / 'x.csv'}'", "cannot write")
    assert Counting.calls == 0
    assert not (tmp_path / "res" / "bench.jsonl").exists()


def test_bench_out_unwritable_fails_before_measuring(fakes, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    _clean_failure(cli("bench", "softmax", "--preset", "tiny", "--out", str(f / "sub")),
                   "cannot append to")
    assert Counting.calls == 0


def test_bench_existing_csv_survives_the_check(fakes, tmp_path):
    """The check opens for appending: a CSV from an earlier run is kept until this run
    writes its own (and no stray empty file is left where none was)."""
    out = tmp_path / "old.csv"
    out.write_text("keep")
    problem = schema.unwritable(out)
    assert problem is None and out.read_text() == "keep"
    assert schema.unwritable(tmp_path / "new.csv") is None
    assert not (tmp_path / "new.csv").exists()
    assert schema.unwritable(tmp_path / "a" / "b" / "new.csv") is None
    assert not (tmp_path / "a").exists()      # nor the folders it made to check


def test_report_without_inputs_leaves_no_out_folder(tmp_path):
    # the --out check made OUT (and its parents) before the inputs were found missing
    out = tmp_path / "new" / "report"
    r = cli("report", str(tmp_path / "missing.jsonl"), "--out", str(out))
    assert r.exit_code != 0 and "missing.jsonl" in r.output
    assert not (tmp_path / "new").exists()


@pytest.fixture
def rows():
    from mpskern import ops
    from mpskern.bench import runner
    sp = ops.get("softmax")
    cases = [("a", sp.complete({"rows": 4, "n": 5})), ("b", sp.complete({"rows": 3, "n": 7}))]
    got = runner.run("softmax", cases, ["float32"], [FakeTarget("cpu")], budget=0.02)
    return json.loads(json.dumps(schema.clean(got)))


def test_report_out_unwritable_is_an_error_before_reading(rows, tmp_path):
    res = tmp_path / "bench.jsonl"
    schema.append_jsonl(res, rows)
    f = tmp_path / "afile"
    f.write_text("x")
    _clean_failure(cli("report", str(res), "-o", str(f / "rep")), f"--out '{f / 'rep'}'")


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
                                  bytes(range(256)) * 4], ids=["png", "nul"])
def test_report_binary_file_names_it(tmp_path, data):
    b = tmp_path / "image.jsonl"
    b.write_bytes(data)
    _clean_failure(cli("report", str(b), "-o", str(tmp_path / "rep")), f"{b}:1: not UTF-8")


def test_report_row_without_op_is_an_error(rows, tmp_path):
    p = tmp_path / "bench.jsonl"
    bad = dict(rows[0])
    del bad["op"]
    schema.append_jsonl(p, rows[:1])
    with open(p, "a") as f:
        f.write(json.dumps(bad) + "\n")
    _clean_failure(cli("report", str(p), "-o", str(tmp_path / "rep")), f"{p}:2", "lacks op")
    assert not (tmp_path / "rep" / "index.html").exists()


@pytest.mark.parametrize("column, value", [("median_ms", "fast"), ("flops", [1, 2]),
                                           ("p10_ms", True), ("bytes", {"a": 1})])
def test_report_row_with_a_non_number_time_or_count_names_it(rows, tmp_path, column, value):
    """A hand-edited or damaged row with text where a number belongs was a pandas
    traceback from deep inside the report (could not convert string to float)."""
    p = tmp_path / "bench.jsonl"
    bad = dict(rows[0], **{column: value})
    schema.append_jsonl(p, rows[:1])
    with open(p, "a") as f:
        f.write(json.dumps(bad) + "\n")
    _clean_failure(cli("report", str(p), "-o", str(tmp_path / "rep")), f"{p}:2",
                   f"{column} is {value!r}")
    assert not (tmp_path / "rep" / "index.html").exists()


def test_report_row_without_schema_version_is_not_told_to_upgrade(tmp_path):
    p = tmp_path / "other.jsonl"
    p.write_text('{"name": "something else"}\n')
    _clean_failure(cli("report", str(p), "-o", str(tmp_path / "rep")), f"{p}:1",
                   "no schema_version")


# -- item 10: torn lines -------------------------------------------------------------------
def _torn_file(path, rows):
    schema.append_jsonl(path, rows[:1])
    text = json.dumps(rows[1])
    with open(path, "a") as f:
        f.write(text[:len(text) // 2])            # killed mid-append: no newline


def test_append_after_a_torn_line_starts_a_new_line(rows, tmp_path):
    p = tmp_path / "bench.jsonl"
    _torn_file(p, rows)
    schema.append_jsonl(p, rows[1:2])
    skipped = []
    got = schema.read_jsonl([p], skipped)
    assert [r["shape_key"] for r in got] == [rows[0]["shape_key"], rows[1]["shape_key"]]
    assert skipped == [f"{p}:2"]


def test_report_skips_and_counts_a_torn_last_line(rows, tmp_path):
    p = tmp_path / "bench.jsonl"
    _torn_file(p, rows)
    r = cli("report", str(p), "-o", str(tmp_path / "rep"))
    assert r.exit_code == 0, r.output
    assert f"skipped {p}:2: a torn line" in r.stderr
    assert (tmp_path / "rep" / "index.html").exists()


def test_a_damaged_middle_line_is_still_an_error(rows, tmp_path):
    p = tmp_path / "bench.jsonl"
    schema.append_jsonl(p, rows[:1])
    with open(p, "a") as f:
        f.write('{"op": garbage, "x": 1}\n')
    schema.append_jsonl(p, rows[1:2])
    with pytest.raises(ValueError, match=r"bench.jsonl:2: not JSON"):
        schema.read_jsonl([p])


def test_read_without_a_list_warns_about_torn_lines(rows, tmp_path):
    p = tmp_path / "bench.jsonl"
    _torn_file(p, rows)
    with pytest.warns(UserWarning, match="torn"):
        assert len(schema.read_jsonl([p])) == 1


def _append_many(path, rows, tag, n):
    for i in range(n):
        schema.append_jsonl(path, [dict(rows[i % len(rows)], run_id=f"{tag}-{i}")])


@pytest.mark.parametrize("start", ["empty", "torn"])
def test_concurrent_appends_keep_every_row(rows, tmp_path, start):
    """4 processes appending 100 rows each to one file (two benches sharing --out), also
    onto a torn last line: every row is read back whole, nothing is glued or lost."""
    import multiprocessing
    p = tmp_path / "bench.jsonl"
    if start == "torn":
        _torn_file(p, rows)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(p, rows, f"p{k}", 100)) for k in range(4)]
    for q in procs:
        q.start()
    for q in procs:
        q.join(60)
        assert q.exitcode == 0
    skipped = []
    got = schema.read_jsonl([p], skipped)
    ids = sorted(r["run_id"] for r in got if r["run_id"].startswith("p"))
    assert ids == sorted(f"p{k}-{i}" for k in range(4) for i in range(100))
    assert skipped == ([f"{p}:2"] if start == "torn" else [])


# -- Ctrl-C: what was kept is said, in one line, exit 130 -----------------------------------
class Interrupting(FakeTarget):
    """Ctrl-C arrives while the third case runs."""
    calls = 0

    def bind(self, spec, inputs, out_shape, dtype):
        Interrupting.calls += 1
        if Interrupting.calls == 3:
            raise KeyboardInterrupt
        return super().bind(spec, inputs, out_shape, dtype)


@pytest.mark.parametrize("save", ["out", "no-save"])
def test_bench_ctrl_c_says_which_rows_were_kept(monkeypatch, tmp_path, save):
    from mpskern.bench import targets
    Interrupting.calls = 0
    monkeypatch.setattr(targets, "make", lambda n: Interrupting("cpu"))
    out, csv = tmp_path / "res" / "bench.jsonl", tmp_path / "rows.csv"
    keep = ["-o", str(out)] if save == "out" else ["--no-save"]
    r = cli("bench", "softmax", "--backend", "cpu", "--budget", "0.02", "--csv", str(csv),
            *keep, "--shape", "4x5", "--shape", "3x7", "--shape", "2x9", "--shape", "5x5")
    assert r.exit_code == 130, r.output
    assert "Traceback" not in r.output
    kept = f"appended to {out}" if save == "out" else "not saved (--no-save)"
    assert r.stderr.strip().splitlines()[-1] == (
        f"interrupted: the 2 finished rows of this run were {kept}; CSV: {csv}"), r.stderr
    if save == "out":
        assert [x["shape_key"] for x in schema.read_jsonl([out])] == ["rows=4,n=5", "rows=3,n=7"]
    assert len(csv.read_text().splitlines()) == 3           # header + the 2 rows


def test_tune_ctrl_c_says_nothing_was_stored(monkeypatch, tmp_path):
    from mpskern.tuner import tune as tuner

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(tuner, "tune", interrupted)
    db = tmp_path / "tuning.json"
    r = cli("tune", "gemm", "--backend", "sim", "--shape", "8x8x8", "--db", str(db))
    assert r.exit_code == 130, r.output
    assert r.stderr.strip().splitlines()[-1] == (
        "interrupted: while tuning gemm M=8,N=8,K=8,ta=0,tb=0,c=1: nothing stored for it")
    assert not db.exists()


def _ctrl_c(*a, **k):
    raise KeyboardInterrupt


@pytest.mark.parametrize("command", ["devices", "report", "selftest"])
def test_every_command_ends_ctrl_c_with_one_line_and_130(monkeypatch, tmp_path, rows, command):
    """Commands without their own Ctrl-C handling (devices, report, selftest, profile,
    check-msl) exited 130 saying nothing (typer's handler): now the one 'interrupted:' line."""
    import mpskern
    from mpskern.report import render
    if command == "devices":
        monkeypatch.setattr(mpskern, "devices", _ctrl_c)
        args = ["devices"]
    elif command == "report":
        p = tmp_path / "bench.jsonl"
        schema.append_jsonl(p, rows[:2])
        monkeypatch.setattr(render, "build", _ctrl_c)
        args = ["report", str(p), "-o", str(tmp_path / "rep")]
    else:
        from mpskern.cli import selftest
        monkeypatch.setattr(selftest, "run", _ctrl_c)
        monkeypatch.setattr(selftest, "run_isolated", _ctrl_c)
        args = ["selftest", "--op", "softmax", "--backend", "cpu",
                "--json", str(tmp_path / "st.json")]
    r = cli(*args)
    assert r.exit_code == 130, r.output
    assert "Traceback" not in r.output
    assert r.stderr.strip().splitlines()[-1] == (
        "interrupted: stopped before the end; its output files are written whole or not at "
        "all, so none is partial"), r.stderr
    assert not (tmp_path / "st.json").exists() and not (tmp_path / "rep" / "index.html").exists()


def test_bench_real_sigint_keeps_whole_rows(tmp_path):
    """A real SIGINT (what Ctrl-C sends) between cases of a real cpu bench."""
    import sys
    import time
    out = tmp_path / "bench.jsonl"
    with foreground.child([sys.executable, "-m", "mpskern.cli.main", "bench", "softmax",
                           "--backend", "cpu", "--budget", "0.3", "-o", str(out)]) as p:
        deadline = time.time() + 120
        while not (out.exists() and out.read_bytes().endswith(b"\n")):
            assert p.poll() is None and time.time() < deadline, p.communicate()
            time.sleep(0.05)
        _, err = foreground.interrupt(p, timeout=60)
    got = schema.read_jsonl([out])
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        f"interrupted: the {len(got)} finished rows of this run were appended to {out}"), err


def test_bench_repeated_dtype_or_backend_runs_once(fakes):
    """--dtype float32 --dtype float32 measured every case twice (two identical rows; a
    repeated --backend already ran once)."""
    r = cli("bench", "softmax", "--no-save", "--shape", "4,4", "--dtype", "float32", "--dtype",
            "float32", "--backend", "cpu", "--backend", "cpu", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(x["dtype"], x["backend"]) for x in rows] == [("float32", "cpu")]
