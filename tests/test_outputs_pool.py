"""mpskern/_outputs.py: large results reuse a buffer only once nothing refers to it (no
view, memoryview or derived array of an earlier result is ever overwritten), the pool's
bytes stay bounded however many results a program keeps, concurrent threads never get
one buffer twice, ops' results are right either way; MPSKERN_OUTPUT_POOL_MB is checked."""
import subprocess
import sys
import threading

import numpy as np
import pytest

import mpskern
from mpskern import _outputs

SHAPE = (1024, 1024, 2)                     # 8 MiB of float32: pooled


def addr(a):
    return a.__array_interface__["data"][0]


@pytest.fixture(autouse=True)
def fresh_pool(monkeypatch):
    monkeypatch.setattr(_outputs, "_blocks", [])
    monkeypatch.setattr(_outputs, "_held", 0)


def test_a_buffer_is_reused_once_the_last_reference_is_gone():
    a = _outputs.empty(SHAPE, np.float32)
    where = addr(a)
    keep = [a[1:], a.T, memoryview(a), np.asarray(memoryview(a)).reshape(-1)]
    del a
    while keep:
        b = _outputs.empty(SHAPE, np.float32)
        assert addr(b) != where, f"reused while {len(keep)} references to it lived"
        del b
        keep.pop()
    b = _outputs.empty(SHAPE, np.float32)
    assert addr(b) == where and b.shape == SHAPE and b.flags.c_contiguous
    small = _outputs.empty((4, 4), np.float32)            # below MIN_BYTES: np.empty's
    assert small.base is None and _outputs.held()[0] == 2


def test_results_kept_alive_never_share_memory_and_the_pool_stays_bounded():
    kept = []
    for i in range(3 * _outputs.MAX_BLOCKS):
        a = _outputs.empty(SHAPE, np.float32)
        a.fill(i)
        kept.append(a)
    blocks, held, free = _outputs.held()
    assert blocks <= _outputs.MAX_BLOCKS and held <= _outputs.POOL_BYTES and free == 0
    for i, a in enumerate(kept):
        assert a[0, 0, 0] == i and a[-1, -1, -1] == i
    del kept, a
    assert _outputs.held()[2] == _outputs.held()[1]      # all free again


def test_threads_never_get_one_buffer_twice():
    bad = []

    def work(tid):
        for _ in range(20):
            a = _outputs.empty(SHAPE, np.float32)
            a[::256].fill(tid)
            if not (a[::256] == tid).all():
                bad.append(tid)
            del a

    ts = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_an_op_result_kept_by_the_caller_is_not_overwritten():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    w1, w2 = (rng.standard_normal((8192, 64)).astype(np.float32) for _ in range(2))
    y1 = mpskern.linear(x, w1)                            # 8 MiB: pooled
    want1 = y1.copy()
    y2 = mpskern.linear(x, w2)
    assert not np.shares_memory(y1, y2)
    assert np.array_equal(y1, want1)
    where = addr(y2)
    del y2
    y3 = mpskern.linear(x, w2)
    assert addr(y3) == where                              # the freed buffer, reused
    np.testing.assert_allclose(y3, x @ w2.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("value,ok", [("0", True), ("12", True), ("", True), (" 12 ", True),
                                      ("lots", False), ("-1", False), ("1_0", False)])
def test_the_pool_size_setting(tmp_path, value, ok):
    code = ("import numpy as np, mpskern; from mpskern import _outputs as o; "
            "a = mpskern.softmax(np.zeros((2048, 1024), np.float32)); print(o.held()[0])")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={**__import__("os").environ, "MPSKERN_OUTPUT_POOL_MB": value})
    if ok:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == ("0" if value == "0" else "1")
    else:
        assert r.returncode != 0          # -1 was taken as 0 (off), '' refused, 1_0 as 10
        assert f"MPSKERN_OUTPUT_POOL_MB={value!r}: expected a whole number of MiB >= 0" in r.stderr
