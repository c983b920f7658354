"""The layout rules of issue 12 that keep the code easy to follow, checked over the checkout's
source files (read as text, never imported):
  - no module in mpskern/ is loaded by a name string (importlib, __import__, runpy): every
    dependency is a plain import, so a reader (or a call-graph tool) can follow it;
  - no source file in mpskern/ or cli/ is over 400 lines: a file that grows past it holds
    more than one concept, and is split by concept (DEVELOPERS.md's map names the parts).
"""
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mpskern"
MAX_LINES = 400
SOURCE_SUFFIXES = (".py", ".pyx", ".pxi", ".pxd")     # _native.c is Cython's output, not ours

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


def long_files(roots, limit=MAX_LINES):
    """'path: N lines' for every source file under roots longer than limit lines."""
    seen, found = set(), []
    for root in roots:
        for path in sorted(root.rglob("*")):
            real = path.resolve()
            if path.suffix not in SOURCE_SUFFIXES or real in seen or not path.is_file():
                continue
            seen.add(real)
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                found.append(f"{path.relative_to(ROOT) if ROOT in path.parents else path}: {n} lines")
    return found


def test_no_source_file_is_over_the_limit():
    found = long_files([PACKAGE, ROOT / "cli"])
    assert not found, (f"over {MAX_LINES} lines: split by concept (and update DEVELOPERS.md's "
                       "map):\n" + "\n".join(found))


def test_the_size_check_finds_a_long_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "sub" / "fits.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "_native.pxi").write_text("cdef int x\n" * (MAX_LINES + 5))
    (tmp_path / "_native.c").write_text("int x;\n" * 5000)           # generated: not counted
    assert long_files([tmp_path]) == [f"{tmp_path / '_native.pxi'}: {MAX_LINES + 5} lines",
                                      f"{tmp_path / 'sub' / 'long.py'}: {MAX_LINES + 1} lines"]
