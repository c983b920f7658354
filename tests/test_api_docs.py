"""The API reference (docs/api.md) is generated from the docstrings and in step with them;
every public name of mpskern is in it; every public function documents each of its
parameters, what it returns and an example that runs; help() shows the same text."""
import inspect
import pathlib
import pydoc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mpskern
from mpskern import _doc

ROOT = pathlib.Path(__file__).resolve().parent.parent
GROUPED = [n for _, names in _doc.groups() for n in names]


def _callables():
    """(name, function) for every public function, and Kernel.__call__."""
    out = [(n, getattr(mpskern, n)) for n in GROUPED if inspect.isfunction(getattr(mpskern, n))]
    return out + [("Kernel.__call__", mpskern.Kernel.__call__)]


def problems(name, fn, op=False):
    """What `fn`'s docstring lacks: a summary, each signature parameter in Parameters,
    Returns, an Example (and for an op: backend=, out=, Dtypes, Raises)."""
    s = _doc.sections(fn.__doc__)
    found = []
    if not s["summary"]:
        found.append(f"{name}: no summary")
    params = [p for p in inspect.signature(fn).parameters if p != "self"]
    described = _doc.parameters(s.get("Parameters", ""))
    for p in params:
        if p not in described:
            found.append(f"{name}: parameter {p} is not described")
    for p in described:
        if p not in params:
            found.append(f"{name}: Parameters describes {p}, which it does not take")
    for sec in ("Returns", "Example") + (("Dtypes", "Raises") if op else ()):
        if sec not in s:
            found.append(f"{name}: no {sec} section")
    return found


def test_api_md_is_generated_from_the_docstrings():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert text == _doc.render(mpskern), "docs/api.md is stale: run python docs/make_api.py"


def test_every_public_name_is_in_the_reference_once():
    public = _doc.public_names(mpskern)
    assert sorted(GROUPED) == sorted(set(GROUPED)), "a name is in two chapters"
    missing = [n for n in public if n not in GROUPED]
    assert not missing, f"public names missing from mpskern/_doc.py groups() (ops: the op table): {missing}"
    assert not [n for n in GROUPED if n not in public]
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for n in public:
        assert f"### {n}\n" in text
        assert inspect.getdoc(getattr(mpskern, n)), f"{n} has no docstring"


@pytest.mark.parametrize("name, fn", _callables(), ids=[n for n, _ in _callables()])
def test_every_public_function_is_documented(name, fn):
    assert problems(name, fn, op=name in _doc.groups()[0][1]) == []


def test_the_documentation_check_can_fail():
    def f(x, y, *, backend="auto", out=None):
        """Does f.

        Parameters
        ----------
        x : array
            The input.
        z : int
            Not a parameter.

        Returns
        -------
        None
        """
    got = problems("f", f, op=True)
    for needle in ("parameter y", "parameter backend", "parameter out", "describes z",
                   "no Example", "no Dtypes", "no Raises"):
        assert any(needle in g for g in got), (needle, got)
    assert problems("g", _doc.complete_op(f), op=True) != got      # the op part completed


@pytest.mark.parametrize("name, fn", _callables(), ids=[n for n, _ in _callables()])
def test_every_example_runs(name, fn, capsys):
    code = textwrap.dedent(_doc.sections(fn.__doc__)["Example"]).strip("\n")
    exec(compile(code, f"<{name} example>", "exec"), {"np": np, "mk": mpskern})


def test_help_shows_the_real_documentation():
    text = pydoc.render_doc(mpskern.metal_kernel, renderer=pydoc.plaintext)
    for needle in ("source : str", "macros : dict", "Kernel.__call__", "Example", "backend=\"sim\""):
        assert needle in text, needle
    call = pydoc.render_doc(mpskern.Kernel, renderer=pydoc.plaintext)
    for needle in ("grid : int", "threadgroup : int", "check : bool", "KernelCheckError"):
        assert needle in call, needle
    conv = pydoc.render_doc(mpskern.conv2d, renderer=pydoc.plaintext)
    assert "backend : str" in conv and "out : numpy.ndarray" in conv and "Dtypes" in conv


def test_the_documented_command_checks_and_writes(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "make_api.py"), "--check"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout + r.stderr
