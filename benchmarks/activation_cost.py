"""The fused activations' own arithmetic on the cpu backend, in cache, one core: ns per value of
objc/cpu/mk_cpu_activation.c's mk_activate (this CPU's vector set: AVX-512, AVX2, NEON), compiled
here on its own with the host C compiler as tests/test_cpu_activation.py does, and optionally
its error against float64 libm over float32 bit patterns.

    python benchmarks/activation_cost.py [--n 4096] [--rounds 3] [--tree DIR ...] [--check STRIDE]

Each call gets fresh inputs in [-6, 6] (a memcpy from a source row, timed alone and
subtracted): re-applying an activation to its own output drives negative values to denormals
and times their microcode assists instead. --tree DIR (repeatable) times another checkout's
source too (e.g. `git worktree add /tmp/main main`), rounds alternating between the trees.
--check STRIDE: every STRIDE-th of the 2^32 patterns (1 = all; OpenMP when the compiler has
it), error = |got - want| / max(1, |x|) (tests/test_cpu_activation.py's rule and limits), NaN
and +-inf as torch; exit 1 when a value is outside the limit. Needs a C compiler (cc) and the
checkout's objc/ sources. docs/cpu-kernels.md ("Fused activations") has the device's numbers.
"""
import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACTS = ["relu", "gelu", "gelu_tanh", "silu"]          # MK_ACT_* 1..4
DRIVER = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
void mk_activate(float *y, long n, int act);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double ref(double x, int act) {
    if (act == 1) return x < 0 ? 0.0 : x;
    if (act == 2) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    if (act == 3) return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    return x / (1.0 + exp(-x));
}
static void bench(long n) {             /* best of 9 trials of ~2e7 values, memcpy subtracted */
    float *y = malloc(n * 4), *src = malloc(n * 4);
    for (long i = 0; i < n; i++) src[i] = (float)((i * 7919) % 12001 - 6000) / 1000.f;
    long reps = 20000000 / n + 1; double base = 0;
    for (int act = 0; act <= 4; act++) {
        double best = 1e9;
        for (int trial = 0; trial < 9; trial++) {
            double t0 = now();
            for (long r = 0; r < reps; r++) { memcpy(y, src, n * 4); mk_activate(y, n, act); __asm__ volatile("" ::: "memory"); }
            double t = (now() - t0) / reps / n * 1e9; if (t < best) best = t;
        }
        if (act == 0) base = best; else printf("ns %d %.4f\n", act, best - base);
    }
}
static int check(long stride, int act, double tol) {
    const long CH = 4096; long nch = ((1L << 32) / stride + CH - 1) / CH, bad = 0; double worst = 0, wx = 0;
#pragma omp parallel reduction(+ : bad)
    {
        double lw = 0, lx = 0;
#pragma omp for schedule(dynamic, 64)
        for (long c = 0; c < nch; c++) {
            float x[4096], y[4096]; long n = 0;
            for (; n < CH && (uint64_t)(c * CH + n) * stride < (1ULL << 32); n++) {
                uint32_t u = (uint32_t)((uint64_t)(c * CH + n) * stride); memcpy(&x[n], &u, 4);
            }
            memcpy(y, x, n * 4); mk_activate(y, n, act);
            for (long i = 0; i < n; i++) {
                double xv = x[i], g = y[i], e;
                if (isnan(xv)) e = isnan(g) ? 0 : INFINITY;
                else if (isinf(xv)) e = (xv > 0 ? g == INFINITY : act == 1 ? g == 0 : isnan(g)) ? 0 : INFINITY;
                else e = isfinite(g) ? fabs(g - ref(xv, act)) / fmax(1.0, fabs(xv)) : INFINITY;
                if (!(e <= tol)) bad++;
                if (e > lw) { lw = e; lx = xv; }
            }
        }
#pragma omp critical
        if (lw > worst) { worst = lw; wx = lx; }
    }
    printf("err %d %ld %.3g %.9g %ld\n", act, ((1L << 32) + stride - 1) / stride, worst, wx, bad);
    return bad != 0;
}
int main(int argc, char **argv) {
    if (argv[1][0] == 'b') { bench(atol(argv[2])); return 0; }
    const double tol[] = {0, 0, 6e-7, 8e-7, 4e-7}; int fail = 0;
    for (int act = 1; act <= 4; act++) fail |= check(atol(argv[2]), act, tol[act]);
    return fail;
}
"""


def build(tree, work, name):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        sys.exit("activation_cost: needs a C compiler (cc); install gcc or clang")
    src = Path(tree) / "objc" / "cpu" / "mk_cpu_activation.c"
    if not src.is_file():
        sys.exit(f"activation_cost: no {src} (--tree wants a checkout of mpskern)")
    inc = [f"-I{Path(tree) / d}" for d in ("objc", "metal", "objc/cpu")]
    out = Path(work) / name
    base = [cc, "-O3", "-std=gnu11", "-fno-trapping-math", *inc, str(src), str(Path(work) / "driver.c"),
            "-o", str(out), "-lm"]
    if subprocess.run(base[:1] + ["-fopenmp"] + base[1:], capture_output=True).returncode:
        subprocess.run(base, check=True)              # no OpenMP: the check runs on one core
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="values per call (4096: in L1)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per tree (median)")
    ap.add_argument("--tree", action="append", default=[], help="another checkout to time too")
    ap.add_argument("--check", type=int, metavar="STRIDE", help="error over every STRIDE-th float32")
    args = ap.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or (args.check is not None and args.check < 1):
        ap.error("--n, --rounds and --check must be >= 1")
    trees = [str(ROOT)] + args.tree
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "driver.c").write_text(DRIVER)
        bins = [build(t, work, f"act{i}") for i, t in enumerate(trees)]
        times = {(t, a): [] for t in trees for a in ACTS}
        for _ in range(args.rounds):
            for t, b in zip(trees, bins):
                out = subprocess.run([str(b), "bench", str(args.n)], capture_output=True, text=True,
                                     check=True).stdout
                for act, ns in re.findall(r"ns (\d) (\S+)", out):
                    times[(t, ACTS[int(act) - 1])].append(float(ns))
        print(f"in-cache ns per value, one core, {args.n} values a call, median of {args.rounds}")
        print(f"{'activation':10s} " + " ".join(f"{Path(t).name[:14]:>14s}" for t in trees))
        for a in ACTS:
            print(f"{a:10s} " + " ".join(f"{statistics.median(times[(t, a)]):14.3f}" for t in trees))
        if args.check is None:
            return 0
        r = subprocess.run([str(bins[0]), "check", str(args.check)], capture_output=True, text=True)
        for act, count, worst, x, bad in re.findall(r"err (\d) (\d+) (\S+) (\S+) (\d+)", r.stdout):
            print(f"{ACTS[int(act) - 1]:10s} {count} values: max error {float(worst):.3g} of max(1, |x|)"
                  f" at x = {x}, {bad} outside the limit")
        return 1 if r.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
