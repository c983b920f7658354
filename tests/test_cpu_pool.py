"""The cpu backend's thread pool (objc/cpu/mk_cpu_threads.c) under concurrency: every chunk
of every job runs exactly once, whoever claims it. The ops here are exact (small-integer
GEMMs accumulated into their own output, max pools, bias fills), so a chunk lost leaves
its part of the output as it was, a chunk run twice adds its product twice, and either
shows as a difference from numpy's exact result. Shapes are large enough to go on the pool
(a GEMM of >= 4 MFLOP, fills of >= 2^17 floats); odd sizes leave short last chunks."""
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import foreground
import mpskern
from mpskern import reference


@pytest.fixture
def restore_threads():
    before = mpskern.get_num_threads()
    yield
    mpskern.set_num_threads(before)


def _ints(rng, shape, lo=-3, hi=4):
    return rng.integers(lo, hi, shape).astype(np.float32)


def _gemm_case(rng, m, n, k):
    a, b, c = _ints(rng, (m, k)), _ints(rng, (k, n)), _ints(rng, (m, n), -100, 100)
    want = (c.astype(np.float64) + a.astype(np.float64) @ b).astype(np.float32)
    return a, b, c, want


def _accumulate_in_place(a, b, c):
    out = c.copy()
    mpskern.gemm(a, b, out, out=out, backend="cpu")   # out += a @ b: a tile run twice adds twice
    return out


def _jobs(rng):
    """(call, exact result) pairs of different sizes and kinds."""
    jobs = []
    for m, n, k in [(160, 160, 160), (161, 97, 257), (300, 45, 130), (33, 1000, 140)]:
        a, b, c, want = _gemm_case(rng, m, n, k)
        jobs.append((lambda a=a, b=b, c=c: _accumulate_in_place(a, b, c), want))
    x = rng.standard_normal((2, 37, 61, 59)).astype(np.float32)
    want = reference.max_pool2d(x, 2, 2).astype(np.float32)
    jobs.append((lambda x=x: mpskern.max_pool2d(x, 2, 2, backend="cpu"), want))
    xl, w, bias = _ints(rng, (515, 3)), _ints(rng, (301, 3)), _ints(rng, (301,), -50, 50)
    want = (xl.astype(np.float64) @ w.T.astype(np.float64) + bias).astype(np.float32)
    jobs.append((lambda: mpskern.linear(xl, w, bias, backend="cpu"), want))
    return jobs


def _check(got, want, what):
    assert got.shape == want.shape, what
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{what}: {len(bad)} elements differ, first at {tuple(bad[0])}: " \
                          f"{got[tuple(bad[0])]} != {want[tuple(bad[0])]}"


@pytest.mark.parametrize("threads", [2, 5, 16])
def test_each_chunk_runs_once_serially(restore_threads, threads):
    mpskern.set_num_threads(threads)
    for i, (call, want) in enumerate(_jobs(np.random.default_rng(threads)) * 3):
        _check(call(), want, f"job {i} at {threads} threads")


@pytest.mark.parametrize("threads", [3, 16])
def test_calls_from_several_python_threads_at_once(restore_threads, threads):
    """One caller holds the pool at a time; the others run their op inline meanwhile."""
    mpskern.set_num_threads(threads)
    jobs = _jobs(np.random.default_rng(40 + threads))

    def work(i):
        call, want = jobs[i % len(jobs)]
        for r in range(4):
            _check(call(), want, f"job {i % len(jobs)} round {r} in python thread")
        return i

    with ThreadPoolExecutor(max_workers=5) as ex:
        assert sorted(ex.map(work, range(3 * len(jobs)))) == list(range(3 * len(jobs)))


def test_thread_count_changed_while_other_threads_call_ops(restore_threads):
    """set_num_threads between (and during) other threads' calls: a call uses the count it
    read when it started; workers are added as the count grows."""
    jobs = _jobs(np.random.default_rng(7))
    stop = threading.Event()

    def flip():
        counts = [1, 4, 2, 16, 3, 9]
        i = 0
        while not stop.is_set():
            mpskern.set_num_threads(counts[i % len(counts)])
            i += 1
            time.sleep(0.002)
        return i

    def work(i):
        call, want = jobs[i % len(jobs)]
        for r in range(3):
            _check(call(), want, f"job {i % len(jobs)} round {r} while the count changes")

    with ThreadPoolExecutor(max_workers=4) as ex:
        flipper = ex.submit(flip)
        try:
            list(ex.map(work, range(2 * len(jobs))))
        finally:
            stop.set()
        assert flipper.result() > 1


CHILD = r"""
import sys, time
import numpy as np
import mpskern
mpskern.set_num_threads(int(sys.argv[1]))
rng = np.random.default_rng(0)
a = rng.integers(-3, 4, (600, 600)).astype(np.float32)
want = (a.astype(np.float64) @ a).astype(np.float32)
print("ready", flush=True)
try:
    while True:
        got = mpskern.matmul(a, a, backend="cpu")
except KeyboardInterrupt:
    pass
# the pool is whole after the interrupt: the next calls use it and are exact
for _ in range(5):
    got = mpskern.matmul(a, a, backend="cpu")
    assert (got == want).all(), "wrong result after KeyboardInterrupt"
print("interrupted ok", flush=True)
"""


@pytest.mark.parametrize("threads", [2, 8])
def test_ctrl_c_during_calls_leaves_the_pool_usable(tmp_path, threads):
    """Ctrl-C arrives while ops run (the GIL released inside them): the op finishes, Python
    raises KeyboardInterrupt after it, and the pool takes the next calls correctly."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    with foreground.child([sys.executable, str(script), str(threads)], cwd=tmp_path) as p:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        out, err = foreground.interrupt(p, timeout=120)
    assert p.returncode == 0, err
    assert "interrupted ok" in out
