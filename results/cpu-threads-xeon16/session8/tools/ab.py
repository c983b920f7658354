"""mm8 device A/B (one build, env switch per call, interleaved shuffled rounds, 0.02 s gap).
arms: grid (our tiles), blas (one threaded OpenBLAS call, jobs on our pool via the callback),
own (one threaded OpenBLAS call on OpenBLAS's own threads), numpy. 'after' = a conv2d
3x3 64@56 b1 on our pool timed right after one call of the arm (no gap): interference."""
import os, sys, random, statistics, time
T = int(sys.argv[1]); os.environ["OPENBLAS_NUM_THREADS"] = str(T)
GROUPS = sys.argv[2].split(",")
import numpy as np
import mpskern as mk
mk.set_num_threads(T)
rng = np.random.default_rng(0)

def sample(fn, target=0.05):
    fn(); n, t0 = 0, time.perf_counter()
    while True:
        fn(); n += 1; t = time.perf_counter() - t0
        if t >= target: return t / n

x = rng.standard_normal((1, 64, 56, 56), dtype=np.float32); wc = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
conv = lambda: mk.conv2d(x, wc, padding=1, backend="cpu")

def arm(name):
    for v in ("MK_GEMM_MODE", "MK_EP_SUB"): os.environ.pop(v, None)
    if name in ("grid", "blas", "own"): os.environ["MK_GEMM_MODE"] = name
    if name.startswith("sub"): os.environ["MK_GEMM_MODE"] = "grid"; os.environ["MK_EP_SUB"] = name.lstrip("subnone")

def ab(label, fns, rounds=3, target=0.05, after=True):
    times = {k: [] for k in fns}; aft = {k: [] for k in fns}
    for k, f in fns.items():
        arm(k); f()
    for r in range(rounds):
        order = list(fns); random.Random(r).shuffle(order)
        for k in order:
            arm(k); time.sleep(0.02)
            times[k].append(sample(fns[k], target))
            if after:
                time.sleep(0.02); fns[k](); t0 = time.perf_counter(); conv(); aft[k].append(time.perf_counter() - t0)
    arm("")
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med.get("numpy", med[list(fns)[0]])
    cells = "  ".join(f"{k} {med[k]*1e3:.3f}ms ({base/med[k]:.3f})" for k in fns)
    a = "  after-conv " + " ".join(f"{k} {statistics.median(v)*1e3:.3f}" for k, v in aft.items()) if after else ""
    print(f"T{T} {label}: {cells}{a}", flush=True)

if "mm" in GROUPS:
    sizes = [512, 1024, 2048] + ([4096] if T >= 8 else [])
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32); b = rng.standard_normal((n, n), dtype=np.float32)
        f = lambda: mk.matmul(a, b, backend="cpu")
        ab(f"matmul {n}^2", {"numpy": lambda: a @ b, "grid": f, "blas": f, "own": f},
           rounds=3 if n < 4096 else 2, target=0.05 if n < 2048 else 0.01)
if "lin" in GROUPS:
    for (M, N, K) in [(256, 2304, 768), (256, 768, 3072), (256, 768, 768), (256, 3072, 768)]:
        xx = rng.standard_normal((M, K), dtype=np.float32); w = rng.standard_normal((N, K), dtype=np.float32)
        bb = rng.standard_normal(N, dtype=np.float32)
        f = lambda: mk.linear(xx, w, bb, backend="cpu")
        ab(f"linear {M}x{K}->{N}+bias", {"numpy": lambda: xx @ w.T + bb, "grid": f, "blas": f, "own": f})
if "smallk" in GROUPS:
    for K in (64, 256):
        a = rng.standard_normal((4096, K), dtype=np.float32); b = (rng.standard_normal((K, 4096)) / np.sqrt(K)).astype(np.float32)
        for act in ("relu", "gelu"):
            fu = lambda: mk.gemm(a, b, backend="cpu"); fa = lambda: mk.gemm(a, b, activation=act, backend="cpu")
            fns = {"none": fu, "grid": fa, "sub262144": fa, "sub524288": fa, "sub1048576": fa}
            ab(f"smallK 4096^2 K={K} {act} (ratio = none/arm)", fns, rounds=3, target=0.05, after=False)
