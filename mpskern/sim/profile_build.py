"""Kernel libraries for the simulator's profiling mode (docs/profiling.md): the build.

The translated C++ (frontend.translate(..., profiled=True)) is compiled by clang to
optimized LLVM IR with ThreadSanitizer's instrumentation, which calls __tsan_readN /
__tsan_writeN before every load and store that may touch shared memory. Vectorizers are
off, so the IR's memory operations and arithmetic are the scalar operations the source
asks for (the MSL vector types are structs of elements in the simulator), and exceptions
are off, so a call does not end a basic block. profile_ir.instrument rewrites that IR and
makes the table of what every access site and basic block is (profile_ops.py: what each
instruction counts as); the rewritten IR is compiled into the library and the table is
stored beside it (<key>.prof.json), which mpskern/sim/profile.py multiplies with the
runtime's block counts.
"""
import json
import os
import subprocess
from functools import lru_cache

from mpskern import env
from mpskern._errors import KernelCompileError
from mpskern.paths import SIM_INCLUDE_DIR
from mpskern.sim import toolchain
from mpskern.sim.profile_ir import TABLE_VERSION, instrument

IR_FLAGS = ["-x", "c++", "-std=c++17", "-O2", "-g", "-fPIC", "-fno-math-errno", "-fno-exceptions",
            "-fvisibility=hidden", "-w", "-fsanitize=thread",
            "-mllvm", "-tsan-instrument-func-entry-exit=0",
            "-fno-vectorize", "-fno-slp-vectorize", "-ffp-contract=off",
            "-D__MPSKERN_PROFILE__=1"]
# half arithmetic rounded per operation, as the sim's other builds (clang >= 16)
OPTIONAL_IR_FLAGS = [["-Xclang", "-ffloat16-excess-precision=none"]]


@lru_cache(maxsize=None)
def clang():
    """(path, version) of the clang that builds profiling libraries, or (None, why):
    $MPSKERN_PROFILE_CXX, else $CXX when it is clang, else clang++ / clang (newest first)."""
    cands = []
    if os.environ.get("MPSKERN_PROFILE_CXX"):
        cands = [os.environ["MPSKERN_PROFILE_CXX"]]
    else:
        if os.environ.get("CXX"):
            cands.append(os.environ["CXX"])
        cands += ["clang++", "clang"] + toolchain.versioned("clang++")[1:] + \
            toolchain.versioned("clang")[1:]
    for path, ver in toolchain.found(cands, want="clang"):
        return path, ver
    return None, ("the profiling mode needs clang (it instruments clang's IR); none found "
                  f"(tried {', '.join(cands)}); set MPSKERN_PROFILE_CXX")


@lru_cache(maxsize=None)
def ir_flags():
    cc, _ = clang()
    flags = list(IR_FLAGS)
    for extra in OPTIONAL_IR_FLAGS:
        r = subprocess.run([cc, "-Werror"] + extra + ["-x", "c++", "-fsyntax-only", "-"],
                           input="int x;\n", capture_output=True, text=True)
        if r.returncode == 0:
            flags += extra
    return flags


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise KernelCompileError(f"simulator (profiling): cannot run {cmd[0]}: {e}") from None


def build(cc_path, so_path, log):
    """Compile the translated C++ at `cc_path` into the profiling library `so_path` and write
    its table (so_path with .prof.json). `log(stderr)` formats compiler output."""
    cc, why = clang()
    if cc is None:
        raise KernelCompileError("simulator: " + why)
    base = cc_path[:-3]
    ll, ll2, obj = base + ".ll", base + ".prof.ll", base + ".o"
    try:
        r = _run([cc] + ir_flags() + ["-I", SIM_INCLUDE_DIR, "-S", "-emit-llvm", cc_path, "-o", ll])
        if r.returncode != 0:
            raise KernelCompileError("simulator: the kernel source does not compile:\n" + log(r.stderr))
        with open(ll, encoding="utf-8") as f:
            text, table = instrument(f.read())
        with open(ll2, "w", encoding="utf-8") as f:
            f.write(text)
        r = _run([cc, "-c", "-O2", "-fPIC", "-w", "-Xclang", "-disable-llvm-optzns", "-x", "ir", ll2,
                  "-o", obj])
        if r.returncode == 0:
            r = _run([cc, "-shared", "-fPIC", obj, "-o", so_path + ".tmp", "-lm"])
        if r.returncode != 0:
            raise KernelCompileError("simulator (profiling): the instrumented library does not build "
                                     "(mpskern bug):\n" + log(r.stderr))
        tmp = so_path + ".prof.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(table, f)
        os.replace(tmp, table_path(so_path))
        os.replace(so_path + ".tmp", so_path)
    finally:
        for p in (ll, ll2, obj, so_path + ".tmp"):
            if os.path.exists(p) and not env.flag("MPSKERN_SIM_KEEP"):
                os.unlink(p)


def table_path(so_path):
    return so_path[:-3] + ".prof.json"


def load_table(so_path):
    with open(table_path(so_path), encoding="utf-8") as f:
        t = json.load(f)
    if t.get("version") != TABLE_VERSION:
        raise ValueError(f"{table_path(so_path)}: profile table version {t.get('version')}")
    return t
