"""gpt10: Kit.linear_add (z += linear(x, w, b): a K=1 GEMM ones x b into z, then the GEMM
with c=z, out=z) against a plain linear with bias, per call, GPT-2 small's 256-row shapes,
and each of linear_add's two GEMMs alone. Interleaved, the order shuffled every round (an
arm that always follows torch-like or pool-heavy work would otherwise carry its wake-up),
a short idle gap before each sample; medians (ms per call).
Usage: MPSKERN_NUM_THREADS=T python gpt10_linear_add.py [--reps 15]"""
import argparse
import os
import random
import time

import numpy as np

import mpskern
from mpskern.models.kit import Kit


def arms(K, N, rng):
    x = rng.standard_normal((1, 256, K), np.float32)
    w = (rng.standard_normal((N, K)) * 0.02).astype(np.float32)
    b = (rng.standard_normal(N) * 0.02).astype(np.float32)
    y = np.empty((1, 256, N), np.float32)
    z = rng.standard_normal((1, 256, N), np.float32)
    zv, ones, kit = z.reshape(256, N), np.ones((256, 1), np.float32), Kit("cpu")
    return {
        "linear+bias": lambda: mpskern.linear(x, w, b, out=y),
        "linear": lambda: mpskern.linear(x, w, None, out=y),
        "linear_add": lambda: kit.linear_add(z, x, w, b),
        "gemm c=out": lambda: mpskern.gemm(x[0], w, zv, trans_b=True, out=zv),
        "K=1 beta=1 c=out": lambda: mpskern.gemm(ones, b.reshape(1, -1), zv, out=zv),
        "K=1 beta=0": lambda: mpskern.gemm(ones, b.reshape(1, -1), out=y[0]),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=15)
    o = p.parse_args()
    rng, order = np.random.default_rng(0), random.Random(0)
    print(f"MPSKERN_NUM_THREADS={os.environ.get('MPSKERN_NUM_THREADS')} affinity "
          f"{len(os.sched_getaffinity(0))} load {os.getloadavg()[0]:.1f}; "
          f"medians of {o.reps} interleaved samples, ms per call")
    for K, N in ((768, 768), (3072, 768), (768, 2304)):
        impls = arms(K, N, rng)
        loops = {}
        for k, f in impls.items():
            f()
            t0 = time.perf_counter()
            f()
            loops[k] = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-6)))
        ts = {k: [] for k in impls}
        for _ in range(o.reps):
            names = list(impls)
            order.shuffle(names)
            for k in names:
                time.sleep(0.03)
                t0 = time.perf_counter()
                for _ in range(loops[k]):
                    impls[k]()
                ts[k].append((time.perf_counter() - t0) * 1e3 / loops[k])
        print(f"  256 x {K}->{N}: " + ", ".join(f"{k} {np.median(v):.3f}" for k, v in ts.items()),
              flush=True)


if __name__ == "__main__":
    main()
