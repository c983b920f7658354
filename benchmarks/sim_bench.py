"""Simulator benchmark: the targets of issue 3, measured.

    python benchmarks/sim_bench.py            # all
    python benchmarks/sim_bench.py barrier gemm compile

  barrier   ns per thread arrival at a threadgroup barrier (1024-thread group, one worker)
  simd      ns per lane of a simd_sum
  plain     ns per thread of a barrier-free kernel (lanes run as a loop)
  gemm      256x256x256 float32: the team's gemm through backend "sim" (mpskern.matmul
            when present, else the backend's gemm) and this file's tiled kernel; seconds
            after compilation (median of 5)
  compile   every shipped (file, macros) library compiled cold into an empty cache on
            MPSKERN_BENCH_JOBS (default 2) parallel compiler processes; then cached
Targets: barrier <= 100 ns, gemm <= 0.5 s, compile <= 60 s cold on 2 cores.
"""
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import checkout_path  # noqa: E402,F401  (this checkout's mpskern if built, else the installed one)

import mpskern  # noqa: E402
from mpskern import backends  # noqa: E402

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
LOOP = HEAD + """
kernel void barriers(device float* out [[buffer(0)]], constant uint& reps [[buffer(1)]],
                     uint i [[thread_index_in_threadgroup]]) {
    float acc = 0.0f;
    for (uint r = 0; r < reps; r++) { acc += float(r); threadgroup_barrier(mem_flags::mem_none); }
    out[i] = acc;
}
kernel void sums(device float* out [[buffer(0)]], constant uint& reps [[buffer(1)]],
                 uint i [[thread_index_in_threadgroup]]) {
    float acc = float(i);
    for (uint r = 0; r < reps; r++) acc = simd_sum(acc) * 0.001f;
    out[i] = acc;
}
kernel void plain(device float* out [[buffer(0)]], constant uint& reps [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    out[i] = float(i) * 2.0f;
}
"""

# A classic threadgroup-tiled gemm (16x16 tiles, one output per thread): the reference
# workload for the simulator itself, independent of the team's kernels.
TILED = HEAD + """
#define T 16
kernel void tiled(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                  device float* C [[buffer(2)]], constant uint& n [[buffer(3)]],
                  uint2 gid [[thread_position_in_grid]], uint2 lid [[thread_position_in_threadgroup]]) {
    threadgroup float As[T][T];
    threadgroup float Bs[T][T];
    float acc = 0.0f;
    for (uint k0 = 0; k0 < n; k0 += T) {
        As[lid.y][lid.x] = A[gid.y * n + k0 + lid.x];
        Bs[lid.y][lid.x] = B[(k0 + lid.y) * n + gid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0; k < T; k++) acc += As[lid.y][k] * Bs[k][lid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    C[gid.y * n + gid.x] = acc;
}
"""


def _timed(fn, reps=5, clock=time.perf_counter):
    fn()
    ts = []
    for _ in range(reps):
        t = clock()
        fn()
        ts.append(clock() - t)
    return statistics.median(ts)


# With one worker the dispatch runs on the calling thread, so its CPU time (thread_time)
# is the simulator's own cost even on a loaded machine; wall time is printed beside it.
def bench_sync(kind, threads=1024, reps=200):
    be = backends.get("sim")
    be.set_sim_options(workers=1)
    res = []
    try:
        out = np.zeros(threads, np.float32)
        k = mpskern.metal_kernel(LOOP, kind)
        for clock in (time.thread_time, time.perf_counter):
            run = lambda r: k(out, np.uint32(r), grid=(threads,), threadgroup=(threads,), backend="sim")  # noqa
            base = _timed(lambda: run(0), clock=clock)
            t = _timed(lambda: run(reps), clock=clock)
            res.append((t - base) / (reps * threads) * 1e9)
    finally:
        be.set_sim_options()
    return res


def bench_plain(n=1 << 20):
    be = backends.get("sim")
    be.set_sim_options(workers=1)
    try:
        out = np.zeros(n, np.float32)
        k = mpskern.metal_kernel(LOOP, "plain")
        run = lambda: k(out, np.uint32(0), grid=(n,), threadgroup=(256,), backend="sim")  # noqa
        res = [_timed(run, clock=c) / n * 1e9 for c in (time.thread_time, time.perf_counter)]
    finally:
        be.set_sim_options()
    return res


def bench_gemm(n=256):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    res = {}
    c = np.zeros((n, n), np.float32)
    k = mpskern.metal_kernel(TILED, "tiled")
    run = lambda: k(a, b, c, np.uint32(n), grid=(n, n), threadgroup=(16, 16), backend="sim")  # noqa
    res["tiled16 (bench kernel)"] = (_timed(run), _timed(run, clock=time.process_time))
    assert np.abs(c - ref).max() < 1e-3 * n
    if hasattr(mpskern, "matmul"):
        out = mpskern.matmul(a, b, backend="sim")
        assert np.abs(out - ref).max() < 1e-3 * n
        cfg = backends.get("sim").last_config
        run = lambda: mpskern.matmul(a, b, backend="sim")  # noqa
        res[f"mpskern.matmul ({cfg.get('kernel')} {cfg.get('BM')}x{cfg.get('BN')}x{cfg.get('BK')} "
            f"{cfg.get('WM')}x{cfg.get('WN')})"] = (_timed(run), _timed(run, clock=time.process_time))
    return res


def shipped_libraries():
    """Every (file, macros) library the shipped configurations compile."""
    import json
    from mpskern.tuning import spaces
    libs = set()
    for op, sp in spaces.SPACES.items():
        cfgs = spaces.shipped(op)
        for fam in ("apple7", "apple8", "apple9", "apple10"):
            p = os.path.join(os.path.dirname(spaces.__file__), "defaults", fam + ".json")
            if os.path.exists(p):
                cfgs += [e["config"] for e in json.load(open(p))["entries"] if e["op"] == op]
        for c in cfgs:
            libs.add((sp.file, tuple(sorted(spaces.macros(op, c).items()))))
    return sorted(libs)


def bench_compile(jobs=None):
    from mpskern import sim
    from mpskern.paths import metal_source
    from mpskern.sim import compiler
    jobs = jobs or int(os.environ.get("MPSKERN_BENCH_JOBS", "2"))
    libs = shipped_libraries()
    old = os.environ.get("MPSKERN_CACHE_DIR")
    with tempfile.TemporaryDirectory() as d:
        os.environ["MPSKERN_CACHE_DIR"] = d
        compiler._built.clear()
        try:
            def one(lib):
                f, m = lib
                return sim.build_library(metal_source(f), dict(m), origin=f)
            t = time.perf_counter()
            with ThreadPoolExecutor(jobs) as ex:
                list(ex.map(one, libs))
            cold = time.perf_counter() - t
            compiler._built.clear()
            t = time.perf_counter()
            for lib in libs:
                one(lib)
            warm = time.perf_counter() - t
        finally:
            if old is None:
                os.environ.pop("MPSKERN_CACHE_DIR", None)
            else:
                os.environ["MPSKERN_CACHE_DIR"] = old
            compiler._built.clear()
    return len(libs), cold, warm, jobs


def main(argv):
    what = argv or ["barrier", "simd", "plain", "gemm", "compile"]
    print(f"mpskern {mpskern.__version__}, {os.cpu_count()} CPUs, compiler: "
          f"{__import__('mpskern.sim.compiler', fromlist=['x']).compiler()[1]}")
    print(f"load average: {os.getloadavg()[0]:.1f} (wall times suffer on a shared machine)")
    if "barrier" in what:
        cpu, wall = bench_sync("barriers")
        print(f"barrier:  {cpu:6.1f} ns CPU, {wall:6.1f} ns wall per thread arrival (target <= 100)")
    if "simd" in what:
        cpu, wall = bench_sync("sums")
        print(f"simd_sum: {cpu:6.1f} ns CPU, {wall:6.1f} ns wall per lane")
    if "plain" in what:
        cpu, wall = bench_plain()
        print(f"plain:    {cpu:6.1f} ns CPU, {wall:6.1f} ns wall per thread (barrier-free kernel)")
    if "gemm" in what:
        for name, (wall, cpu) in bench_gemm().items():
            print(f"gemm 256^3 float32 {name}: {wall:.3f} s wall, {cpu:.3f} s CPU on "
                  f"{os.cpu_count()} workers (target <= 0.5 s)")
    if "compile" in what:
        n, cold, warm, jobs = bench_compile()
        print(f"compile: {n} shipped libraries, cold {cold:.1f} s on {jobs} jobs "
              f"(target <= 60), cached {warm:.2f} s")


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    main(sys.argv[1:])
