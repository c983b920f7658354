"""Two Python threads running large matmuls (the whole-call GEMM path: one threaded BLAS
call whose jobs run as a gang on the pool, mk_pool_hold / mk_pool_gang) while a third
changes set_num_threads between 1 and 16 all the while: every result right, no deadlock
(a child process under a timeout, so a hang fails instead of stalling the suite)."""
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import threading, time
    import numpy as np, mpskern as mk
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 1040)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1024 * 2 ** -24 * (np.abs(a).astype(np.float64) @ np.abs(b)).max() * 4
    stop, bad, done = [], [], [0, 0]
    def mm(i):
        while not stop:
            err = np.abs(mk.matmul(a, b, backend="cpu") - want).max()
            if not err <= tol:
                bad.append(float(err))
            done[i] += 1
    def toggle():
        for n in [2, 1, 3, 4, 8, 2, 16, 5, 2] * 1000:
            if stop:
                break
            mk.set_num_threads(n)
            time.sleep(0.002)
    mk.set_num_threads(2)
    ts = [threading.Thread(target=mm, args=(i,)) for i in range(2)]
    ts.append(threading.Thread(target=toggle))
    for t in ts:
        t.start()
    time.sleep(3)
    stop.append(1)
    for t in ts:
        t.join()
    print("calls", sum(done), "bad", bad[:3])
""")


def test_matmuls_in_two_threads_while_the_count_changes():
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                       timeout=150)
    assert r.returncode == 0, r.stderr
    calls, bad = r.stdout.split(" bad ")
    assert bad.strip() == "[]", r.stdout
    assert int(calls.split()[1]) >= 4, r.stdout          # both threads did run matmuls
