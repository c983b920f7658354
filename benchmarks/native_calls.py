"""Cost of crossing into mpskern._native, and what its GIL rule does to Python threads.

    python benchmarks/native_calls.py              # all
    python benchmarks/native_calls.py tiny sizes   # some
    python benchmarks/native_calls.py tiny --against OTHER/mpskern/_native*.so
                                      # before/after: rounds alternate between this build
                                      # and another one loaded beside it

  tiny      per-call time of the smallest calls: the public mpskern.softmax on a 4x4 float32
            array and every _native.cpu_<op> on a few elements (median over rounds)
  contend   tiny calls completed in 0.3 s while another Python thread spins in pure Python:
            a call that releases the GIL hands it to the spinner and waits for its switch
            interval (5 ms) to get it back, one that keeps it runs on
  parallel  two Python threads calling cpu_softmax / cpu_gemm on big inputs with the C pool at
            one thread: wall time of both against one thread doing the same calls in turn (needs
            two idle cores), and the longest pause of a Python thread ticking every 1 ms while
            the other calls (a call holding the GIL pauses it for the whole call)
  sizes     time of cpu_softmax / cpu_gemm / cpu_pool2d calls by operand bytes: where a call
            becomes long enough that holding the GIL through it would stall other threads
Medians of repeated rounds; the machine is shared, so compare numbers from one run. On a
busy machine instruction counts are steadier than wall time: run a tiny call N times under
`valgrind --tool=callgrind` (OPENBLAS_NUM_THREADS=1 MPSKERN_NUM_THREADS=1) and read the
inclusive cost of the Cython entry point (cpu_<op>) minus that of mk_cpu_<op>.
"""
import os
import statistics
import sys
import threading
import time

import numpy as np

import checkout_path  # noqa: E402,F401  (this checkout's mpskern if built, else the installed one)

import mpskern  # noqa: E402
from mpskern import _native, backends  # noqa: E402
from mpskern.bench.ticker import ticking  # noqa: E402

F32 = _native.F32


def per_call_us(fn, n=20000, rounds=15):
    """Median over rounds of the mean time of one call of fn(), in microseconds."""
    fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)


def gemm_args(M, N, K):
    return dict(batch=1, M=M, N=N, K=K, lda=K, ldb=N, ldc=N, stride_a=0, stride_b=0,
                stride_c=0, stride_out=0, trans_a=0, trans_b=0, has_c=0, alpha=1.0, beta=0.0,
                split_k=1, activation=0)


def pool_args(N, C, H, W, k):
    P, Q = H // k, W // k
    return dict(N=N, C=C, H=H, W=W, P=P, Q=Q, kh=k, kw=k, stride_h=k, stride_w=k, pad_h=0,
                pad_w=0, dil_h=1, dil_w=1, mode=0, count_include_pad=0, divisor=0,
                pad_h_end=0, pad_w_end=0)


def tiny_calls(native=_native):
    """name -> zero-argument callable doing the smallest call of that kind through `native`
    (this build's _native, or another one loaded beside it)."""
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    y = np.empty_like(x)
    v = np.ones(4, np.float32)
    x4 = x.reshape(1, 1, 4, 4)
    w = np.ones((1, 1, 1, 1), np.float32)
    y4 = np.empty((1, 1, 4, 4), np.float32)
    p4 = np.empty((1, 1, 2, 2), np.float32)
    sm = dict(outer=4, n=4, inner=1, log=0)
    ga = gemm_args(4, 4, 4)
    ca = dict(N=1, C=1, H=4, W=4, K=1, R=1, S=1, P=4, Q=4, stride_h=1, stride_w=1, pad_h=0,
              pad_w=0, dil_h=1, dil_w=1, groups=1, has_bias=0, activation=0)
    pa = pool_args(1, 1, 4, 4, 2)
    ra = dict(rows=4, n=4, kind=0, has_weight=1, has_bias=1, eps=1e-5)
    gn = dict(N=1, C=4, HW=4, groups=2, has_weight=1, has_bias=1, eps=1e-5)
    bn = dict(N=1, C=4, HW=4, training=0, has_running=1, has_weight=1, has_bias=1, eps=1e-5,
              momentum=0.1)
    rm, rv = np.zeros(4, np.float32), np.ones(4, np.float32)
    n = native
    return {
        "mpskern.softmax 4x4": lambda: mpskern.softmax(x),   # see use_backend_softmax
        "cpu_softmax 4x4": lambda: n.cpu_softmax(sm, F32, x, y),
        "cpu_gemm 4x4x4": lambda: n.cpu_gemm(ga, F32, x, x, None, y),
        "cpu_conv2d 1x1 @4x4": lambda: n.cpu_conv2d(ca, F32, x4, w, None, y4),
        "cpu_pool2d 2x2 @4x4": lambda: n.cpu_pool2d(pa, F32, x4, p4, None),
        "cpu_rownorm 4x4": lambda: n.cpu_rownorm(ra, F32, x, v, v, y),
        "cpu_group_norm 4x4": lambda: n.cpu_group_norm(gn, F32, x, v, v, y),
        "cpu_batch_norm 4x4": lambda: n.cpu_batch_norm(bn, F32, x, rm, rv, v, v, y),
        "pack_args gemm": lambda: n.pack_args("gemm", ga),
    }


def use_backend_softmax(native):
    """Make the cpu backend's entry (under the public mpskern.softmax) `native`'s cpu_run
    (a build from before the op table has none: the public row then times this build's)."""
    type(backends.get("cpu")).execute = staticmethod(getattr(native, "cpu_run", _native.cpu_run))


def tiny(other=None, rounds=21):
    if other is None:
        print("tiny calls: median us per call (15 rounds of 20000)")
        for name, fn in tiny_calls().items():
            print(f"  {name:24s} {per_call_us(fn):7.3f}")
        return
    print(f"tiny calls: median us per call, {rounds} rounds of 5000, this build and "
          f"{other.__file__} in turn; ratio = median of this / other per round")
    mine, theirs = tiny_calls(), tiny_calls(other)
    for name in mine:
        a, b = [], []
        for _ in range(rounds):
            use_backend_softmax(_native)
            a.append(per_call_us(mine[name], n=5000, rounds=1))
            use_backend_softmax(other)
            b.append(per_call_us(theirs[name], n=5000, rounds=1))
        ratio = statistics.median(x / y for x, y in zip(a, b))
        print(f"  {name:24s} this {statistics.median(a):7.3f}  other "
              f"{statistics.median(b):7.3f}  ratio {ratio:5.3f}")
    use_backend_softmax(_native)


def contend(seconds=0.3):
    print(f"contend: tiny calls done in {seconds} s while another Python thread spins")
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    for name, fn in tiny_calls().items():
        if name.startswith("pack_args"):
            continue
        stop.clear()
        t = threading.Thread(target=spin)
        t.start()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn()
            n += 1
        stop.set()
        t.join()
        print(f"  {name:24s} {n:9d}")


def _both(fn, threads, calls):
    """Wall seconds of `threads` Python threads each doing `calls` calls of fn(i)."""
    barrier = threading.Barrier(threads + 1)

    def work(i):
        barrier.wait()
        for _ in range(calls):
            fn(i)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def _longest_pause(fn, calls=5):
    """(longest pause of a Python thread ticking every 1 ms while this thread makes the
    calls, shortest call) in ms: a call that holds the GIL stops the ticker for its length."""
    durations = []
    with ticking(0.001) as ticks:
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            durations.append(time.perf_counter() - t0)
    return max(b - a for a, b in zip(ticks, ticks[1:])) * 1e3, min(durations) * 1e3


def parallel(rounds=7):
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(1)
    try:
        rng = np.random.default_rng(1)
        xs = [rng.standard_normal((256, 2048)).astype(np.float32) for _ in range(2)]
        ys = [np.empty_like(x) for x in xs]
        sm = dict(outer=256, n=2048, inner=1, log=0)
        As = [rng.standard_normal((192, 192)).astype(np.float32) for _ in range(2)]
        Cs = [np.empty_like(a) for a in As]
        ga = gemm_args(192, 192, 192)
        cases = {"cpu_softmax 256x2048": lambda i: _native.cpu_softmax(sm, F32, xs[i], ys[i]),
                 "cpu_gemm 192^3": lambda i: _native.cpu_gemm(ga, F32, As[i], As[i], None, Cs[i])}
        print("parallel: 2 Python threads (C pool at 1 thread); median wall ms of "
              f"{rounds} rounds, speedup = one thread doing both / two threads")
        for name, fn in cases.items():
            one, two = [], []
            for _ in range(rounds):
                one.append(_both(lambda i: (fn(0), fn(1)), 1, 10))
                time.sleep(0.05)
                two.append(_both(fn, 2, 10))
                time.sleep(0.05)
            a, b = statistics.median(one), statistics.median(two)
            print(f"  {name:24s} one {a * 1e3:7.2f}  two {b * 1e3:7.2f}  speedup {a / b:4.2f}")
        print("  while one thread calls, another ticks every 1 ms: its longest pause vs the call")
        xb = rng.random((1 << 21, 4), np.float32)
        yb = np.empty_like(xb)
        sb = dict(outer=1 << 21, n=4, inner=1, log=0)
        Ab = rng.random((768, 768), np.float32)
        Cb = np.empty_like(Ab)
        gb = gemm_args(768, 768, 768)
        big = {"cpu_softmax 2M x 4": lambda: _native.cpu_softmax(sb, F32, xb, yb),
               "cpu_gemm 768^3": lambda: _native.cpu_gemm(gb, F32, Ab, Ab, None, Cb)}
        for name, fn in big.items():
            pause, call = _longest_pause(fn)
            print(f"  {name:24s} longest pause {pause:7.2f} ms  shortest call {call:7.2f} ms")
    finally:
        mpskern.set_num_threads(old)


def sizes():
    print("sizes: median us per call by operand bytes (inputs + outputs)")
    rng = np.random.default_rng(2)
    for n in (16, 64, 256, 1024, 4096, 16384):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        y = np.empty_like(x)
        a = dict(outer=n, n=4, inner=1, log=0)
        t = per_call_us(lambda: _native.cpu_softmax(a, F32, x, y), n=2000, rounds=7)
        print(f"  cpu_softmax {n:5d}x4     {2 * x.nbytes:8d} B {t:9.2f}")
    for m in (4, 8, 16, 32, 64, 128):
        A = rng.standard_normal((m, m)).astype(np.float32)
        C = np.empty_like(A)
        g = gemm_args(m, m, m)
        t = per_call_us(lambda: _native.cpu_gemm(g, F32, A, A, None, C), n=500, rounds=7)
        print(f"  cpu_gemm {m:4d}^3        {3 * A.nbytes:8d} B {t:9.2f}")
    for h in (4, 16, 32, 64, 128):
        x = rng.standard_normal((1, 4, h, h)).astype(np.float32)
        y = np.empty((1, 4, h // 2, h // 2), np.float32)
        a = pool_args(1, 4, h, h, 2)
        t = per_call_us(lambda: _native.cpu_pool2d(a, F32, x, y, None), n=1000, rounds=7)
        print(f"  cpu_pool2d 4x{h:3d}x{h:<3d}   {x.nbytes + y.nbytes:8d} B {t:9.2f}")


PARTS = {"tiny": tiny, "contend": contend, "parallel": parallel, "sizes": sizes}

def load_other(path):
    """Another build's _native (an .so), imported beside this one under another name."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("other_build._native", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    argv = sys.argv[1:]
    if {"-h", "--help"} & set(argv):
        sys.exit(print(__doc__))
    other = None
    if "--against" in argv:
        i = argv.index("--against")
        other = load_other(argv[i + 1])
        del argv[i:i + 2]
    for part in argv or PARTS:
        if part not in PARTS:
            sys.exit(f"unknown part {part!r}; choose from {', '.join(PARTS)}")
        PARTS[part](other) if part == "tiny" else PARTS[part]()
