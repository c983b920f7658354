"""The host C++ compiler for the simulator: find it, preprocess MSL, build a kernel
library (a shared object), cache the result.

Cache: <cache dir>/sim/<key>.so where key hashes the source, the macros, the check flag,
the compiler (path and version), the flags, the front-end version and the contents of
the compatibility headers; so editing a header or switching compilers rebuilds. The cache
dir is $MPSKERN_CACHE_DIR, else $XDG_CACHE_HOME/mpskern, else ~/.cache/mpskern
(~/Library/Caches/mpskern on macOS).

An entry is trusted only as far as it can be checked: beside <key>.so, <key>.so.sum
records its size and SHA-256, and a library is loaded only when both match (a truncated,
empty or overwritten file would otherwise SIGBUS or fail to load in every later run; now it
is rebuilt). Builders of one key take <key>.lock (flock), write both files under temporary
names, fsync them and rename them into place, so a reader never maps a file that is still
being written and never pairs one builder's library with another's record.
"""
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from functools import lru_cache

try:
    import fcntl
except ImportError:   # not POSIX: builders race, which the checks below still survive
    fcntl = None

from mpskern import env
from mpskern._errors import KernelCompileError
from mpskern.paths import SIM_INCLUDE_DIR
from mpskern.sim import frontend, profile_build, strict, toolchain

# MSL the simulator claims to be (kernels may test __METAL_VERSION__), and a marker.
PRE_DEFINES = ["-D__METAL_VERSION__=310", "-D__MPSKERN_SIM__=1", "-D__HAVE_SIMDGROUP_MATRIX__=1"]
# -ffp-contract=off: no compiler fuses a*b+c where another would not (results must not
# depend on the host compiler; g++ in ISO mode does not fuse, clang does by default).
CXX_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-fno-math-errno", "-fvisibility=hidden", "-w",
             "-ffp-contract=off"]
# Used when the compiler takes them. -fstack-clash-protection: a frame larger than a page
# probes every page, so overflowing a GPU thread's fiber stack hits its guard page
# (reported) instead of a neighbour's stack. -ffloat16-excess-precision=none (clang's
# cc1): half arithmetic rounds to half after every operation, as the GPU's half ALUs and
# g++ do; clang otherwise keeps float precision between operations (tests/test_sim_half.py).
OPTIONAL_FLAGS = [("-fstack-clash-protection",), ("-Xclang", "-ffloat16-excess-precision=none")]
CHECK_FLAGS = ["-g", "-fsanitize=thread"]
_built = {}


def cache_dir():
    return env.cache_dir()


def _cache_error(e, path):
    """The OSError `e` met writing `path` in the cache, re-raised (same type) naming the
    cache folder and how to choose another."""
    return type(e)(e.errno, f"the simulator's compile cache {cache_dir()!r} is not usable: "
                   f"cannot write {path} ({e.strerror or e}); set MPSKERN_CACHE_DIR to a "
                   "writable folder")


def _cache_subdir():
    d = os.path.join(cache_dir(), "sim")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise _cache_error(e, d) from None
    return d


@lru_cache(maxsize=None)
def compiler():
    """(path, version line) of the host C++ compiler: $CXX, else clang++, g++, c++."""
    cands = [os.environ["CXX"]] if os.environ.get("CXX") else ["clang++", "g++", "c++"]
    return next(toolchain.found(cands), (None, None))


def available():
    """(ok, why): whether a host C++ compiler exists."""
    path, ver = compiler()
    if path is None:
        return False, "the simulator needs a C++17 compiler (clang++ or g++; or set CXX)"
    return True, ver


@lru_cache(maxsize=None)
def cxx_flags():
    """CXX_FLAGS plus the OPTIONAL_FLAGS this compiler accepts."""
    cxx, _ = compiler()
    flags = list(CXX_FLAGS)
    for f in OPTIONAL_FLAGS:
        r = subprocess.run([cxx, "-Werror", *f, "-x", "c++", "-fsyntax-only", "-"], input="int x;\n",
                           capture_output=True, text=True)
        if r.returncode == 0:
            flags.extend(f)
    return flags


@lru_cache(maxsize=None)
def _headers_hash():
    h = hashlib.sha256()
    files = [os.path.join(SIM_INCLUDE_DIR, n) for n in sorted(os.listdir(SIM_INCLUDE_DIR))]
    # the front-end's own modules (translation, checks, profiling builds): all of mpskern/sim/
    here = os.path.dirname(os.path.abspath(__file__))
    files += [os.path.join(here, n) for n in sorted(os.listdir(here)) if n.endswith(".py")]
    for p in files:
        name = os.path.basename(p)
        if os.path.isfile(p):
            h.update(name.encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def _stub_dir():
    """Empty stand-ins for <metal_*> headers: the first preprocessing pass must expand the
    kernel's own macros without pulling the compatibility headers into its output."""
    d = os.path.join(_cache_subdir(), "stubs-" + _headers_hash()[:12])
    if not os.path.isdir(d):
        tmp = "%s.tmp%d-%d" % (d, os.getpid(), threading.get_ident())
        try:
            os.makedirs(tmp, exist_ok=True)
            for name in os.listdir(SIM_INCLUDE_DIR):
                if name.startswith("metal_"):
                    open(os.path.join(tmp, name), "w").close()
            os.rename(tmp, d)
        except OSError as e:
            if not os.path.isdir(d):          # (else another builder renamed first: fine)
                raise _cache_error(e, tmp) from None
        finally:                              # an error or Ctrl-C leaves no tmp folder
            shutil.rmtree(tmp, ignore_errors=True)
    return d


def _run(cmd, stdin=None):
    try:
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    except OSError as e:
        raise KernelCompileError(f"simulator: cannot run {cmd[0]}: {e}") from None
    return r


def _log(stderr, limit=60):
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return "\n".join(lines)


def preprocess(source, macros):
    cxx, _ = compiler()
    defs = [f"-D{k}={v}" for k, v in macros.items()]
    cmd = [cxx, "-E", "-x", "c++", "-std=c++17", "-I", _stub_dir()] + PRE_DEFINES + defs + ["-"]
    r = _run(cmd, stdin=source)
    if r.returncode != 0:
        raise KernelCompileError("simulator: preprocessing failed:\n" + _log(r.stderr))
    return r.stdout


def key_of(source, macros, check, profile=False):
    cxx, ver = profile_build.clang() if profile else compiler()
    flags = profile_build.ir_flags() + ["profile", str(profile_build.TABLE_VERSION)] if profile else \
        cxx_flags() + (CHECK_FLAGS if check else [])
    h = hashlib.sha256()
    for part in (source, repr(sorted(macros.items())), str(bool(check)), cxx, ver,
                 repr(flags), str(frontend.FRONTEND_VERSION), _headers_hash()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


# -- cache entries: <key>.so, its record <key>.so.sum ("sha256 <hex> size <bytes>") ------
def _digest(path):
    """(size, sha256 hex) of the file at path."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def _record(size, digest):
    return f"sha256 {digest} size {size}\n"


def entry_ok(out):
    """Whether the cached library `out` is whole: its record exists and its size and
    SHA-256 match the file's (an entry without a record, from an older mpskern or cut
    short, is not trusted)."""
    try:
        with open(out + ".sum", encoding="ascii") as f:
            want = f.read()
        if os.path.getsize(out) != int(want.split()[3]):     # cheap check first
            return False
        return _record(*_digest(out)) == want
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return False


def _fsync(path, directory=False):
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:           # some file systems refuse to sync a directory: best effort
        pass
    finally:
        os.close(fd)


def _publish(tmp_so, out):
    """Move the freshly built tmp_so (same folder) into place with its record: both on
    disk (fsync) before the renames, the library first (a reader seeing the new library
    with the old record finds a mismatch and waits on the lock)."""
    size, digest = _digest(tmp_so)
    _fsync(tmp_so)
    tmp_sum = tmp_so + ".sum"
    with open(tmp_sum, "w", encoding="ascii") as f:
        f.write(_record(size, digest))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp_so, out)
    os.replace(tmp_sum, out + ".sum")
    _fsync(os.path.dirname(out), directory=True)


@contextlib.contextmanager
def _key_lock(out):
    """Exclusive per-key lock across processes and threads (flock holds per open file)."""
    path = out[:-3] + ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise _cache_error(e, path) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)          # releases the lock


def build(source, macros, check=False, origin=None, profile=False):
    """Path of the shared object for MSL `source` with `macros` (dict NAME -> value),
    verified (see the module docstring): a damaged cache entry is rebuilt. profile=True:
    a library for the profiling mode (profile_build.py; needs clang) with its table."""
    ok, why = available()
    if not ok:
        raise KernelCompileError("simulator: " + why)
    if profile and check:
        raise ValueError("a kernel library is built for checking or for profiling, not both")
    if profile and profile_build.clang()[0] is None:
        raise KernelCompileError("simulator: " + profile_build.clang()[1])
    source, macros, key, out = _entry(source, macros, check, origin, profile)
    if key in _built:
        return _built[key]
    if not _whole(out, profile):
        with _key_lock(out):
            if not _whole(out, profile):    # another process may have built it meanwhile
                _compile(source, macros, check, key, out, profile)
    _built[key] = out
    return out


def _entry(source, macros, check, origin, profile):
    """(source, macros, cache key, library path) of a build, as build() names them."""
    if not source.lstrip().startswith("#line") and not source.lstrip().startswith("# "):
        source = f'#line 1 "{origin or "kernel.metal"}"\n' + source
    macros = {str(k): str(v) for k, v in (macros or {}).items()}
    key = key_of(source, macros, check, profile)
    return source, macros, key, os.path.join(_cache_subdir(), key + ".so")


def is_built(source, macros, check=False, origin=None, profile=False):
    """Whether build() of these would load a library already built (no compile)."""
    if profile and profile_build.clang()[0] is None:
        return False
    _, _, key, out = _entry(source, macros, check, origin, profile)
    return key in _built or _whole(out, profile)


def _whole(out, profile):
    """entry_ok, and a profiling library's table beside it."""
    return entry_ok(out) and (not profile or os.path.exists(profile_build.table_path(out)))


def _compile(source, macros, check, key, out, profile=False):
    # Apple's compiler refuses what the C++ compiler would accept (mpskern/sim/strict.py);
    # foreign #includes become markers, so no host header is ever opened
    pre = preprocess(strict.guard_includes(source), macros)
    found = strict.check_preprocessed(pre)
    if found:
        raise KernelCompileError("simulator: the kernel source is not valid MSL (Apple's compiler "
                                 "refuses it too):\n" + strict.format_findings(found))
    try:
        tr = frontend.translate(pre, checked=check, profiled=profile)
    except frontend.TranslateError as e:
        raise KernelCompileError(f"simulator: {e}") from None
    cxx, _ = compiler()
    try:
        fd, tmp_cc = tempfile.mkstemp(suffix=".cc", prefix=key[:12] + "-",
                                      dir=os.path.dirname(out))
    except OSError as e:
        raise _cache_error(e, out) from None
    keep = env.flag("MPSKERN_SIM_KEEP")
    stem = tmp_cc[:-3]
    try:
        with os.fdopen(fd, "w") as f:
            f.write(tr.text)
        if profile:             # profile_build.py: clang, IR instrumentation, the table
            profile_build.build(tmp_cc, stem + ".so", _log)
            # the table first: a reader trusting the new library finds its table
            os.replace(profile_build.table_path(stem + ".so"), profile_build.table_path(out))
        else:
            _run_compiler(cxx, check, tmp_cc, stem, keep)
        if keep:
            os.replace(tmp_cc, out[:-3] + ".cc")
        _publish(stem + ".so", out)
    except OSError as e:
        raise _cache_error(e, out) from None
    finally:
        # whatever ends the build (an error, Ctrl-C) leaves no temporary file in the cache
        for tmp in ([] if keep else [tmp_cc]) + [stem + x for x in (
                ".o", ".so", ".so.sum", ".prof.json")]:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _run_compiler(cxx, check, tmp_cc, stem, keep):
    """Compile tmp_cc into stem.so (KernelCompileError with the compiler's log if it fails)."""
    tmp_so = stem + ".so"
    if check:
        # instrument, but do not link libtsan: the library defines the hooks itself
        obj = stem + ".o"
        r = _run([cxx] + [f for f in cxx_flags() if f != "-shared"] + CHECK_FLAGS +
                 ["-c", "-I", SIM_INCLUDE_DIR, tmp_cc, "-o", obj])
        if r.returncode == 0:
            r = _run([cxx, "-shared", obj, "-o", tmp_so, "-lm"])
    else:
        r = _run([cxx] + cxx_flags() + ["-I", SIM_INCLUDE_DIR, tmp_cc, "-o", tmp_so, "-lm"])
    if r.returncode == -signal.SIGINT:       # Ctrl-C reached the compiler too
        raise KeyboardInterrupt
    if r.returncode < 0:                # killed (out of memory?): not the source's fault
        raise KernelCompileError(f"simulator: the compiler {cxx} was killed by signal "
                                 f"{-r.returncode}:\n" + _log(r.stderr))
    if r.returncode != 0:
        raise KernelCompileError("simulator: the kernel source does not compile:\n" +
                                 _log(r.stderr) + (f"\n(generated C++: {tmp_cc})" if keep else ""))
