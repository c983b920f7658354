"""`python -m pytest` in a checkout whose compiled extension is not built stops with one
line saying what to run (tests/conftest.py), instead of an import traceback per module.
Mimicked in a scratch "checkout": this conftest, a package `mpskern` whose _native is
missing, one test module."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent

BLOCK_MPSKERN = """import sys


class _NoMpskern:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "mpskern":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, _NoMpskern())
"""


@pytest.mark.parametrize("package", [True, False], ids=["not built", "not importable"])
def test_missing_extension_is_one_line_saying_what_to_run(tmp_path, package):
    root = tmp_path / "checkout"
    (root / "tests").mkdir(parents=True)
    shutil.copy(HERE / "conftest.py", root / "tests" / "conftest.py")
    (root / "tests" / "test_a.py").write_text("import mpskern\n\ndef test_a():\n    pass\n")
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    if package:
        (root / "mpskern").mkdir()
        (root / "mpskern" / "__init__.py").write_text("from mpskern._native import F32  # noqa\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if not package:
        # mpskern may be installed (CI installs it): hide it, as on a machine without it
        block = tmp_path / "block"
        block.mkdir()
        (block / "sitecustomize.py").write_text(BLOCK_MPSKERN)
        env["PYTHONPATH"] = str(block)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                       cwd=root if package else root / "tests", env=env, capture_output=True,
                       text=True, timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode == 4, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr and "Error" not in " ".join(lines)
    want = "python setup.py build_ext --inplace" if package else "pip install ."
    assert any(want in ln for ln in lines) and len(set(ln.strip("! ") for ln in lines)) <= 2
