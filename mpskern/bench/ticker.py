"""A Python thread that ticks while this thread calls native code: a call that holds the GIL
stops the ticks for its length (tests/test_native_gil.py, benchmarks/native_calls.py)."""
import contextlib
import threading
import time


@contextlib.contextmanager
def ticking(interval):
    """Yield the list of time.perf_counter() times at which a thread sleeping `interval`
    seconds between ticks ran; it is ticking when the block starts and stopped when it ends."""
    ticks, done = [], threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(interval)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    time.sleep(10 * interval)
    try:
        yield ticks
    finally:
        done.set()
        thread.join()
