"""The simulator's compile cache (mpskern/sim/compiler.py) survives damage: a cached
library cut short, emptied, overwritten with garbage, or with its record missing or wrong,
is rebuilt instead of crashing (SIGBUS) or failing in every later run; concurrent builders
of one entry all succeed and leave one whole entry; an unusable cache folder is an error
naming MPSKERN_CACHE_DIR. Every run is a fresh process with its own cache folder (a process
keeps what it loaded, so damage shows in the next one), for a built-in op and a user kernel."""
import glob
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from mpskern import backends
from mpskern.sim import compiler

pytestmark = pytest.mark.skipif(not backends.availability("sim")[0],
                                reason="needs the simulator (a C++ compiler)")

# each prints one line the test compares with a known answer
PROGRAMS = {
    "builtin op": ("import numpy as np, mpskern\n"
                   "x = np.arange(6, dtype=np.float32).reshape(2, 3)\n"
                   "print(mpskern.softmax(x, backend='sim').astype(float).round(4).tolist())\n",
                   "[[0.09, 0.2447, 0.6652], [0.09, 0.2447, 0.6652]]"),
    "user kernel": ("import numpy as np, mpskern\n"
                    "k = mpskern.metal_kernel('''#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "kernel void twice(device float* y [[buffer(0)]],\n"
                    "                  uint i [[thread_position_in_grid]]) { y[i] = 2 * i; }\n"
                    "''', 'twice')\n"
                    "y = np.zeros(5, np.float32)\n"
                    "k(y, grid=(5,), threadgroup=(4,), backend='sim')\n"
                    "print(y.tolist())\n",
                    "[0.0, 2.0, 4.0, 6.0, 8.0]"),
}


def _run(code, cache, timeout=300):
    env = dict(os.environ, MPSKERN_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout)


def _libraries(cache):
    return sorted(glob.glob(os.path.join(str(cache), "sim", "*.so")))


def _check(r, want, what):
    assert r.returncode == 0, f"{what}: rc {r.returncode}\n{r.stderr[-2000:]}"
    assert r.stdout.strip().splitlines()[-1] == want, f"{what}: {r.stdout!r}"


def _damage(path, how):
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "empty":
        data = b""
    elif how == "garbage":
        data = bytes((i * 131 + 7) % 256 for i in range(len(data)))
    elif how == "one byte flipped":
        data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
    if how == "record missing":
        os.unlink(path + ".sum")
    elif how == "record garbage":
        open(path + ".sum", "wb").write(b"\x00\xffnot a record")
    else:
        open(path, "wb").write(data)


DAMAGE = ["truncated", "empty", "garbage", "one byte flipped", "record missing",
          "record garbage"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """what -> a cache folder where the program has run once (copied by each test)."""
    out = {}
    for what, (code, want) in PROGRAMS.items():
        d = tmp_path_factory.mktemp("cache")
        _check(_run(code, d), want, f"{what}, first run")
        libs = _libraries(d)
        assert libs and all(compiler.entry_ok(p) for p in libs)
        out[what] = d
    return out


# every kind for the user kernel (a small library); the three for a built-in one
@pytest.mark.parametrize("what,how", [("user kernel", h) for h in DAMAGE] +
                         [("builtin op", h) for h in ("truncated", "empty", "garbage")])
def test_damaged_entries_are_rebuilt(built, tmp_path, what, how):
    code, want = PROGRAMS[what]
    cache = tmp_path / "cache"
    shutil.copytree(built[what], cache)
    libs = _libraries(cache)
    for p in libs:
        _damage(p, how)
    assert not any(compiler.entry_ok(p) for p in libs)
    _check(_run(code, cache), want, f"{what}, after the entries were {how}")
    assert _libraries(cache) == libs and all(compiler.entry_ok(p) for p in libs)


def test_a_library_still_being_written_in_place_is_not_mapped(built, tmp_path):
    """A writer that writes the final name in place (not mpskern's way, but another tool
    or an older version may) has written half so far, its file still open: the reader must
    not map it (SIGBUS when the pages past the end are touched); it builds its own."""
    code, want = PROGRAMS["user kernel"]
    shutil.copytree(built["user kernel"], tmp_path / "cache")
    (path,) = _libraries(tmp_path / "cache")
    whole = open(path, "rb").read()
    with open(path, "wb") as w:              # the record still describes the whole file
        w.write(whole[:len(whole) // 2])
        w.flush()
        _check(_run(code, tmp_path / "cache"), want, "while a writer holds half the library")
    assert compiler.entry_ok(path)


CONCURRENT = textwrap.dedent("""
    import os, sys, time
    t0 = float(sys.argv[1])
    while time.time() < t0:            # start together
        time.sleep(0.001)
""")


@pytest.mark.parametrize("what", list(PROGRAMS))
def test_concurrent_builders_all_succeed(tmp_path, what):
    import time
    code, want = PROGRAMS[what]
    env = dict(os.environ, MPSKERN_CACHE_DIR=str(tmp_path))
    start = time.time() + 1.0                # after every interpreter has started
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT + code, str(start)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        assert out.strip().splitlines()[-1] == want
    libs = _libraries(tmp_path)
    assert libs and all(compiler.entry_ok(p) for p in libs)
    leftovers = [f for f in os.listdir(tmp_path / "sim")
                 if not f.endswith((".so", ".so.sum", ".lock")) and not f.startswith("stubs-")]
    assert not leftovers, f"temporary files left behind: {leftovers}"


def test_unusable_cache_folder_names_mpskern_cache_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _ = PROGRAMS["user kernel"]
    r = _run(code, blocker / "cache")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "MPSKERN_CACHE_DIR" in last and str(blocker / "cache") in last, r.stderr[-2000:]
    assert "Segmentation" not in r.stderr and "Bus error" not in r.stderr


@pytest.mark.parametrize("to", ["the process", "its process group"])
def test_ctrl_c_while_compiling_leaves_no_temporary_file(tmp_path, to):
    """Ctrl-C while the compiler runs (a terminal sends SIGINT to the whole process group,
    `kill -INT` to the process only) is a KeyboardInterrupt, not a compile error, and leaves
    nothing half-made in the cache: the next run builds the entry and gets the answer."""
    import signal
    import time
    code, want = PROGRAMS["user kernel"]
    env = dict(os.environ, MPSKERN_CACHE_DIR=str(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not glob.glob(str(tmp_path / "sim" / "*.cc")):    # the compiler's input
            assert p.poll() is None and time.time() < deadline, "no compile seen"
            time.sleep(0.02)
        time.sleep(0.05)                                       # the compiler is running
        if to == "the process":
            p.send_signal(signal.SIGINT)
        else:
            os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    if p.returncode == 0 and out.strip():
        pytest.skip("the compile ended before the signal arrived (a fast machine): nothing "
                    "was interrupted")
    assert p.returncode == -signal.SIGINT, f"rc {p.returncode}\n{err[-2000:]}"
    assert err.strip().splitlines()[-1] == "KeyboardInterrupt", err[-2000:]
    names = set(os.listdir(tmp_path / "sim"))
    # a library published whole before the signal (its .so and .so.sum) is a finished entry,
    # not a half-made one (on a fast machine a first build can end before the interrupt)
    whole = {n for n in names if n.endswith(".so") and n + ".sum" in names}
    leftovers = [f for f in sorted(names - whole - {n + ".sum" for n in whole})
                 if not f.endswith(".lock") and not re.fullmatch(r"stubs-[0-9a-f]+", f)]
    assert not leftovers, f"left in the cache: {leftovers}"
    _check(_run(code, tmp_path), want, "the run after the interrupted one")
