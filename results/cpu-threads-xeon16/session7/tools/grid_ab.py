"""GEMM grid A/B on one build (the device-only grid_ab.patch): per shape, arms = cost-model
variants (unset: the refit, MK_GRID_OLD=2 88d37bf, 1 its parent) and forced grids (MK_GRID=pm,pn),
interleaved per round in a shuffled order, idle gap before each sample; median ms per call.

    OPENBLAS_NUM_THREADS=16 python grid_ab.py --threads 16 --rounds 7 [--numpy]
"""
import argparse
import os
import random
import statistics
import time

import numpy as np

import mpskern as mk
from ab_timing import sample

# (label, kind, shape, extra forced grids)
SQUARE = [("matmul 512^2", "mm", (512, 512, 512)), ("matmul 1024^2", "mm", (1024, 1024, 1024)),
          ("matmul 2048^2", "mm", (2048, 2048, 2048)), ("matmul 4096^2", "mm", (4096, 4096, 4096))]
GPT2 = [("gpt2 linear 256x768->2304", "lin", (256, 2304, 768)),
        ("gpt2 linear 256x3072->768", "lin", (256, 768, 3072)),
        ("gpt2 linear 256x768->768", "lin", (256, 768, 768)),
        ("gpt2 linear 256x768->3072", "lin", (256, 3072, 768))]
CONV = [("conv gemm 256x3136x64 (64->256 1x1@56, per image)", "mm", (256, 3136, 64)),
        ("conv gemm 64x3136x256 (256->64 1x1@56, per image)", "mm", (64, 3136, 256)),
        ("conv2d 64->256 1x1 @56 b8", "conv", (8, 64, 256, 56)),
        ("conv2d 256->64 1x1 @56 b8", "conv", (8, 256, 64, 56))]


def case(kind, shape, rng):
    if kind == "mm":
        M, N, K = shape
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((K, N), dtype=np.float32)
        return (lambda: mk.matmul(a, b, backend="cpu")), (lambda: a @ b)
    if kind == "lin":
        M, N, K = shape
        x = rng.standard_normal((M, K), dtype=np.float32)
        w = rng.standard_normal((N, K), dtype=np.float32)
        b = rng.standard_normal(N, dtype=np.float32)
        return (lambda: mk.linear(x, w, b, backend="cpu")), (lambda: x @ w.T + b)
    n, c, k, hw = shape
    x = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
    w = rng.standard_normal((k, c, 1, 1), dtype=np.float32) * 0.1
    return (lambda: mk.conv2d(x, w, backend="cpu")), None


def arm_env(arm):
    os.environ.pop("MK_GRID", None)
    os.environ.pop("MK_GRID_OLD", None)
    if arm == "old":
        os.environ["MK_GRID_OLD"] = "1"
    elif arm == "s6":
        os.environ["MK_GRID_OLD"] = "2"
    elif arm != "refit":
        os.environ["MK_GRID"] = arm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--target", type=float, default=0.08)
    ap.add_argument("--gap", type=float, default=0.02)
    ap.add_argument("--numpy", action="store_true", help="numpy last per shape (0.3 s gap)")
    ap.add_argument("--groups", default="square,gpt2,conv")
    ap.add_argument("--skip", default="", help="comma list of labels' first words+size to skip")
    ap.add_argument("--force", default="", help="LABEL_SUBSTR=g1;g2 forced grids, | between")
    a = ap.parse_args()
    mk.set_num_threads(a.threads)
    forced = {}
    for part in filter(None, a.force.split("|")):
        k, v = part.split("=")
        forced[k] = [g.strip() for g in v.split(";")]
    cases = []
    for g in a.groups.split(","):
        cases += {"square": SQUARE, "gpt2": GPT2, "conv": CONV}[g]
    skip = [s for s in a.skip.split(",") if s]
    rng = np.random.default_rng(0)
    print(f"threads {a.threads} rounds {a.rounds} target {a.target} s gap {a.gap} s", flush=True)
    for label, kind, shape in cases:
        if any(s in label for s in skip):
            continue
        fn, npfn = case(kind, shape, rng)
        arms = ["refit", "s6", "old"] + [g for k, v in forced.items() if k in label for g in v]
        times = {arm: [] for arm in arms}
        for arm in arms:               # the grid each arm runs (a stderr line from the patch)
            arm_env(arm)
            os.environ["MK_GRID_SHOW"] = "1"
            print(f"  arm {arm}:", end=" ", flush=True)
            fn()
            del os.environ["MK_GRID_SHOW"]
        for r in range(a.rounds):
            order = list(arms)
            random.Random(r).shuffle(order)
            for arm in order:
                arm_env(arm)
                time.sleep(a.gap)
                times[arm].append(sample(fn, a.target))
        arm_env("refit")
        med = {arm: statistics.median(v) for arm, v in times.items()}
        base = med["refit"]
        cells = "  ".join(f"{arm} {med[arm] * 1e3:.3f} ({base / med[arm]:.3f})" for arm in arms)
        extra = ""
        if a.numpy and npfn is not None:
            time.sleep(0.3)
            extra = f"  | numpy {sample(npfn, a.target) * 1e3:.3f} ms"
        print(f"T{a.threads} {label}: {cells}{extra}", flush=True)


if __name__ == "__main__":
    main()
