"""Same-build A/B of the cpu GEMM paths (session 10, gemm10): MPSKERN_CPU_GEMM switched per
call (own = our AVX-512 kernel, auto = the default rules at the time of the run: the BLAS grid
or one threaded BLAS call, or own where own_wins() took it) and numpy (its OpenBLAS at
OPENBLAS_NUM_THREADS, set by the caller per process). Extra arms: own192 (MPSKERN_OWN_KC=192,
a 192-deep K block), own_nost (MPSKERN_OWN_STREAM=0: no streamed stores), both read by the
A/B build only. Interleaved within each round, 0.2 s idle around numpy's samples, 0.05 s
between mpskern's arms; one warm-up call each; medians in ms.
usage: python own_ab.py THREADS SETS [ROUNDS] [KC_ARM]
  SETS: comma list of smallk, gpt2, square; KC_ARM 1: add the own192 arm to gpt2/square"""
import os
import sys
import time

import numpy as np

import mpskern

T = int(sys.argv[1])
SETS = sys.argv[2].split(",")
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
KC_ARM = len(sys.argv) > 4 and sys.argv[4] == "1"
mpskern.set_num_threads(T)
rng = np.random.default_rng(0)
ENV = {"own": {"MPSKERN_CPU_GEMM": "own"}, "auto": {"MPSKERN_CPU_GEMM": "auto"},
       "own192": {"MPSKERN_CPU_GEMM": "own", "MPSKERN_OWN_KC": "192"},
       "own_nost": {"MPSKERN_CPU_GEMM": "own", "MPSKERN_OWN_STREAM": "0"}}


def mk_arm(path, a, b, act, tb):
    env = ENV[path]

    def run():
        os.environ.pop("MPSKERN_OWN_KC", None)
        os.environ.pop("MPSKERN_OWN_STREAM", None)
        os.environ.update(env)
        mpskern.gemm(a, b, trans_b=tb, activation=act, backend="cpu")
    return run


def bench(name, arms, rounds):
    for fn in arms.values():
        fn()                                   # warm-up
    ts = {k: [] for k in arms}
    for _ in range(rounds):
        for k, fn in arms.items():
            time.sleep(0.2 if k == "numpy" or k == next(iter(arms)) else 0.05)
            t = time.perf_counter()
            fn()
            ts[k].append((time.perf_counter() - t) * 1e3)
            if k == "numpy":
                time.sleep(0.2)
    med = {k: float(np.median(v)) for k, v in ts.items()}
    cells = " ".join(f"{k} {v:8.2f}" for k, v in med.items())
    ratios = ""
    if "numpy" in med:
        ratios = " ".join(f"np/{k} {med['numpy'] / med[k]:.2f}" for k in med if k != "numpy")
    for k in med:
        if k.startswith("own") and "auto" in med:
            ratios += f" {k}/auto {med[k] / med['auto']:.2f}"
    print(f"T{T} {name:30s} {cells} | {ratios}", flush=True)
    return med


def arms_for(a, b, tb, np_fn, big):
    names = ["own", "own192", "auto"] if KC_ARM and not big else ["own", "auto"]
    arms = {p: mk_arm(p, a, b, None, tb) for p in names}
    arms["numpy"] = np_fn
    return arms


if "gpt2" in SETS:
    for (M, N, K) in ((256, 2304, 768), (256, 768, 768), (256, 3072, 768), (256, 768, 3072),
                      (256, 50257, 768)):
        x = rng.standard_normal((M, K), np.float32)
        w = rng.standard_normal((N, K), np.float32)
        wt = np.ascontiguousarray(w.T)
        bench(f"linear {M}x{K}@{K}x{N} tb", arms_for(x, w, True, lambda: x @ wt, N > 4096),
              ROUNDS)

if "square" in SETS:
    for n in (512, 1024, 2048, 4096):
        a = rng.standard_normal((n, n), np.float32)
        b = rng.standard_normal((n, n), np.float32)
        big = n == 4096
        bench(f"matmul {n}^2", arms_for(a, b, False, lambda: a @ b, big),
              3 if big and T <= 2 else ROUNDS)

if "smallk" in SETS:
    for K in (64, 256):
        a = rng.standard_normal((4096, K), np.float32)
        b = rng.standard_normal((K, 4096), np.float32)
        base = {}
        for act in (None, "relu", "gelu", "silu"):
            paths = ("own", "own_nost", "auto") if K == 64 else ("own", "auto")
            med = bench(f"4096^2 K{K} {act}", {p: mk_arm(p, a, b, act, False) for p in paths},
                        ROUNDS)
            if act is None:
                base = med
            else:
                print(f"T{T}   fused/unfused K{K} {act}: " +
                      " ".join(f"{p} {med[p] / base[p]:.2f}" for p in paths) +
                      f"  own-fused/auto-unfused {med['own'] / base['auto']:.2f}", flush=True)
