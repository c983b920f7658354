"""Every op on a Python thread with a small stack (threading.stack_size): the cpu backend's
kernels run partly on the calling thread (its pool hands the caller chunks too), so a kernel
that keeps large buffers on its stack overflows a thread that Python, numpy and OpenBLAS run
on fine (musl's default thread stack is 128 KiB; threading.stack_size may set 32 KiB). Each
case runs in a child process (an overflow is a segfault), every op's selftest checks plus
cases that reach the threaded paths, checked against float64.

Our own AVX-512 GEMM (mk_cpu_sgemm_avx512.c compute()) kept its 96 KiB packed-A block on the
stack until 84caf9d (now one heap block per pool slot): a 64 KiB thread segfaulted in
mpskern.matmul with MPSKERN_CPU_GEMM=own (128 KiB passed), which auto takes for >= 512^3 on
> 8 threads (qa10, session 10); test_own_gemm_on_a_small_stack fails on 5a37612."""
import subprocess
import sys

import pytest

CHILD = r"""
import sys, threading, numpy as np
import mpskern, refs
from mpskern import ops
from mpskern.cli import selftest
mpskern.set_num_threads(int(sys.argv[2]))
which = sys.argv[3]
done = []

def extra():
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    a, b = f(300, 300), f(300, 300)
    yield "matmul 300^3", lambda: mpskern.matmul(a, b, backend="cpu"), \
        a.astype(np.float64) @ b, 301, np.float32
    x, w = f(1, 512, 14, 14), f(64, 512, 1, 1)
    yield "conv 1x1/2 C=512", lambda: mpskern.conv2d(x, w, stride=2, backend="cpu"), \
        mpskern.reference.conv2d(x, w, stride=2), 513, np.float32
    x, w = f(2, 64, 20, 20), f(64, 64, 3, 3)
    yield "conv 3x3 64", lambda: mpskern.conv2d(x, w, padding=1, backend="cpu"), \
        mpskern.reference.conv2d(x, w, padding=1), 577, np.float32
    q = f(1, 4, 300, 64)
    yield "attention 300", lambda: mpskern.scaled_dot_product_attention(q, q, q, backend="cpu"), \
        mpskern.reference.scaled_dot_product_attention(q, q, q), 301, np.float32

def cases():
    if which == "own":
        yield from [c for c in extra() if c[0].startswith("matmul")]
        return
    yield from extra()
    for c in selftest.CASES:
        for dt in ("float32", "float16"):
            call, want, terms = c.build(np.random.default_rng(1), np.dtype(dt))
            yield f"{c.op} {c.label} {dt}", (lambda call=call: call("cpu")), want, terms, dt

def work():
    for label, call, want, terms, dt in cases():
        got = np.asarray(call())
        # selftest's rule: the case's dtype (a result may hold float32 statistics too)
        if got.dtype == dt:
            refs.assert_close(got, want, dt, terms, what=label)
        else:
            err, tol = selftest._error(got, want), mpskern.reference.tolerance(dt, terms)
            assert err <= tol, (label, err, tol)
        done.append(label)
    done.append("all")

threading.stack_size(int(sys.argv[1]) << 10)
t = threading.Thread(target=work)
t.start(); t.join()
print("ran", len(done) - 1 if done[-1:] == ["all"] else "a part:", done[-1:])
"""


def _run(tmp_path, monkeypatch, kib, threads, which, gemm="auto"):
    import refs
    monkeypatch.setenv("MPSKERN_CPU_GEMM", gemm)
    monkeypatch.setenv("PYTHONPATH", f"{refs.__file__.rsplit('/', 1)[0]}:" +
                       __import__("os").environ.get("PYTHONPATH", ""))
    (tmp_path / "child.py").write_text(CHILD)
    r = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(kib), str(threads), which],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode} on a {kib} KiB thread: {r.stderr[-2000:]}"
    assert r.stdout.startswith("ran ") and r.stdout.split()[1].isdigit(), r.stdout + r.stderr[-2000:]
    assert int(r.stdout.split()[1]) >= (1 if which == "own" else 80), r.stdout


@pytest.mark.parametrize("threads", [1, 2])
def test_every_op_on_a_64_kib_thread(tmp_path, monkeypatch, threads):
    _run(tmp_path, monkeypatch, 64, threads, "all")


@pytest.mark.parametrize("threads", [1, 2])
def test_own_gemm_on_a_small_stack(tmp_path, monkeypatch, threads):
    _run(tmp_path, monkeypatch, 64, threads, "own", gemm="own")
