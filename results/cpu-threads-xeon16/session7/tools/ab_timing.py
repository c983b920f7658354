"""The timing sample of the session-7 A/B tools: one warm-up call, then calls until
`target` seconds have passed; seconds per call."""
import time


def sample(fn, target=0.1):
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        t = time.perf_counter() - t0
        if t >= target:
            return t / n
