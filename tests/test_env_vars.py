"""Every MPSKERN_* environment variable (mpskern/env.py): a value mpskern does not take is one
error naming the variable, the value and what it takes: `import mpskern` raises EnvError, the
`mpskern` command (its console script and python -m) prints one 'error:' line and exits 2, no
traceback. Values it takes import silently; the C side reads them as written (the per-call
MPSKERN_CPU_GEMM / MPSKERN_CPU_CONV / MPSKERN_CPU_ATTENTION_ROWS, the thread count); every
MPSKERN_ name in the source is one env.py knows."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mpskern
from mpskern import env

ROOT = Path(__file__).resolve().parent.parent

# values each variable must refuse: C's atoi/strtol/strcmp would have read them otherwise
BAD = {
    "MPSKERN_NUM_THREADS": ["abc", "4abc", "-2", "1.5", "257", "99999999999"],
    "MPSKERN_OUTPUT_POOL_MB": ["lots", "-1", "1_0", "1.5"],
    "MPSKERN_CPU_GEMM": ["fast", "OWN", " own", "own "],
    "MPSKERN_CPU_CONV": ["fft", "Gemm", "winograd4"],
    "MPSKERN_CPU_ATTENTION_ROWS": ["256", "16", "0", " 64", "AUTO"],
    "MPSKERN_SIM_FAMILY": ["apple11", "apple7x", "apple6", "m1"],
    "MPSKERN_SIM_STACK_KB": ["abc", "8", "64k", "2000000"],
    "MPSKERN_SIM_KEEP": ["yes", "true", "2"],
    "MPSKERN_METAL_MIN_FAMILY": ["4", "apple8", "5x"],
    "MPSKERN_ZERO_COPY": ["off", "no", "10"],
    "MPSKERN_METAL_FAST_MATH": ["on", "true", "10"],
    "MPSKERN_MPS_QUIRKS": ["off", "false"],
    "MPSKERN_REMEASURE_PEAK": ["yes", "2"],
}
GOOD = {
    "MPSKERN_NUM_THREADS": ["0", "1", " 3 ", "+2", "256"],
    "MPSKERN_OUTPUT_POOL_MB": ["0", "12", " 12 "],
    "MPSKERN_CPU_GEMM": ["auto", "own", "grid", "whole"],
    "MPSKERN_CPU_CONV": ["auto", "gemm", "winograd", "winograd2", "session9"],
    "MPSKERN_CPU_ATTENTION_ROWS": ["auto", "128", "64", "32"],
    "MPSKERN_SIM_FAMILY": ["apple7", "Apple10", "8"],
    "MPSKERN_SIM_STACK_KB": ["16", "256"],
    "MPSKERN_METAL_MIN_FAMILY": ["5", "apple6", "APPLE7"],
}
CHECKED = [n for n, v in env.VARS.items() if v.pattern is not None]


def test_every_checked_variable_has_bad_values_here():
    assert sorted(BAD) == sorted(CHECKED)


def test_every_choice_is_run_through_the_c_side_here():
    """A choice added to env.py (session9, an attention row count) is one the C side's drift
    test below must run: GOOD lists each choice variable's words exactly."""
    for name, v in env.VARS.items():
        if v.pattern and re.fullmatch(r"[a-z0-9]+(\|[a-z0-9]+)+", v.pattern):
            assert GOOD.get(name) == v.pattern.split("|"), name


@pytest.mark.parametrize("name", CHECKED)
def test_each_bad_value_is_refused_naming_it(name):
    for value in BAD[name]:
        assert env.problem(name, value) == f"{name}={value!r}: expected {env.VARS[name].takes}"
    for value in GOOD.get(name, ["0", "1"]) + ["", "  "]:
        assert env.problem(name, value) is None, (name, value)


def _child(args, **variables):
    return subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **variables})


def test_import_raises_one_line_per_bad_variable():
    bad = {n: BAD[n][0] for n in CHECKED}
    r = _child([sys.executable, "-c", "import mpskern"], **bad)
    assert r.returncode == 1
    assert "mpskern.env.EnvError: " in r.stderr
    tail = r.stderr.split("mpskern.env.EnvError: ", 1)[1].strip().splitlines()
    assert tail == [f"{n}={v!r}: expected {env.VARS[n].takes}" for n, v in bad.items()]


def test_python_sees_a_value_error():
    code = ("import os\ntry:\n    import mpskern\nexcept ValueError as e:\n"
            "    print(type(e).__name__, e)\n")
    r = _child([sys.executable, "-c", code], MPSKERN_OUTPUT_POOL_MB="abc")
    assert r.stdout.strip() == ("EnvError MPSKERN_OUTPUT_POOL_MB='abc': expected "
                                "a whole number of MiB >= 0 (0 turns the output pool off)")


def _console_script(tmp_path):
    """The `mpskern` command as pip installs it (its console-script wrapper)."""
    script = tmp_path / "mpskern"
    script.write_text("import re, sys\nfrom mpskern.cli.main import main\n"
                      "if __name__ == '__main__':\n"
                      "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      "    sys.exit(main())\n")
    return [sys.executable, str(script)]


@pytest.mark.parametrize("name", CHECKED)
def test_the_command_says_one_line_and_exits_2(tmp_path, name):
    value = BAD[name][-1]
    for cmd in (_console_script(tmp_path), [sys.executable, "-m", "mpskern.cli.main"]):
        r = _child(cmd + ["info"], **{name: value})
        assert r.returncode == 2, r.stderr
        assert r.stderr == f"error: {name}={value!r}: expected {env.VARS[name].takes}\n"
        assert r.stdout == ""


def test_good_values_import_and_are_read_as_written(tmp_path):
    good = {n: vs[-1] for n, vs in GOOD.items()}
    good.update(MPSKERN_NUM_THREADS=" 3 ", MPSKERN_SIM_KEEP="0", MPSKERN_ZERO_COPY="1",
                MPSKERN_METAL_FAST_MATH="0", MPSKERN_MPS_QUIRKS="1", MPSKERN_REMEASURE_PEAK="0",
                MPSKERN_CACHE_DIR=str(tmp_path / "cache"), MPSKERN_TUNING_DB="~/t.json")
    code = ("import mpskern, numpy as np; from mpskern import _outputs, env, peaks\n"
            "from mpskern.tuning import db\n"
            "print(mpskern.get_num_threads(), _outputs.POOL_BYTES >> 20, peaks.cache_path(),\n"
            "      db.user_path())\n")
    r = _child([sys.executable, "-W", "error", "-c", code], **good)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3", "12", str(tmp_path / "cache" / "peaks.json"),
                                os.path.expanduser("~/t.json")]


def test_one_cache_folder_for_compiles_tuning_and_peaks(tmp_path, monkeypatch):
    from mpskern import peaks
    from mpskern.sim import compiler
    from mpskern.tuning import db
    monkeypatch.delenv("MPSKERN_TUNING_DB", raising=False)
    for variables in ({"MPSKERN_CACHE_DIR": str(tmp_path / "c")},
                      {"MPSKERN_CACHE_DIR": "", "XDG_CACHE_HOME": str(tmp_path / "x")}):
        for k, v in variables.items():
            monkeypatch.setenv(k, v)
        d = env.cache_dir()
        assert d in (str(tmp_path / "c"), str(tmp_path / "x" / "mpskern"))
        assert compiler.cache_dir() == d
        assert db.user_path() == os.path.join(d, "tuning.json")
        assert peaks.cache_path() == os.path.join(d, "peaks.json")


@pytest.mark.parametrize("name, values, call", [
    ("MPSKERN_CPU_GEMM", GOOD["MPSKERN_CPU_GEMM"],
     lambda a: (mpskern.matmul(a, a, backend="cpu"), a.astype(np.float64) @ a)),
    ("MPSKERN_CPU_CONV", GOOD["MPSKERN_CPU_CONV"],
     lambda a: (mpskern.conv2d(a[None, None], a[None, None, :3, :3], backend="cpu")[0, 0],
                None)),
    ("MPSKERN_CPU_ATTENTION_ROWS", GOOD["MPSKERN_CPU_ATTENTION_ROWS"],
     lambda a: (mpskern.scaled_dot_product_attention(a[None], a[None], a[None], backend="cpu"),
                None))])
def test_the_c_side_takes_what_env_takes_and_refuses_the_rest(monkeypatch, name, values, call):
    """Read per call in C: every value env.py takes runs (same result), every one it refuses
    fails the call naming the variable (set after import, no check at import saw it)."""
    a = np.random.default_rng(0).standard_normal((20, 20)).astype(np.float32)
    got = []
    for v in values:
        monkeypatch.setenv(name, v)
        y, ref = call(a)
        if ref is not None:
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
        got.append(y)
    for y in got[1:]:
        np.testing.assert_allclose(y, got[0], rtol=1e-4, atol=1e-4)
    for v in BAD[name]:
        monkeypatch.setenv(name, v)
        with pytest.raises(ValueError, match=re.escape(f"{name}={v}")):
            call(a)


def _names_in_source():
    names = {}
    for folder in ("mpskern", "cli", "objc", "metal", "benchmarks", "examples", "tests", ".ci"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in (".py", ".pyx", ".pxi", ".pxd", ".c", ".h", ".cc", ".m", ".metal", "") \
                    and p.is_file() and p.name != "test_env_vars.py":
                if p.name in ("_native.c",) or p.name.startswith("_kernels"):
                    continue
                for n in re.findall(r"(?<![A-Z_])MPSKERN_[A-Z0-9_]*[A-Z0-9]", p.read_text(errors="replace")):
                    names.setdefault(n, str(p.relative_to(ROOT)))
    for n in re.findall(r"MPSKERN_[A-Z0-9_]*[A-Z0-9]", (ROOT / "setup.py").read_text()):
        names.setdefault(n, "setup.py")
    return names


def test_every_variable_the_source_names_is_in_env_py():
    names = _names_in_source()
    names.pop("MPSKERN_H", None)                       # objc/mpskern.h's include guard
    unknown = {n: where for n, where in names.items() if n not in env.VARS and n not in env.BUILD}
    assert not unknown, f"add these to mpskern/env.py (VARS, or BUILD): {unknown}"
    unread = [n for n in env.VARS if not any(_readers(n))]
    assert not unread, f"mpskern/env.py lists variables nothing reads: {unread}"


def _readers(name):
    for folder in ("mpskern", "cli", "objc"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in (".py", ".c", ".cc", ".m") and p.name not in ("env.py", "_native.c"):
                if name in p.read_text(errors="replace"):
                    yield p


def test_a_misspelt_variable_is_a_warning_naming_the_near_one(tmp_path):
    """An MPSKERN_ name no part of mpskern reads was ignored in silence (MPSKERN_NUM_THREAD=4
    ran on every core): a RuntimeWarning at import, a 'warning:' line in the command."""
    bad = {"MPSKERN_NUM_THREAD": "4", "MPSKERN_WHATEVER": "1"}
    r = _child([sys.executable, "-c", "import mpskern"], **bad)
    assert r.returncode == 0
    assert ("RuntimeWarning: mpskern: MPSKERN_NUM_THREAD is not a variable mpskern reads "
            "(did you mean MPSKERN_NUM_THREADS?)") in r.stderr
    assert "MPSKERN_WHATEVER is not a variable mpskern reads (mpskern/env.py lists them)" in r.stderr
    r = _child(_console_script(tmp_path) + ["--version"], **bad)
    assert r.returncode == 0 and r.stdout.startswith("mpskern ")
    assert r.stderr.splitlines() == [
        "warning: MPSKERN_NUM_THREAD is not a variable mpskern reads (did you mean "
        "MPSKERN_NUM_THREADS?)",
        "warning: MPSKERN_WHATEVER is not a variable mpskern reads (mpskern/env.py lists them)"]
    r = _child([sys.executable, "-W", "error", "-c", "import mpskern"],
               MPSKERN_TEST_BACKENDS="cpu", MPSKERN_SANITIZE="0")    # build / test ones: known
    assert r.returncode == 0, r.stderr
