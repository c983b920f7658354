"""The device tools archived beside their results (results/**/tools/: the scripts, shell
drivers and measuring-only patches of one run; results/README.md says what each needs). They
are archives, not maintained code, but none may be broken text: every Python file compiles,
every shell script parses (bash -n), every patch is a well-formed diff (git apply --stat);
and the tools that run against today's tree run in a quick mode here."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = sorted(p for p in (ROOT / "results").rglob("*") if p.is_file() and "tools" in p.parts)
# the tools run here in a quick mode: the others need an A/B build's patch, other OpenBLAS
# builds, torch or the device's folders (results/README.md); session 9's own_ab.py is this
# harness with fewer arms (compiled only)
QUICK = {"results/cpu-threads-xeon16/session10/tools/own_ab.py": ["1", "smallk", "1"]}


def _rel(p):
    return str(p.relative_to(ROOT))


def test_there_are_archived_tools():
    assert len(TOOLS) >= 10
    assert not [p for p in TOOLS if p.suffix not in (".py", ".sh", ".patch")], \
        "a new kind of tool file: add its check here"


@pytest.mark.parametrize("path", [p for p in TOOLS if p.suffix == ".py"], ids=_rel)
def test_python_tools_compile(path):
    compile(path.read_text(encoding="utf-8"), str(path), "exec")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("path", [p for p in TOOLS if p.suffix == ".sh"], ids=_rel)
def test_shell_tools_parse(path):
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
@pytest.mark.parametrize("path", [p for p in TOOLS if p.suffix == ".patch"], ids=_rel)
def test_patches_are_well_formed_diffs(path, tmp_path):
    r = subprocess.run(["git", "apply", "--stat", str(path)], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0 and "changed" in r.stdout, r.stderr


def test_every_quick_tool_is_archived_here():
    assert set(QUICK) <= {_rel(p) for p in TOOLS}


@pytest.mark.slow
@pytest.mark.parametrize("rel", sorted(QUICK))
def test_tools_that_run_on_this_tree_run(rel, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / rel), *QUICK[rel]], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("T1 ")]
    assert len(rows) >= 8 and all("own/auto" in ln or "fused/unfused" in ln for ln in rows), \
        r.stdout
