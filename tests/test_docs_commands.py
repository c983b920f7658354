"""Every command README.md and docs/*.md show (fenced shell blocks and inline `code` that
starts with mpskern, python, pytest or pip) works as shown against the mpskern these tests
import (installed by CI's `pip install ".[test]"`), run from a scratch folder (or from the
checkout, for commands that need its files: benchmarks/, tests/); and every python block
runs. So a doc change that breaks a command fails here.

Commands run in the order the docs show them, in one scratch folder (a report reads what
the bench before it wrote). Each runs as a *fast variant*, made only by these edits of the
documented tokens: a --preset or --shape is checked to be valid and then replaced by the
op's "tiny" preset (bench) or a small shape (tune); budgets are capped; narrowing options
are added (bench --budget, tune --budget/--reps/--db, selftest --op, one round of the
benchmark scripts, BENCHMARKS); a count written N runs with 2; file arguments a command reads are made from earlier
results. What cannot run here is said: `tune` without --backend ranks by the model here
(it must say so and succeed);
the peer benchmarks need torch (without it, one line naming the install); objc/check_shim.py
needs a macOS SDK (without it, one line naming the path; tests/test_shim_build.py runs it); `pip install` and
`pytest` are what .ci/run itself runs on a fresh clone (here: the extras exist, the pytest
markers and paths exist, no `python -m pytest`, which would import the checkout's unbuilt
package); a synopsis with placeholders (FILE, OP, ...) and a command in a ```text block
(shown, too slow to run: profiles) are checked against the command's --help, a literal
--shape against the op's grammar; docs/macos.md's python needs a Mac (compiled, not run).
"""
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

import mpskern
from mpskern import backends

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "results" / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
PROGRAMS = ("mpskern", "python", "pytest", "pip")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"\[.*|[A-Z][A-Z_]*(\.[a-z]+)?(\.\.\.)?(=[A-Z_]+\]?)?")
SHELL_LANGS = ("", "sh", "bash", "shell", "console")
TIMEOUT = 300


@dataclass
class Doc:
    where: str          # file:line
    tokens: list        # env assignments + argv, comments stripped
    kind: str = "command"
    text: str = ""

    @property
    def env(self):
        return dict(t.split("=", 1) for t in self.tokens[:self._argv_at()])

    @property
    def argv(self):
        return self.tokens[self._argv_at():]

    def _argv_at(self):
        i = 0
        while i < len(self.tokens) and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", self.tokens[i]):
            i += 1
        return i


def _commands_in(text, where):
    """Doc entries from one shell line or inline span: '$ ' prompts dropped, '#' comments
    stripped, '&&' chains split; None unless it starts with a known program."""
    text = text.strip()
    if text.startswith("$ "):
        text = text[2:]
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:
        return []
    out, cur = [], []
    for t in tokens + ["&&"]:
        if t == "&&":
            if cur:
                d = Doc(where, cur, text=" ".join(cur))
                if d.argv and d.argv[0] in PROGRAMS:
                    out.append(d)
            cur = []
        else:
            cur.append(t)
    return out


def documented():
    """Every command and python block of the docs, in order."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 2
            lang, body = m.group(1), m.group(2)
            if lang == "python":
                found.append(Doc(f"{name}:{line}", [], "python", body))
            elif lang in SHELL_LANGS + ("text",):
                for k, ln in enumerate(body.splitlines()):
                    cmds = _commands_in(ln, f"{name}:{line + k}")
                    for d in cmds if lang == "text" else ():
                        d.kind = "synopsis"   # shown, too slow to run (profiles): checked
                    found += cmds
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for m in INLINE.finditer(prose):
            line = prose.count("\n", 0, m.start()) + 1
            for d in _commands_in(m.group(1), f"{name}:{line}"):
                if d.argv[0] == "mpskern" and len(d.argv) == 2 and d.argv[1] not in (
                        "devices", "selftest"):
                    d.kind = "synopsis"       # a subcommand named in prose: `mpskern tune`
                found.append(d)
    for d in found:
        # a count written N (`--threads N`): run with 2
        d.tokens = ["2" if t == "N" else t for t in d.tokens]
        if d.kind == "command" and any(PLACEHOLDER.fullmatch(t) for t in d.argv[1:]):
            d.kind = "synopsis"
    seen, unique = set(), []
    for d in found:                  # each distinct command once, where it first appears
        key = (d.kind, d.text)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


DOCUMENTED = documented()


def test_the_docs_show_the_commands_this_test_knows():
    """The extraction finds the commands (a parsing slip must not test nothing)."""
    texts = [d.text for d in DOCUMENTED if d.kind == "command"]
    for want in ("mpskern bench conv2d", "mpskern report", "mpskern tune", "mpskern selftest",
                 "mpskern devices", "python benchmarks/cpu_vs_peers.py", "pytest -q",
                 "pip install ."):
        assert any(t.startswith(want) for t in texts), f"no documented command {want!r}"
    assert sum(d.kind == "python" for d in DOCUMENTED) >= 2


# -- running --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("docs")
    return d


def _mpskern_argv():
    """The installed `mpskern` script when it belongs to this interpreter, else the same
    entry point through -m (an in-place build has no script)."""
    exe = shutil.which("mpskern")
    if exe and pathlib.Path(exe).resolve().parent == pathlib.Path(sys.executable).resolve().parent:
        return [exe]
    return [sys.executable, "-m", "mpskern.cli.main"]


def _run(argv, cwd, env=None, timeout=TIMEOUT):
    full = dict(os.environ, **(env or {}))
    return subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout)


def _ok(r, what):
    assert r.returncode == 0, f"{what}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def _option(argv, *names):
    """(index, value) of the first of names in argv, or (None, None)."""
    for i, t in enumerate(argv):
        if t in names and i + 1 < len(argv):
            return i, argv[i + 1]
        for n in names:
            if t.startswith(n + "="):
                return i, t.split("=", 1)[1]
    return None, None


def _drop(argv, *names):
    out, skip = [], False
    for t in argv:
        if skip:
            skip = False
        elif t in names:
            skip = True
        elif not any(t.startswith(n + "=") for n in names):
            out.append(t)
    return out


def _bench_variant(args):
    """bench: --preset/--shape validated, then the op's tiny preset (a --model: its small
    one); budget capped."""
    from mpskern import models, ops
    _, model = _option(args, "--model", "-m")
    if model:
        models.get(model)                             # the documented network exists
        out = _drop(args, "--preset", "-p", "--shape", "-s", "--budget")
        return out + ["--preset", "small", "--budget", "0.01"]
    op = args[1]
    _, preset = _option(args, "--preset", "-p")
    ops.get(op).preset(preset or "small")             # the documented preset exists
    for i, t in enumerate(args):
        if t in ("--shape", "-s"):
            ops.get(op).parse(args[i + 1])            # the documented shape is valid
    _, budget = _option(args, "--budget")
    out = _drop(args, "--preset", "-p", "--shape", "-s", "--budget")
    return out + ["--preset", "tiny", "--budget", str(min(float(budget or 1), 0.01))]


def _tune_variant(args, scratch):
    from mpskern import ops
    op = next((t for t in args[1:] if not t.startswith("-")), None)
    shapes = [args[i + 1] for i, t in enumerate(args) if t == "--shape"]
    for s in shapes:
        ops.get(op).parse(s)                          # the documented shape is valid
    out = _drop(args, "--shape", "--budget", "--reps", "--db")
    if shapes:                                        # the op's small (simulator) shape
        spec = ops.get(op)
        out += ["--shape", spec.key(spec.tune_shape("sim"))]
    if op and "--list" not in args and "--merge" not in args:
        out += ["--budget", "0.3", "--reps", "1"]
    return out + ["--db", str(scratch / "tuning.json")]


def _files_read(args, scratch):
    """Results files a report/merge reads, made from what earlier commands wrote."""
    results = scratch / "results" / "bench.jsonl"
    for t in args:
        if t.endswith(".jsonl") and not (scratch / t).exists():
            assert results.exists(), "no bench results for the report to read"
            (scratch / t).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(results, scratch / t)
    _, merge = _option(args, "--merge")
    if merge and not (scratch / merge).exists():
        assert (scratch / "tuning.json").exists(), "no tuning database to merge"
        shutil.copy(scratch / "tuning.json", scratch / merge)


def _run_mpskern(doc, scratch):
    args = doc.argv[1:]
    sub = args[0] if args else None
    env = dict(doc.env, MPSKERN_TUNING_DB=str(scratch / "tuning.json"))
    if "--help" in args:
        pass                                          # cheap as it is
    elif sub == "bench":
        args = _bench_variant(args)
    elif sub == "tune":
        args = _tune_variant(args, scratch)
        if "--backend" not in args and not backends.availability("metal")[0]:
            if "--list" not in args and "--merge" not in args:
                r = _run(_mpskern_argv() + args, scratch, env)   # no Mac: the model ranks
                _ok(r, f"{doc.where}: mpskern {' '.join(args)}")
                assert "ranking by the model" in r.stdout + r.stderr, r.stdout + r.stderr
                return
    elif sub == "selftest":
        args = args + ["--op", "softmax"]
        if "--calibrate" in args and not backends.availability("metal")[0]:
            r = _run(_mpskern_argv() + args, scratch, env)     # measures a Mac's GPU
            lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
            assert r.returncode == 2 and len(lines) == 1 and "Metal GPU" in lines[0], lines
            pytest.skip("selftest --calibrate needs a Mac's GPU: said in one line")
    _files_read(args, scratch)
    _ok(_run(_mpskern_argv() + args, scratch, env), f"{doc.where}: mpskern {' '.join(args)}")


def _run_checkout(doc):
    argv, env = list(doc.argv), doc.env
    if argv[0] == "pip":
        extras = re.findall(r"\[(\w+)\]", " ".join(argv))
        pyproject = (ROOT / "pyproject.toml").read_text()
        for e in extras:
            assert re.search(rf"^{e} = \[", pyproject, re.M), f"{doc.where}: no extra {e!r}"
        pytest.skip("pip install: .ci/run runs it on a fresh clone")
    if argv[:3] == ["python", "-m", "pytest"]:
        raise AssertionError(f"{doc.where}: `python -m pytest` in a checkout after `pip install "
                             ".` imports the checkout's mpskern, which has no compiled "
                             "extension; show `pytest ...` (what .ci/run runs)")
    if argv[0] == "pytest":
        _pytest_args_exist(doc, argv[1:])
        pytest.skip("pytest: .ci/run runs `pytest -q` in the checkout; markers and paths "
                    "checked")
    if argv[0] == "python" and argv[1] == "objc/check_shim.py":
        r = _run([sys.executable] + argv[1:2] + ["--help"], ROOT)
        _ok(r, f"{doc.where}: {argv[1]} --help")
        if not os.path.exists(argv[2]):
            r = _run([sys.executable] + argv[1:], ROOT)
            lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
            assert r.returncode == 2 and len(lines) == 1 and argv[2] in lines[0], lines
        pytest.skip("check_shim.py needs a macOS SDK (a minute per run): without the SDK it "
                    "says so in one line; tests/test_shim_build.py runs it when one is here")
    if argv[0] == "python" and argv[1] == "docs/make_api.py":
        # rewriting the checkout's docs/api.md is what it does: here, check it is current
        _ok(_run([sys.executable, argv[1], "--check"] + argv[2:], ROOT,
                 dict(env, PYTHONPATH=_home())), f"{doc.where}: {doc.text} --check")
        return
    assert argv[0] == "python" and argv[1].startswith(("benchmarks/", "examples/")), doc.text
    script = os.path.basename(argv[1])
    argv = [sys.executable] + argv[1:]
    if argv[1].startswith("examples/"):               # the reduced networks; torch optional
        _ok(_run(argv + ["--small"], ROOT, dict(env, PYTHONPATH=_home())), doc.where)
        return
    quick, only = BENCHMARKS.get(script, ([], None))
    argv = _drop(argv, "--rounds", "--gap", "--target") + quick
    if only and "--only" not in argv:
        argv += ["--only", only]
    if script in NO_PEERS:            # mpskern alone: no torch needed
        if "--write" in argv:         # would rewrite the checkout's page: check it instead
            argv[argv.index("--write")] = "--check"
        _ok(_run(argv, ROOT, dict(env, PYTHONPATH=_home())), f"{doc.where}: {doc.text}")
        return
    try:
        import torch  # noqa: F401
    except ImportError:               # the peer benchmarks' peer
        r = _run(argv, ROOT, dict(env, PYTHONPATH=_home()))
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
        assert r.returncode != 0 and len(lines) == 1 and "pip install" in lines[0], lines
        pytest.skip(f"{script} needs torch (not installed here): said in one line")
    # a benchmark that ran through exits 0 whatever its ratios (a MISS row is a report);
    # a crash or a result that disagrees with the peer is non-zero (tests/test_bench_scripts.py)
    _ok(_run(argv, ROOT, dict(env, PYTHONPATH=_home())), f"{doc.where}: {doc.text}")


# benchmark script -> (options that make it a smoke run, the --only group when none is given)
_ONE_ROUND = ["--rounds", "1", "--gap", "0", "--target", "0.001"]
BENCHMARKS = {"cpu_vs_peers.py": (["--quick"] + _ONE_ROUND, "tiny"),
              "attention.py": (_ONE_ROUND, "attention"),
              "activations.py": (["--quick", "--acts", "relu"] + _ONE_ROUND, None),
              "networks.py": (["--small"] + _ONE_ROUND, "gpt2"),
              "roofline.py": (["--quick"], None),
              "activation_cost.py": (["--rounds", "1"], None)}
NO_PEERS = {"roofline.py", "activation_cost.py"}     # benchmark scripts that need no peer library


def _pytest_args_exist(doc, args):
    """The markers (-m) are registered, the paths exist, and a marker selects tests."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    for i, a in enumerate(args):
        if a == "-m":
            mark = args[i + 1]
            assert re.search(rf'"{mark}:', pyproject), f"{doc.where}: marker {mark} unknown"
            used = [p for p in (ROOT / "tests").glob("test_*.py")
                    if f"mark.{mark}" in p.read_text(encoding="utf-8")]
            assert used, f"{doc.where}: no test is marked {mark}"
        elif not a.startswith("-") and (i == 0 or args[i - 1] != "-m"):
            assert (ROOT / a).exists(), f"{doc.where}: {a} does not exist in the checkout"


def _home():
    """Where the tested mpskern lives (site-packages after an install, else the checkout)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(mpskern.__file__)))


def _synopsis(doc, cwd):
    """A command shape with placeholders: the subcommand and options exist in its --help
    (run from cwd, a scratch folder: from the checkout root `python -m` would import the
    source tree, which has no extension when mpskern is installed, as in CI)."""
    argv = doc.argv
    if argv[0] == "python" and (ROOT / argv[1]).is_file():     # a script of the checkout
        r = _run([sys.executable, str(ROOT / argv[1]), "--help"], cwd)
        _ok(r, f"{doc.where}: {argv[1]} --help")
    else:
        assert argv[0] == "mpskern", doc.text
        sub = argv[1]
        r = _run(_mpskern_argv() + [sub, "--help"], cwd)
        _ok(r, f"{doc.where}: mpskern {sub} --help")
    for i, t in enumerate(argv[2:], 2):
        opt = t.lstrip("[").split("=")[0].rstrip("]")
        if opt.startswith("-"):
            assert re.search(rf"(^|[\s,]){re.escape(opt)}\b", r.stdout), \
                f"{doc.where}: {opt} is not an option of mpskern {sub}"
        if opt == "--shape" and argv[0] == "mpskern" and i + 1 < len(argv) and \
                not any(PLACEHOLDER.fullmatch(a) or a == "..." for a in (argv[2], argv[i + 1])):
            # a literal shape of a literal op parses (`profile OP --shape ...` is a shape)
            from mpskern import ops
            op = ops.get(argv[2])
            op.validate(op.parse(argv[i + 1]))


IDS = [f"{d.where} {d.text or 'python'}"[:90] for d in DOCUMENTED]


@pytest.mark.parametrize("doc", DOCUMENTED, ids=IDS)
def test_documented_command_works(doc, scratch):
    if doc.kind == "python":
        if doc.where.startswith("docs/macos.md"):
            compile(doc.text, doc.where, "exec")
            pytest.skip("needs a Mac (mps backend); compiled only")
        r = _run([sys.executable, "-c", doc.text], scratch, {"PYTHONPATH": _home()})
        _ok(r, f"{doc.where}: python block")
    elif doc.kind == "synopsis":
        _synopsis(doc, scratch)
    elif doc.argv[0] == "mpskern":
        _run_mpskern(doc, scratch)
    else:
        _run_checkout(doc)
