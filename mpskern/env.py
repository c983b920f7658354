"""Every MPSKERN_* environment variable mpskern reads at run time, with what it takes: the one
place their values are checked. `import mpskern` checks every variable that is set (check())
and raises EnvError naming the variable, its value and what it takes; the `mpskern` command
prints that as one line and exits 2. An empty value is the same as unset.

The C side reads some of them itself (the thread count when the first op runs; MPSKERN_CPU_GEMM,
MPSKERN_CPU_CONV and MPSKERN_CPU_ATTENTION_ROWS per call, refusing an unknown value then too);
the rules below take only values it reads as written (atoi() would read '4abc' as 4 and
'apple7x' as 7).
Build and tool variables (setup.py, objc/check_shim.py, tests) are in BUILD, not checked here."""
import difflib
import os
import re
import sys
import warnings
from dataclasses import dataclass

from mpskern._cli_start import is_cli


class EnvError(ValueError):
    """An MPSKERN_* environment variable has a value mpskern does not take; the message has
    one line per such variable: its name, its value and what it takes."""


@dataclass(frozen=True)
class Var:
    name: str
    pattern: str      # a value it takes, in full (re.fullmatch); None: any text
    takes: str        # what it takes, in words (the error says it)
    does: str
    least: int = None  # a whole number's bounds
    most: int = None


def _flag(name, does):
    return Var(name, "[01]", "0 or 1", does)


def _choice(name, words, does):
    return Var(name, "|".join(words), ", ".join(words[:-1]) + " or " + words[-1], does)


def _text(name, takes, does):
    return Var(name, None, takes, does)


_WHOLE = r"[ \t]*\+?[0-9]+[ \t]*"     # what atoi() reads in full
VARS = {v.name: v for v in (
    Var("MPSKERN_NUM_THREADS", _WHOLE, "a whole number of threads from 0 to 256 (0: one per core)",
        "threads of the cpu backend, read when the first op runs (unset: one per core)", 0, 256),
    Var("MPSKERN_OUTPUT_POOL_MB", r"[ \t]*[0-9]+[ \t]*", "a whole number of MiB >= 0 "
        "(0 turns the output pool off)", "most MiB of freed results kept for reuse (unset: 256)"),
    _choice("MPSKERN_CPU_GEMM", ["auto", "own", "grid", "whole"],
            "the cpu GEMM's path, read per call (unset: auto)"),
    _choice("MPSKERN_CPU_CONV", ["auto", "gemm", "winograd", "winograd2", "session9"],
            "the cpu conv2d's algorithm, read per call (unset: auto)"),
    _choice("MPSKERN_CPU_ATTENTION_ROWS", ["auto", "128", "64", "32"],
            "query rows of the cpu attention's tasks, read per call (unset: auto)"),
    Var("MPSKERN_SIM_FAMILY", r"(?i:apple)?(7|8|9|10)", "apple7, apple8, apple9 or apple10",
        "the GPU family the simulator models (unset: apple8)"),
    Var("MPSKERN_SIM_STACK_KB", _WHOLE, "a whole number of KiB from 16 to 1048576",
        "each simulated thread's stack (unset: 128)", 16, 1 << 20),
    _flag("MPSKERN_SIM_KEEP", "1 keeps the simulator's intermediate build files"),
    Var("MPSKERN_METAL_MIN_FAMILY", r"(?i:apple)?[5-7]", "apple5, apple6 or apple7",
        "the oldest GPU family the metal backend takes (unset: apple7)"),
    _flag("MPSKERN_ZERO_COPY", "0: metal buffers are copies, never the numpy memory"),
    _flag("MPSKERN_METAL_FAST_MATH", "1: Metal's fast math (unset: IEEE, as the simulator)"),
    _flag("MPSKERN_MPS_QUIRKS", "0: no routing around known MPS bugs (unset: 1)"),
    _flag("MPSKERN_REMEASURE_PEAK", "1: measure the CPU's peak again (bench, report)"),
    _text("MPSKERN_CLANG", "a clang command or path, or none",
          "the clang that type-checks MSL for the simulator (none: no such check)"),
    _text("MPSKERN_PROFILE_CXX", "a clang++ command or path", "the compiler of profiling builds"),
    _text("MPSKERN_TUNING_DB", "a file path", "the user tuning database (tuning.json)"),
    _text("MPSKERN_CACHE_DIR", "a folder path", "compile cache, tuning database and peaks"),
)}

BUILD = {"MPSKERN_DEBUG": "setup.py", "MPSKERN_SANITIZE": "setup.py",
         "MPSKERN_SDK_CACHE": "objc/check_shim.py", "MPSKERN_MACOS_SDK": "objc/check_shim.py",
         "MPSKERN_TEST_BACKENDS": "tests", "MPSKERN_HOST_COVERAGE": "tests",
         "MPSKERN_SAN_DIR": ".ci/sanitize", "MPSKERN_BENCH_JOBS": "benchmarks/sim_bench.py"}


def problem(name, value):
    """Why `value` is not one VARS[name] takes ('NAME=value: expected ...'), or None."""
    v = VARS[name]
    if value is None or value.strip() == "" or v.pattern is None:
        return None
    ok = re.fullmatch(v.pattern, value) is not None
    if ok and v.most is not None:
        ok = v.least <= int(value) <= v.most
    return None if ok else f"{name}={value!r}: expected {v.takes}"


def get(name, default=None):
    """The variable's value (str, stripped), or `default` when unset or empty. Raises
    EnvError for a value it does not take."""
    value = os.environ.get(name)
    why = problem(name, value)
    if why:
        raise EnvError(why)
    return default if value is None or value.strip() == "" else value.strip()


def flag(name):
    """A 0-or-1 variable as a bool (unset: None)."""
    v = get(name)
    return None if v is None else v == "1"


def cache_dir():
    """mpskern's cache folder (compiled kernels, tuning database, peaks): $MPSKERN_CACHE_DIR,
    else ~/Library/Caches/mpskern on macOS, else $XDG_CACHE_HOME/mpskern or ~/.cache/mpskern."""
    d = get("MPSKERN_CACHE_DIR")
    if d:
        return os.path.expanduser(d)
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Caches", "mpskern")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mpskern")


def check():
    """EnvError listing (one line each) every set variable with a value it does not take."""
    bad = [w for w in (problem(n, os.environ.get(n)) for n in VARS) if w]
    if bad:
        raise EnvError("\n".join(bad))


def unknown():
    """'NAME is not a variable mpskern reads (did you mean ...?)' for each MPSKERN_* variable
    set that neither VARS nor BUILD has (a misspelt one is otherwise ignored in silence)."""
    known = list(VARS) + list(BUILD)
    out = []
    for n in sorted(k for k in os.environ if k.startswith("MPSKERN_") and k not in known):
        near = difflib.get_close_matches(n, known, 1, 0.8)
        out.append(f"{n} is not a variable mpskern reads" +
                   (f" (did you mean {near[0]}?)" if near else " (mpskern/env.py lists them)"))
    return out


def check_at_import():
    """check(); in the `mpskern` command, a bad value is 'error: ...' lines on stderr and
    exit status 2, as its other usage errors (an import's traceback said nothing more).
    Then a warning for each unknown() variable ('warning: ...' lines in the command)."""
    try:
        check()
    except EnvError as e:
        if not is_cli():
            raise
        for ln in str(e).splitlines():
            sys.stderr.write(f"error: {ln}\n")
        raise SystemExit(2) from None
    for ln in unknown():
        if is_cli():
            sys.stderr.write(f"warning: {ln}\n")
        else:
            warnings.warn(f"mpskern: {ln}", RuntimeWarning, stacklevel=3)
