"""One-thread sgemm of several OpenBLAS builds on the same buffers, interleaved in one process.

    python blas_ab.py LABEL=PATH/libscipy_openblas.so ... [--coretype LABEL=CORE ...]

Each build is loaded by ctypes with RTLD_LOCAL (its own symbols; a copy of the file per label
so one file can be loaded twice, e.g. with another OPENBLAS_CORETYPE), set to 1 thread, and
called as cblas_sgemm row-major on numpy buffers. numpy's own OpenBLAS (the library numpy
links) is called the same way through its 64-bit-int symbols, and numpy.matmul itself too.
Shapes: full squares and the tiles our grid hands one thread (sub-blocks with the full
leading dimensions). Per round the order of the libraries is shuffled, 0.05 s idle before
each sample; medians over rounds, ratio = numpy-lib time / lib time.
"""
import ctypes
import glob
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from ab_timing import sample

RowMajor, NoTrans = 101, 111


def load(label, path, coretype=None):
    d = tempfile.mkdtemp(prefix="ob_" + label)
    for f in glob.glob(os.path.join(os.path.dirname(path), "*.so*")):   # with its libgfortran
        shutil.copy(f, d)
    p = os.path.join(d, os.path.basename(path))
    old = os.environ.get("OPENBLAS_CORETYPE")
    if coretype:
        os.environ["OPENBLAS_CORETYPE"] = coretype
    elif old is not None:
        del os.environ["OPENBLAS_CORETYPE"]
    lib = ctypes.CDLL(p, mode=ctypes.RTLD_LOCAL)
    if old is not None:
        os.environ["OPENBLAS_CORETYPE"] = old
    elif "OPENBLAS_CORETYPE" in os.environ:
        del os.environ["OPENBLAS_CORETYPE"]
    return bind(lib, "", ctypes.c_int)


def bind(lib, sfx, I):
    """(cblas_sgemm, (config, core name), int type) of one scipy-openblas build at 1 thread;
    sfx: the symbol suffix ("64_" for numpy's 64-bit-int build)."""
    getattr(lib, "scipy_openblas_set_num_threads" + sfx)(I(1))
    info = []
    for f in ("scipy_openblas_get_config", "scipy_openblas_get_corename"):
        g = getattr(lib, f + sfx)
        g.restype = ctypes.c_char_p
        info.append(g().decode())
    f = getattr(lib, "scipy_cblas_sgemm" + sfx)
    f.restype = None
    E, F, P = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [E, E, E, I, I, I, F, P, I, P, I, F, P, I]
    return f, tuple(info), I


def numpy_lib():
    d = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    path = sorted(glob.glob(os.path.join(d, "libscipy_openblas64_*.so")))[0]
    lib = ctypes.CDLL(path)   # already loaded by numpy: the same handle
    return bind(lib, "64_", ctypes.c_int64)


def caller(f, A, B, C, M, N, K, lda, ldb, ldc):
    a, b, c = A.ctypes.data, B.ctypes.data, C.ctypes.data
    return lambda: f(RowMajor, NoTrans, NoTrans, M, N, K, 1.0, a, lda, b, ldb, 0.0, c, ldc)


def main():
    libs, cores, shapes, rounds, target = {}, {}, None, 5, 0.15
    args = sys.argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--coretype":
            k, v = args[i + 1].split("=")
            cores[k] = v
            i += 2
            continue
        if a == "--shapes":
            shapes = [tuple(int(x) for x in s.split("x")) for s in args[i + 1].split(",")]
            i += 2
            continue
        if a == "--rounds":
            rounds = int(args[i + 1])
            i += 2
            continue
        if a == "--target":
            target = float(args[i + 1])
            i += 2
            continue
        k, v = a.split("=", 1)
        libs[k] = v
        i += 1
    funcs = {"numpy-lib": numpy_lib()}
    try:
        import mpskern as mk
        mk.set_num_threads(1)
        g = ctypes.CDLL(None)          # the scipy-openblas32 mpskern loaded (RTLD_GLOBAL)
        g.scipy_openblas_get_config.restype = ctypes.c_char_p
        g.scipy_openblas_get_corename.restype = ctypes.c_char_p
        print(f"{'mpskern':>22}: core {g.scipy_openblas_get_corename().decode():<14} "
              f"{g.scipy_openblas_get_config().decode()}")
    except (ImportError, AttributeError) as e:
        print("no mpskern:", e)
        mk = None
    for k, v in libs.items():
        funcs[k] = load(k, v, cores.get(k))
    for k, (_, info, _) in funcs.items():
        print(f"{k:>22}: core {info[1]:<14} {info[0]}")
    # (M, N, K, full M, full N, full K): a tile of a full problem, as the grid cuts it
    shapes = shapes or [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
                        (512, 256, 2048, 2048, 2048, 2048), (176, 128, 1024, 1024, 1024, 1024),
                        (128, 96, 768, 256, 2304, 768), (64, 64, 3072, 256, 768, 3072),
                        (128, 128, 768, 256, 3072, 768)]
    rng = np.random.default_rng(0)
    for s in shapes:
        M, N, K = s[:3]
        FM, FN, FK = s[3:] if len(s) == 6 else s
        A = rng.standard_normal((FM, FK), dtype=np.float32)
        B = rng.standard_normal((FK, FN), dtype=np.float32)
        C = np.empty((FM, FN), np.float32)
        calls = {k: caller(f, A, B, C, M, N, K, FK, FN, FN) for k, (f, _, _) in funcs.items()}
        if len(s) == 3:
            calls["numpy.matmul"] = (lambda: np.matmul(A, B, out=C))
            if mk is not None:
                calls["mpskern"] = (lambda: mk.matmul(A, B, backend="cpu", out=C))
        ref = A[:M].astype(np.float64) @ B[:, :N].astype(np.float64)
        for k, fn in calls.items():
            C[...] = np.nan
            fn()
            err = float(np.max(np.abs(C[:M, :N] - ref))) / max(1.0, float(np.max(np.abs(ref))))
            assert err < 1e-4, (k, s, err)
        times = {k: [] for k in calls}
        for r in range(rounds):
            order = list(calls)
            random.Random(r).shuffle(order)
            for k in order:
                time.sleep(0.05)
                times[k].append(sample(calls[k], target))
        med = {k: statistics.median(v) for k, v in times.items()}
        name = f"{M}x{N}x{K}" + ("" if len(s) == 3 else f" (tile of {FM}x{FN}x{FK})")
        cells = "  ".join(f"{k} {med[k] * 1e3:.3f} ms ({med['numpy-lib'] / med[k]:.3f})"
                          for k in calls)
        print(f"{name}: {cells}", flush=True)


if __name__ == "__main__":
    main()
