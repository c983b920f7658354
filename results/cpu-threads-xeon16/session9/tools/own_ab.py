"""Same-build A/B of the cpu GEMM paths (session 9, gemm9): MPSKERN_CPU_GEMM switched per
call (own = our AVX-512 kernel, auto = the default rules, i.e. the BLAS grid or one threaded
BLAS call) and numpy (its OpenBLAS at OPENBLAS_NUM_THREADS, set by the caller per process),
interleaved within each round, 0.2 s idle before every sample, medians in ms.
usage: python own_ab.py THREADS SETS [ROUNDS]   (SETS: comma list of smallk, gpt2, square)"""
import os
import sys
import time

import numpy as np

import mpskern

T = int(sys.argv[1])
SETS = sys.argv[2].split(",")
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
mpskern.set_num_threads(T)
rng = np.random.default_rng(0)


def sample(fn):
    time.sleep(0.2)
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def mk_arm(path, a, b, act, tb):
    def run():
        os.environ["MPSKERN_CPU_GEMM"] = path
        mpskern.gemm(a, b, trans_b=tb, activation=act, backend="cpu")
    return run


def bench(name, arms, rounds):
    for fn in arms.values():
        fn()                                   # warm-up
    ts = {k: [] for k in arms}
    for _ in range(rounds):
        for k, fn in arms.items():
            ts[k].append(sample(fn))
    med = {k: float(np.median(v)) for k, v in ts.items()}
    cells = " ".join(f"{k} {v:8.2f}" for k, v in med.items())
    ratios = ""
    if "numpy" in med:
        ratios = " ".join(f"np/{k} {med['numpy'] / med[k]:.2f}" for k in med if k != "numpy")
    if "own" in med and "auto" in med:
        ratios += f" own/auto {med['own'] / med['auto']:.2f}"
    print(f"T{T} {name:34s} {cells} | {ratios}", flush=True)
    return med


if "smallk" in SETS:
    for K in (64, 256):
        a = rng.standard_normal((4096, K), np.float32)
        b = rng.standard_normal((K, 4096), np.float32)
        base = {}
        for act in (None, "relu", "gelu", "silu"):
            med = bench(f"4096^2 K{K} {act}", {p: mk_arm(p, a, b, act, False)
                                               for p in ("own", "auto")}, ROUNDS)
            if act is None:
                base = med
            else:
                print(f"T{T}   fused/unfused K{K} {act}: own {med['own'] / base['own']:.2f}"
                      f" auto {med['auto'] / base['auto']:.2f}", flush=True)

if "gpt2" in SETS:
    for (M, N, K) in ((256, 2304, 768), (256, 768, 768), (256, 3072, 768), (256, 768, 3072),
                      (256, 50257, 768)):
        x = rng.standard_normal((M, K), np.float32)
        w = rng.standard_normal((N, K), np.float32)
        wt = np.ascontiguousarray(w.T)
        arms = {p: mk_arm(p, x, w, None, True) for p in ("own", "auto")}
        arms["numpy"] = lambda: x @ wt
        bench(f"linear {M}x{K}@{K}x{N}", arms, ROUNDS)

if "square" in SETS:
    for n in (512, 1024, 2048) if T <= 2 else (512, 1024, 2048, 4096):
        a = rng.standard_normal((n, n), np.float32)
        b = rng.standard_normal((n, n), np.float32)
        arms = {p: mk_arm(p, a, b, None, False) for p in ("own", "auto")}
        arms["numpy"] = lambda: a @ b
        bench(f"matmul {n}^2", arms, ROUNDS)
