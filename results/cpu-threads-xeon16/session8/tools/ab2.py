"""mm8 device run 2: one build, env switch per call, interleaved shuffled rounds, 0.2 s idle
before each sample (OpenBLAS's threads spin ~0.1 s after a call: numpy's, and ours in 'own').
arms: grid (our tiles), blas (one threaded OpenBLAS call, its jobs on our pool through the
threads callback), own (T8 only: OpenBLAS's own threads), numpy (its OpenBLAS at T threads)."""
import os, sys, random, statistics, time
T = int(sys.argv[1]); os.environ["OPENBLAS_NUM_THREADS"] = str(T)
import numpy as np
import mpskern as mk
mk.set_num_threads(T)
rng = np.random.default_rng(0)
GAP = 0.2

def sample(fn, target=0.03):
    fn(); n, t0 = 0, time.perf_counter()
    while True:
        fn(); n += 1; t = time.perf_counter() - t0
        if t >= target: return t / n

def arm(name):
    os.environ.pop("MK_GEMM_MODE", None)
    if name in ("grid", "blas", "own"): os.environ["MK_GEMM_MODE"] = name

def ab(label, fns, rounds=3):
    times = {k: [] for k in fns}
    for k, f in fns.items(): arm(k); f()
    for r in range(rounds):
        order = list(fns); random.Random(r).shuffle(order)
        for k in order:
            arm(k); time.sleep(GAP); times[k].append(sample(fns[k]))
    arm("")
    med = {k: statistics.median(v) for k, v in times.items()}
    cells = "  ".join(f"{k} {med[k]*1e3:.3f}ms ({med['numpy']/med[k]:.3f})" for k in fns)
    print(f"T{T} {label}: {cells}  | blas/grid speedup {med['grid']/med['blas']:.3f}", flush=True)

def arms(f, npf):
    d = {"numpy": npf, "grid": f, "blas": f}
    if T == 8: d["own"] = f
    return d

for n in [512, 1024, 2048] + ([4096] if T >= 8 else []):
    a = rng.standard_normal((n, n), dtype=np.float32); b = rng.standard_normal((n, n), dtype=np.float32)
    ab(f"matmul {n}^2", arms(lambda: mk.matmul(a, b, backend="cpu"), lambda: a @ b), rounds=3 if n < 4096 else 2)
for (M, N, K) in [(256, 2304, 768), (256, 768, 3072), (256, 768, 768)]:
    xx = rng.standard_normal((M, K), dtype=np.float32); w = rng.standard_normal((N, K), dtype=np.float32)
    bb = rng.standard_normal(N, dtype=np.float32)
    ab(f"linear {M}x{K}->{N}+bias", arms(lambda: mk.linear(xx, w, bb, backend="cpu"), lambda: xx @ w.T + bb))
