"""Every script of the checkout (benchmarks/, examples/, docs/*.py) imports a usable mpskern
when the checkout is a fresh clone after `pip install .`: its source tree has no compiled
extension, so a script that puts the checkout root first on sys.path imports that tree and
fails (No module named 'mpskern._native'). benchmarks/native_calls.py and sim_bench.py did
so unconditionally; in a checkout built in place (every developer's) they worked, so only
CI's fresh clone could notice, and only for scripts the docs run. Here a copy of the
sources without the extension stands for the fresh clone and each script runs --help from
it, with the tested mpskern (installed, or this build) on PYTHONPATH."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import mpskern

ROOT = pathlib.Path(__file__).resolve().parent.parent
# examples run at top level; benchmarks/ and docs/ scripts have a __main__ (the others,
# such as benchmarks/checkout_path.py, are modules the scripts import)
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in
                 [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("examples/*.py"), *ROOT.glob("docs/*.py")]
                 if p.parent.name == "examples" or "__main__" in p.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """The checkout's Python sources and scripts, no compiled extension (a fresh clone)."""
    d = tmp_path_factory.mktemp("clone")
    skip = shutil.ignore_patterns("*.so", "*.pyd", "*.dylib", "__pycache__", "build")
    for sub in ("mpskern", "cli", "benchmarks", "examples", "docs"):
        if (ROOT / sub).is_dir():
            shutil.copytree(ROOT / sub, d / sub, symlinks=True, ignore=skip)
    assert not list((d / "mpskern").glob("_native*.so"))
    return d


def test_the_scripts_are_found():
    for want in ("benchmarks/native_calls.py", "benchmarks/sim_bench.py",
                 "benchmarks/cpu_vs_peers.py", "examples/gpt2.py", "docs/make_api.py"):
        assert want in SCRIPTS, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_from_a_fresh_clone(script, clone, tmp_path):
    home = os.path.dirname(os.path.dirname(os.path.abspath(mpskern.__file__)))
    env = dict(os.environ, PYTHONPATH=home)
    r = subprocess.run([sys.executable, str(clone / script), "--help"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert str(clone / "mpskern") not in out, f"{script} imported the unbuilt checkout:\n{out[-2000:]}"
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if r.returncode and len(lines) == 1 and "pip install" in lines[0]:
        pytest.skip(f"{script}: {lines[0]}")          # a peer library missing: said in one line
    assert r.returncode == 0, f"{script} --help: exit {r.returncode}\n{out[-2000:]}"


def test_import_from_the_clone_root_says_why_and_what_to_do(clone):
    """Python started in a fresh clone's root after `pip install .` (the README's examples
    typed there) imports the clone's unbuilt mpskern/ first (sys.path starts with the
    current folder): one ImportError naming the folder, the cause and both fixes, not
    "No module named 'mpskern._native'"."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(mpskern.__file__)))
    r = subprocess.run([sys.executable, "-c", "import mpskern"], cwd=clone,
                       env=dict(os.environ, PYTHONPATH=home), capture_output=True, text=True,
                       timeout=300)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and last.startswith("ImportError: mpskern: "), r.stderr[-2000:]
    for want in (str(clone / "mpskern"), "without its compiled extension",
                 "in the current folder", "run Python from another folder",
                 "python setup.py build_ext --inplace"):
        assert want in last, last
    # from any other folder the same interpreter imports the tested (built) mpskern
    r = subprocess.run([sys.executable, "-c", "import mpskern; print(mpskern.__file__)"],
                       cwd=clone / "docs", env=dict(os.environ, PYTHONPATH=home),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == os.path.abspath(mpskern.__file__), r.stderr
