"""The host compilers the simulator runs, found on PATH: the C++ compiler of its builds
(compiler.py), the clang of the strict check's type-check (msl_clang.py) and of the
profiling builds (profile_build.py). Each asks for its own candidates; a candidate counts
when it runs and says its version."""
import shutil
import subprocess

# clang's versioned names, newest first (Debian/Ubuntu install clang-19 but no plain clang)
CLANG_VERSIONS = range(22, 13, -1)


def versioned(name):
    """name and its versioned names: clang -> clang, clang-22, ..., clang-14."""
    return [name] + [f"{name}-{v}" for v in CLANG_VERSIONS]


def found(cands, want=None):
    """(path, first line of `--version`) of each candidate on PATH that runs, in order;
    want: only those whose version line contains it."""
    for c in cands:
        path = shutil.which(c)
        if not path:
            continue
        try:
            ver = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            continue
        if want is None or want in ver:
            yield path, ver
