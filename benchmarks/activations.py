"""The cost of a fused activation on the cpu backend: gemm and conv2d with activation=
against the same call without one (issue 13's target: at most 1.05x), with cpu_vs_peers.py's
protocol (interleaved rounds, idle gaps, medians).

    python benchmarks/activations.py [--threads 2] [--rounds 5] [--gap 0.05] [--target 0.05]
                                     [--acts relu,gelu,gelu_tanh,silu] [--only gemm,conv2d]
                                     [--quick] [--strict]

Shapes: transformer MLP and attention projections, a large square GEMM, GEMMs whose output
is far larger than L2 while K is small (there an activation applied after the GEMM would be
a second pass over memory; fused, each tile is activated while it is in cache), ResNet and
Stable Diffusion UNet convolutions, float32 and float16. Prints per case the time without
an activation and with each, ratio = with / without (target <= 1.05), and the time the
activation added per output element (ns, at --threads): what it costs itself, which a
GEMM with a small K cannot hide (the K = 1 row measures it alone; docs/cpu-kernels.md).
Exit status: 0 when every case ran and the fused result matched the activation applied to
the unfused one (checked on a sample of at most 2^17 outputs before timing); non-zero on a
crash or a mismatch; --strict also exits 1 on a missed target (the K = 1 row has none).
About a minute at the defaults; on a shared machine read the ratios.
"""
import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_vs_peers as P  # noqa: E402  (the timing protocol; puts a checkout's in-place build first)
import mpskern  # noqa: E402
from mpskern import reference as ref  # noqa: E402

RNG = np.random.default_rng(0)
TARGET = 1.05

# label, M, N, K, dtype (K = 1: the activation's own cost, no target)
GEMMS = [("GPT-2 MLP up 512x3072x768", 512, 3072, 768, "float32"),
         ("GPT-2 attn proj 1024x768x768", 1024, 768, 768, "float32"),
         ("square 2048", 2048, 2048, 2048, "float32"),
         ("large out, small K 4096x4096x64", 4096, 4096, 64, "float32"),
         ("large out 4096x4096x256", 4096, 4096, 256, "float32"),
         ("activation alone 4096x4096x1", 4096, 4096, 1, "float32"),
         ("GPT-2 MLP up 512x3072x768", 512, 3072, 768, "float16"),
         ("large out, small K 4096x4096x64", 4096, 4096, 64, "float16")]
# label, N, C, H, K, R, padding, dtype
CONVS = [("ResNet res3 3x3 128 b8 @28", 8, 128, 28, 128, 3, 1, "float32"),
         ("ResNet res3 1x1 128>512 b8 @28", 8, 128, 28, 512, 1, 0, "float32"),
         ("ResNet stem-like 3x3 64 @224", 1, 64, 224, 64, 3, 1, "float32"),
         ("SD UNet 3x3 320 @64", 1, 320, 64, 320, 3, 1, "float32"),
         ("ResNet res3 3x3 128 b8 @28", 8, 128, 28, 128, 3, 1, "float16")]
SAMPLE = 1 << 17


def gemm_case(M, N, K, dtype):
    a = RNG.standard_normal((M, K), dtype=np.float32).astype(dtype)
    b = (RNG.standard_normal((K, N)) / np.sqrt(K)).astype(dtype)
    return lambda act: mpskern.gemm(a, b, activation=act, backend="cpu")


def conv_case(N, C, H, K, R, pad, dtype):
    x = RNG.standard_normal((N, C, H, H), dtype=np.float32).astype(dtype)
    w = (RNG.standard_normal((K, C, R, R)) / np.sqrt(C * R * R)).astype(dtype)
    bias = RNG.standard_normal(K, dtype=np.float32).astype(dtype)
    return lambda act: mpskern.conv2d(x, w, bias, padding=pad, activation=act, backend="cpu")


def run_case(rows, label, call, acts, rounds, target, goal=TARGET):
    plain = call(None)
    pick = np.s_[::max(1, plain.size // SAMPLE)]        # a strided sample: erf in float64 is slow
    base = plain.reshape(-1)[pick].astype(np.float64)
    tol = 2e-5 if plain.dtype == np.float32 else 4e-3    # float16: rounded before / after
    for act in acts:                   # fused == the activation applied to the unfused result
        P.check(call(act).reshape(-1)[pick], ref.activate(base, act), f"{label} {act}", tol)
    impls = {"none": lambda: call(None), **{act: (lambda a=act: call(a)) for act in acts}}
    t = P.bench(impls, rounds, target)
    for act in acts:
        rows.append((label, act, t["none"], t[act], plain.size, goal))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    P.timing_options(ap, rounds=5, target=0.05)
    ap.set_defaults(gap=0.05)          # mpskern alone: no peer's spinning threads to wait out
    ap.add_argument("--acts", default="relu,gelu,gelu_tanh,silu")
    ap.add_argument("--only", default="gemm,conv2d")
    ap.add_argument("--quick", action="store_true", help="the first case of each group (smoke run)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = P.timing_parse(ap, argv)
    mpskern.set_num_threads(args.threads)
    acts = args.acts.split(",")
    print(f"machine: {platform.machine()} {P.cpu_name()}, {os.cpu_count()} cores; mpskern "
          f"{mpskern.__version__} at {args.threads} threads; medians of {args.rounds} "
          f"interleaved rounds, {P.GAP:g} s idle before each sample; ratio = time with the "
          f"activation / time without (target <= {TARGET}); added = (with - without) per "
          f"output element\n")
    rows = []
    groups = args.only.split(",")
    if "gemm" in groups:
        for label, M, N, K, dt in GEMMS[:1] if args.quick else GEMMS:
            run_case(rows, f"gemm {label} {dt}", gemm_case(M, N, K, dt), acts, args.rounds,
                     args.target, None if K == 1 else TARGET)
    if "conv2d" in groups:
        for label, *shape, dt in CONVS[:1] if args.quick else CONVS:
            run_case(rows, f"conv2d {label} {dt}", conv_case(*shape, dt), acts, args.rounds,
                     args.target)
    miss = 0
    print(f"{'case':50s} {'act':>9s} {'without':>12s} {'with':>12s} {'ratio':>6s} "
          f"{'added':>8s}  target")
    for label, act, t0, t1, size, goal in rows:
        ratio = t1 / t0
        ok = "-" if goal is None else "ok" if ratio <= goal else f"MISS (<= {goal})"
        miss += ok.startswith("MISS")
        print(f"{label:50s} {act:>9s} {P.fmt_t(t0)} {P.fmt_t(t1)} {ratio:6.2f} "
              f"{(t1 - t0) / size * 1e9:5.2f} ns  {ok}")
    print(f"\n{len(rows)} rows, {miss} above target")
    return 1 if miss and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
