"""benchmarks/attention.py's exit status: a benchmark reports (exit 0 with MISS rows when a
speed target is missed; 1 only under --strict), and fails (non-zero, the reason on stderr)
when a case crashes or disagrees with torch. Run on tiny shapes, with mpskern's op replaced
in the child process by a planted wrong or slow one, from a scratch folder (the checkout is
never put on sys.path: CI tests an installed mpskern)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import mpskern

pytest.importorskip("torch")   # the benchmark's peer

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "attention.py"
HOME = os.path.dirname(os.path.dirname(os.path.abspath(mpskern.__file__)))

# loads the script as a module (not __main__), shrinks its target shapes, and runs main() once
# per planted mode of mpskern.scaled_dot_product_attention (the script calls it through the
# module); prints per run what main returned, raised or exited with, and its output. One child
# process for all runs: importing torch takes seconds on a loaded machine.
CHILD = """
import contextlib, io, json, runpy, sys, time
import mpskern
g = runpy.run_path(sys.argv[1], run_name="attention_bench")
# run_path returns a copy of the script's globals: the shapes main() reads are its own
g["main"].__globals__["TARGET_SHAPES"] = ((1, 2, 24, 8),)
real = mpskern.scaled_dot_product_attention
def planted(mode):
    def f(*a, **kw):
        out = real(*a, **kw)
        if mode == "wrong":
            out = out + 1
        elif mode == "crash":
            raise RuntimeError("planted crash")
        elif mode == "slow":
            time.sleep(0.02)            # 20 ms per call: every ratio far below 1
        return out
    return f
ARGS = ["--only", "attention", "--rounds", "1", "--gap", "0", "--target", "0.001"]
runs = {}
for name, mode, extra in (("slow", "slow", []), ("slow --strict", "slow", ["--strict"]),
                          ("wrong", "wrong", []), ("crash", "crash", [])):
    mpskern.scaled_dot_product_attention = planted(mode)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            res = ["returned", g["main"](ARGS + extra)]
        except SystemExit as e:
            res = ["exited", e.code if isinstance(e.code, (int, str)) else repr(e.code)]
        except Exception as e:
            res = ["raised", f"{type(e).__name__}: {e}"]
    runs[name] = res + [out.getvalue()]
print(json.dumps(runs))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    env = dict(os.environ, PYTHONPATH=HOME, MPSKERN_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", CHILD, str(SCRIPT)], cwd=tmp_path_factory.mktemp("b"),
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_missed_target_is_a_report_not_a_failure(runs):
    how, code, out = runs["slow"]
    assert (how, code) == ("returned", 0), out
    assert "MISS (>=" in out and " 0 below target" not in out and "below target" in out, out


def test_strict_fails_on_a_missed_target(runs):
    how, code, out = runs["slow --strict"]
    assert (how, code) == ("returned", 1) and "MISS (>=" in out, out


def test_wrong_result_fails(runs):
    how, code, out = runs["wrong"]     # SystemExit(message): exit status 1, message on stderr
    assert how == "exited" and isinstance(code, str) and "disagrees with the peer" in code, out


def test_crash_fails(runs):
    how, what, out = runs["crash"]     # not swallowed: the interpreter exits 1 with the traceback
    assert (how, what) == ("raised", "RuntimeError: planted crash"), out
