"""Calls from several Python threads at once give the same results as serial calls
(the GIL is released inside the kernels, so the calls really overlap)."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)


def _jobs(rng):
    f = np.float32
    jobs = []
    for i in range(6):
        a, b = refs.rand((40 + i, 33), f, rng), refs.rand((33, 29 + i), f, rng)
        jobs.append((mpskern.matmul, (a, b), {}, refs.matmul(a, b), 33))
        x = refs.rand((2, 3, 12 + i, 11), f, rng)
        w = refs.rand((4, 3, 3, 3), f, rng)
        jobs.append((mpskern.conv2d, (x, w), dict(padding=1), refs.conv2d(x, w, padding=1), 27))
        s = refs.rand((17, 70 + i), f, rng, -5, 5)
        jobs.append((mpskern.softmax, (s,), {}, refs.softmax(s), 1))
        jobs.append((mpskern.layer_norm, (s, 70 + i), {}, refs.layer_norm(s, 70 + i), 1))
        jobs.append((mpskern.max_pool2d, (x, 3, 2, 1), {}, refs.max_pool2d(x, 3, 2, 1), 1))
    return jobs


def test_concurrent_calls_match_references(backend):
    jobs = _jobs(np.random.default_rng(30))

    def work(job):
        fn, args, kw, ref, terms = job
        return [fn(*args, backend=backend, **kw) for _ in range(3)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, jobs * 3))
    for (fn, _, _, ref, terms), outs in zip(jobs * 3, results):
        for got in outs:
            refs.assert_close(got, ref, np.float32, terms, what=f"{fn.__name__} in a thread")
