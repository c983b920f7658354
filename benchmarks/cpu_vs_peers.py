"""mpskern's cpu backend side by side with PyTorch's CPU kernels and numpy's BLAS (issue 7).

    python benchmarks/cpu_vs_peers.py [--threads N] [--rounds 7] [--only conv,pool,...] [--quick]

--threads N runs every library on N threads: mpskern (set_num_threads), torch
(set_num_threads) and numpy's BLAS (OPENBLAS_NUM_THREADS, set before numpy is loaded;
the header prints the count numpy's OpenBLAS reports). Without it each library keeps its
default (one thread per core for all three).

Prints one row per case: peer time, mpskern time and ratio = peer / mpskern (>= 1 means
mpskern is at least as fast), medians over interleaved rounds (each round times every
implementation of a case once, so load from other processes hits all of them alike).
Every timing sample starts after an idle gap (--gap seconds, default 0.25): thread pools
keep spinning for a while after a call (numpy's OpenBLAS workers for up to ~0.1 s, its
THREAD_TIMEOUT of 2^28 cycles; OpenMP runtimes for their spin/block time), and a sample
started in that window would run one core short against the previous implementation's
spinning threads. mpskern's own workers spin at most 1 ms, then block. The gap
changes no library setting; `--only fairness` times numpy and torch against themselves
(ratios ~1.0 when the protocol is fair).
Each case is checked against the peer's result before it is timed.
torch and numpy are benchmark-only peers, never dependencies of mpskern. On a shared
machine, read the ratios, not the absolute times. To compare BLAS fairly, run with
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for this command alone.
"""
import argparse
import ctypes
import os
import platform
import statistics
import sys
import time


def threads_arg(argv):
    """--threads N / --threads=N from the command line (0 when absent or malformed)."""
    for i, a in enumerate(argv):
        v = a.split("=", 1)[1] if a.startswith("--threads=") else (
            argv[i + 1] if a == "--threads" and i + 1 < len(argv) else None)
        if v is not None:
            return int(v) if v.isdigit() else 0
    return 0


# numpy's OpenBLAS reads its thread count once, when numpy is loaded: set it first
if __name__ == "__main__" and threads_arg(sys.argv[1:]):
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads_arg(sys.argv[1:]))

import numpy as np  # noqa: E402

import checkout_path  # noqa: E402,F401  (this checkout's mpskern if built, else the installed one)
import mpskern  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the benchmark needs its peer; mpskern never does
    sys.exit("cpu_vs_peers needs torch, its peer (benchmark only): pip install \".[peers]\" "
             "in the checkout, or pip install torch")

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------- mpskern calls
# through the public API, as users call it
def mk_conv2d(x, w, stride=1, padding=0, groups=1):
    return mpskern.conv2d(x, w, None, stride, padding, 1, groups, backend="cpu")


def mk_pool(x, mode, k, s, p):
    return (mpskern.max_pool2d if mode == 0 else mpskern.avg_pool2d)(x, k, s, p, backend="cpu")


def mk_softmax(x):
    return mpskern.softmax(x, axis=-1, backend="cpu")


def mk_rownorm(x, w, b, kind):
    n = x.shape[-1]
    if kind == 0:
        return mpskern.layer_norm(x, (n,), w, b, 1e-5, backend="cpu")
    return mpskern.rms_norm(x, (n,), w, 1e-5, backend="cpu")


def mk_matmul(a, b):
    return mpskern.matmul(a, b, backend="cpu")


def numpy_blas_threads(want=0):
    """Threads numpy's OpenBLAS uses (set to `want` first when > 0), or None when its
    library does not say (not OpenBLAS, e.g. Accelerate on macOS)."""
    try:   # the loaded OpenBLAS libraries, less mpskern's own (scipy_openblas32)
        libs = {ln.split()[-1] for ln in open("/proc/self/maps")
                if "openblas" in ln.rsplit("/", 1)[-1] and "openblas32" not in ln}
    except OSError:
        return None
    for path in libs:
        lib = ctypes.CDLL(path)
        for suffix in ("64_", ""):
            for prefix in ("scipy_openblas", "openblas"):
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if get is None:
                    continue
                if want > 0 and get() != want:
                    getattr(lib, f"{prefix}_set_num_threads{suffix}")(want)
                return get()
    return None


# ---------------------------------------------------------------------------- timing
def per_call(fn, loops):
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def calibrate(fn, target):
    """Loops per sample so that one sample takes about `target` seconds."""
    fn()   # warm-up (pools, caches, lazy thread start)
    t = per_call(fn, 1)
    if t < target / 20:
        t = per_call(fn, max(1, int(target / 20 / max(t, 1e-9))))
    return max(1, int(target / max(t, 1e-9)))


GAP = 0.25   # seconds of idle before every timing sample (see the docstring); --gap


def bench(impls, rounds, target):
    """impls: {name: fn}; returns {name: median seconds per call}, interleaved rounds."""
    loops = {k: calibrate(f, target) for k, f in impls.items()}
    samples = {k: [] for k in impls}
    for _ in range(rounds):
        for k, f in impls.items():
            time.sleep(GAP)   # let the previous implementation's spinning threads park
            samples[k].append(per_call(f, loops[k]))
    return {k: statistics.median(v) for k, v in samples.items()}


def timing_options(ap, threads=2, rounds=7, target=0.2):
    """This protocol's options on an argparse parser: --threads, --rounds, --target, --gap."""
    ap.add_argument("--threads", type=int, default=threads, help="threads for every library")
    ap.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds (the median is kept)")
    ap.add_argument("--target", type=float, default=target, help="seconds per timing sample")
    ap.add_argument("--gap", type=float, default=GAP, help="idle seconds before each sample")
    return ap


def timing_parse(ap, argv):
    """ap.parse_args(argv), with --gap applied to bench()."""
    global GAP
    args = ap.parse_args(argv)
    GAP = args.gap
    return args


def check(got, ref, what, tol):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    err = np.max(np.abs(got - ref) / (np.abs(ref) + 1.0)) if ref.size else 0.0
    if not err <= tol:
        raise SystemExit(f"{what}: mpskern disagrees with the peer (max rel err {err:.2e})")


# ---------------------------------------------------------------------------- cases
RESNET = [  # C, K, k, stride, pad, H
    (64, 64, 3, 1, 1, 56), (64, 256, 1, 1, 0, 56), (256, 64, 1, 1, 0, 56),
    (128, 128, 3, 1, 1, 28), (256, 256, 3, 1, 1, 14), (512, 512, 3, 1, 1, 7),
    (256, 512, 1, 2, 0, 56),
]


def conv_cases(quick):
    out = []
    for C, K, k, s, p, H in RESNET[:2] if quick else RESNET:
        x, w = rand(8, C, H, H), rand(K, C, k, k) * 0.05
        out.append((f"conv2d {C}->{K} {k}x{k}/{s} @{H} b8", x, w, s, p, 1))
    x, w = rand(8, 128, 56, 56), rand(128, 1, 3, 3)
    out.append(("conv2d depthwise 128 3x3 @56 b8", x, w, 1, 1, 128))
    return out


def run_conv(rows, rounds, target, quick):
    for name, x, w, s, p, g in conv_cases(quick):
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        ref = F.conv2d(tx, tw, None, s, p, 1, g).numpy()
        check(mk_conv2d(x, w, s, p, g), ref, name, 1e-3)
        t = bench({"torch": lambda: F.conv2d(tx, tw, None, s, p, 1, g),
                   "mpskern": lambda: mk_conv2d(x, w, s, p, g)}, rounds, target)
        rows.append((name, "torch", t["torch"], t["mpskern"], 1.0))


def run_pool(rows, rounds, target, quick):
    x = rand(8, 64, 112, 112)
    tx = torch.from_numpy(x)
    for name, mode, k, s, p, tf in (
            ("max_pool2d 3x3/2 pad 1 (8,64,112,112)", 0, 3, 2, 1,
             lambda: F.max_pool2d(tx, 3, 2, 1)),
            ("avg_pool2d 2x2 (8,64,112,112)", 1, 2, 2, 0, lambda: F.avg_pool2d(tx, 2))):
        check(mk_pool(x, mode, k, s, p), tf().numpy(), name, 1e-5)
        t = bench({"torch": tf, "mpskern": lambda: mk_pool(x, mode, k, s, p)}, rounds, target)
        rows.append((name, "torch", t["torch"], t["mpskern"], 1.0))


def run_rows(rows, rounds, target, quick):
    shapes = [(4096, 4096)] if quick else [(4096, 4096), (64, 50257)]
    for shape in shapes:
        x = rand(*shape)
        n = shape[1]
        w, b = rand(n), rand(n)
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        for name, tf, mf in (
                ("softmax", lambda: torch.softmax(tx, -1), lambda: mk_softmax(x)),
                ("layer_norm", lambda: F.layer_norm(tx, (n,), tw, tb, 1e-5),
                 lambda: mk_rownorm(x, w, b, 0)),
                ("rms_norm", lambda: F.rms_norm(tx, (n,), tw, 1e-5),
                 lambda: mk_rownorm(x, w, b, 1))):
            label = f"{name} {shape}"
            check(mf(), tf().numpy(), label, 1e-4)
            t = bench({"torch": tf, "mpskern": mf}, rounds, target)
            rows.append((label, "torch", t["torch"], t["mpskern"], 1.0))


def run_matmul(rows, rounds, target, quick):
    for n in (512, 1024) if quick else (512, 1024, 2048, 4096):
        a, b = rand(n, n), rand(n, n)
        check(mk_matmul(a, b), a @ b, f"matmul {n}", 1e-3)
        t = bench({"numpy": lambda: a @ b, "mpskern": lambda: mk_matmul(a, b)}, rounds,
                  target if n < 4096 else max(target, 0.3))
        rows.append((f"matmul {n}^2 float32", "numpy", t["numpy"], t["mpskern"], 0.95))


def run_batch1(rows, rounds, target, quick):
    """Batch-1 cases where torch led at 2 threads (results/README.md); their target (>= 1.0)
    is issue 14's at 2 threads, shown without one at other thread counts."""
    goal = 1.0 if mpskern.get_num_threads() == 2 else None
    rng_bias = rand(64), rand(512)
    cases = [("conv2d 3->64 7x7/2 pad 3 @224 b1", rand(1, 3, 224, 224), rand(64, 3, 7, 7) * 0.1,
              rng_bias[0], 2, 3),
             ("conv2d 512->512 3x3 @7 b1", rand(1, 512, 7, 7), rand(512, 512, 3, 3) * 0.02,
              rng_bias[1], 1, 1)]
    for name, x, w, b, s, p in cases[:1] if quick else cases:
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        check(mpskern.conv2d(x, w, b, s, p, backend="cpu"), F.conv2d(tx, tw, tb, s, p).numpy(),
              name, 1e-3)
        t = bench({"torch": lambda: F.conv2d(tx, tw, tb, s, p),
                   "mpskern": lambda: mpskern.conv2d(x, w, b, s, p, backend="cpu")}, rounds, target)
        rows.append((name, "torch", t["torch"], t["mpskern"], goal))
    x, w, b = rand(1, 2048, 7, 7), rand(2048), rand(2048)
    tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
    check(mpskern.group_norm(x, 32, w, b, backend="cpu"), F.group_norm(tx, 32, tw, tb).numpy(),
          "group_norm", 1e-4)
    t = bench({"torch": lambda: F.group_norm(tx, 32, tw, tb),
               "mpskern": lambda: mpskern.group_norm(x, 32, w, b, backend="cpu")}, rounds, target)
    rows.append(("group_norm 32 groups (1,2048,7,7)", "torch", t["torch"], t["mpskern"], goal))
    a, bb = rand(128, 128), rand(128, 128)
    ta, tbb = torch.from_numpy(a), torch.from_numpy(bb)
    check(mk_matmul(a, bb), a @ bb, "matmul 128", 1e-3)
    t = bench({"torch": lambda: ta @ tbb, "mpskern": lambda: mk_matmul(a, bb)}, rounds, target)
    rows.append(("matmul 128^3 float32 b1", "torch", t["torch"], t["mpskern"], goal))


def run_tiny(rows, rounds, target, quick):
    x = rand(4, 4)
    tx = torch.from_numpy(x)
    check(mk_softmax(x), torch.softmax(tx, -1).numpy(), "softmax 4x4", 1e-5)
    t = bench({"torch tensor": lambda: torch.softmax(tx, -1),
               "torch numpy": lambda: torch.softmax(torch.from_numpy(x), -1).numpy(),
               "mpskern": lambda: mk_softmax(x)}, rounds, 0.05)
    rows.append(("softmax 4x4 tiny call [public API]", "torch numpy", t["torch numpy"],
                 t["mpskern"], 1.0))
    rows.append(("  (torch on a tensor, no numpy)", "torch tensor", t["torch tensor"],
                 t["mpskern"], None))
    rows.append(("  target: mpskern <= 3 us", "3 us", 3e-6, t["mpskern"], 1.0))


def run_f16(rows, rounds, target, quick):
    """float16 time / float32 time of the same mpskern op (target <= 1.5)."""
    x32 = rand(8, 64, 56, 56)
    w32 = rand(64, 64, 3, 3) * 0.05
    s32 = rand(4096, 4096)
    n = s32.shape[1]
    wn, bn = rand(n), rand(n)
    m32a, m32b = rand(1024, 1024), rand(1024, 1024)
    cases = [
        ("conv2d 64->64 3x3 @56 b8", lambda d: (lambda xx=x32.astype(d), ww=w32.astype(d):
                                              lambda: mk_conv2d(xx, ww, 1, 1))()),
        ("conv2d depthwise 128 3x3 @56 b8",
         lambda d: (lambda xx=rand(8, 128, 56, 56).astype(d), ww=rand(128, 1, 3, 3).astype(d):
                    lambda: mk_conv2d(xx, ww, 1, 1, 128))()),
        ("max_pool2d 3x3/2 (8,64,112,112)",
         lambda d: (lambda xx=rand(8, 64, 112, 112).astype(d): lambda: mk_pool(xx, 0, 3, 2, 1))()),
        ("softmax (4096,4096)", lambda d: (lambda xx=s32.astype(d): lambda: mk_softmax(xx))()),
        ("layer_norm (4096,4096)",
         lambda d: (lambda xx=s32.astype(d): lambda: mk_rownorm(xx, wn, bn, 0))()),
        ("matmul 1024^2", lambda d: (lambda aa=m32a.astype(d), bb=m32b.astype(d):
                                     lambda: mk_matmul(aa, bb))()),
    ]
    for cases_i in cases if not quick else cases[:2]:
        name, make = cases_i
        t = bench({"f32": make(np.float32), "f16": make(np.float16)}, rounds, target)
        # the "peer" here is our own float32 run; ratio = f32 / f16 time, target >= 1/1.5
        rows.append((f"float16 vs float32: {name}", "mk f32", t["f32"], t["f16"], 1 / 1.5))


def run_fairness(rows, rounds, target, quick):
    """The protocol checked on itself: each peer against the same call again (~1.0)."""
    a, b = rand(1024, 1024), rand(1024, 1024)
    t = bench({"numpy": lambda: a @ b, "numpy again": lambda: a @ b}, rounds, target)
    rows.append(("fairness: numpy matmul 1024^2 vs itself", "numpy", t["numpy"],
                 t["numpy again"], None))
    t = bench({"mpskern": lambda: mk_matmul(a, b), "mpskern again": lambda: mk_matmul(a, b)},
              rounds, target)
    rows.append(("fairness: mpskern matmul 1024^2 vs itself", "mpskern", t["mpskern"],
                 t["mpskern again"], None))
    x = torch.from_numpy(rand(64, 50257))
    t = bench({"torch": lambda: torch.softmax(x, -1),
               "torch again": lambda: torch.softmax(x, -1)}, rounds, target)
    rows.append(("fairness: torch softmax (64, 50257) vs itself", "torch", t["torch"],
                 t["torch again"], None))


GROUPS = {"conv": run_conv, "pool": run_pool, "rows": run_rows, "matmul": run_matmul,
          "tiny": run_tiny, "f16": run_f16, "batch1": run_batch1, "fairness": run_fairness}


def cpu_name():
    """The CPU's model name (Linux /proc/cpuinfo, macOS sysctl), else platform's guess."""
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        import subprocess
        return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                              text=True, timeout=5).stdout.strip() or platform.processor()
    except (OSError, subprocess.SubprocessError):
        return platform.processor()


def fmt_t(s):
    return f"{s * 1e6:9.1f} us" if s < 1e-3 else f"{s * 1e3:9.2f} ms"


def main(argv=None):
    global GAP
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--target", type=float, default=0.1, help="seconds per timing sample")
    ap.add_argument("--only", default=",".join(g for g in GROUPS if g != "fairness"),
                    help="comma list of " + ",".join(GROUPS))
    ap.add_argument("--gap", type=float, default=GAP,
                    help="idle seconds before each timing sample (spinning peer threads park)")
    ap.add_argument("--quick", action="store_true", help="a few cases, for a smoke run")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for every implementation (0 = each library's default)")
    args = ap.parse_args(argv)
    GAP = args.gap
    if args.threads:
        torch.set_num_threads(args.threads)
        mpskern.set_num_threads(args.threads)
    np_threads = numpy_blas_threads(args.threads)   # sets it when numpy was loaded earlier
    print(f"machine: {platform.machine()} {cpu_name()}, {os.cpu_count()} cores; "
          f"python {platform.python_version()}, numpy {np.__version__} "
          f"({np_threads or '?'} BLAS threads), torch {torch.__version__}"
          f" ({torch.get_num_threads()} threads), mpskern {mpskern.__version__} "
          f"({mpskern.get_num_threads()} threads); "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')}")
    print(f"medians of {args.rounds} interleaved rounds, {GAP:g} s idle before each sample; ratio = peer time / mpskern time "
          f"(float16 rows: float32 time / float16 time)\n")
    rows = []
    for g in args.only.split(","):
        GROUPS[g.strip()](rows, args.rounds, args.target, args.quick)
    if args.markdown:
        print("| case | peer | peer time | mpskern | ratio | target |\n|---|---|---:|---:|---:|---|")
    else:
        print(f"{'case':52s} {'peer':>12s} {'peer time':>12s} {'mpskern':>12s} {'ratio':>7s}  target")
    miss = 0
    for name, peer, tp, tm, goal in rows:
        ratio = tp / tm
        ok = "" if goal is None else ("ok" if ratio >= goal else f"MISS (>= {goal:.2f})")
        miss += ok.startswith("MISS")
        if args.markdown:
            print(f"| {name.strip()} | {peer} | {fmt_t(tp).strip()} | {fmt_t(tm).strip()} | "
                  f"{ratio:.2f} | {ok} |")
        else:
            print(f"{name:52s} {peer:>12s} {fmt_t(tp)} {fmt_t(tm)} {ratio:7.2f}  {ok}")
    print(f"\n{len(rows)} rows, {miss} below target")


if __name__ == "__main__":
    main()
