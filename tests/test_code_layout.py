"""The layout rules of issue 12 that keep the code easy to follow, checked over the checkout's
source files (read as text, never imported):
  - no module in mpskern/ is loaded by a name string (importlib, __import__, runpy): every
    dependency is a plain import, so a reader (or a call-graph tool) can follow it.
"""
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mpskern"

# names whose only use is loading a module chosen at run time
NAME_STRING_LOADERS = {"importlib", "import_module", "__import__", "runpy", "spec_from_file_location",
                       "load_source", "find_spec"}


def _python_names(path):
    """(line, name) of every NAME token in a Python file (comments and strings are not names)."""
    src = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NAME:
            yield tok.start[0], tok.string


def name_string_loads(root):
    """'file:line: name' for every name-string module loader in root's .py/.pyx/.pxd files."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for line, name in _python_names(path):
            if name in NAME_STRING_LOADERS:
                found.append(f"{path.relative_to(root.parent)}:{line}: {name}")
    for path in sorted(list(root.rglob("*.pyx")) + list(root.rglob("*.pxd"))):
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = text.split("#", 1)[0]
            found += [f"{path.relative_to(root.parent)}:{line}: {n}" for n in sorted(NAME_STRING_LOADERS)
                      if n in code]
    return found


def test_no_module_is_loaded_by_a_name_string():
    found = name_string_loads(PACKAGE)
    assert not found, "plain imports only (try: import x / except ImportError):\n" + "\n".join(found)


def test_the_loader_check_finds_a_planted_load(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text('"""importlib is only named here"""\n# import_module too\nimport os\n')
    (pkg / "bad.py").write_text("import importlib\n\ntorch = importlib.import_module('torch')\n")
    (pkg / "worse.py").write_text("m = __import__('mlx.core')\n")
    (pkg / "_native.pyx").write_text("mod = __import__(name)  # a name string\n")
    assert name_string_loads(pkg) == ["pkg/bad.py:1: importlib", "pkg/bad.py:3: importlib",
                                      "pkg/bad.py:3: import_module", "pkg/worse.py:1: __import__",
                                      "pkg/_native.pyx:1: __import__"]
