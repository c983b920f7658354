"""Adversarial checks of the output pool (mpskern/_outputs.py): a result >= 4 MiB that
anything still refers to, however indirectly (a view, a buffer export, a dlpack capsule, a
torch tensor, a ctypes object, a container, a reference cycle), never changes when later
calls run; ops given a pooled result as input or out= read and write the right memory;
threads calling ops at once never see their results change. Each case keeps a derived
object, drops the result itself, runs ops that would reuse a free buffer of that size, and
compares the kept object with a copy taken before."""
import ctypes
import gc
import pickle
import threading
import weakref

import numpy as np
import pytest

import mpskern
from mpskern import _outputs
import refs

SHAPE = (2048, 1024)                    # 8 MiB of float32, 4 MiB of float16: both pooled


@pytest.fixture(autouse=True)
def fresh_pool(monkeypatch):
    monkeypatch.setattr(_outputs, "_blocks", [])
    monkeypatch.setattr(_outputs, "_held", 0)


def _result(dtype=np.float32, seed=0):
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(dtype)
    y = mpskern.softmax(x)
    assert y.base is not None, "not a pooled result: the test would prove nothing"
    return y


def _stir(dtype=np.float32, rounds=3):
    """Calls whose results are the kept result's size (they would take its buffer were it
    free), their values unlike any kept one, each dropped at once."""
    for i in range(rounds):
        mpskern.softmax(np.full(SHAPE, float(i), dtype))                 # all 1/1024
        x = np.random.default_rng(100 + i).standard_normal(SHAPE).astype(dtype)
        mpskern.layer_norm(x, SHAPE[-1:])


def _torch():
    return pytest.importorskip("torch")


KEEPERS = {
    "slice": lambda y: y[1:],
    "transpose": lambda y: y.T,
    "reshape": lambda y: y.reshape(-1),
    "view-of-view": lambda y: y[::2][1:].reshape(-1)[3:],
    "asarray": lambda y: np.asarray(y),
    "memoryview": lambda y: memoryview(y),
    "memoryview-slice": lambda y: memoryview(y)[5:],
    "frombuffer": lambda y: np.frombuffer(memoryview(y), y.dtype),
    "as_strided": lambda y: np.lib.stride_tricks.as_strided(y, (SHAPE[0],), (y.strides[0],)),
    "dlpack-capsule": lambda y: y.__dlpack__(),
    "from_dlpack": lambda y: np.from_dlpack(y),
    "pickle-buffer": lambda y: pickle.PickleBuffer(y),
    "ctypes-from-buffer": lambda y: (ctypes.c_char * y.nbytes).from_buffer(y),
    "ctypes-pointer-array": lambda y: np.ctypeslib.as_array(
        y.ctypes.data_as(ctypes.POINTER(ctypes.c_float if y.itemsize == 4 else ctypes.c_uint16)),
        SHAPE),
    "list": lambda y: [y],
    "dict-of-view": lambda y: {"v": y[:, 1:]},
    "torch.from_numpy": lambda y: _torch().from_numpy(y),
    "torch.from_dlpack": lambda y: _torch().from_dlpack(y),
    "torch.as_tensor": lambda y: _torch().as_tensor(y),
}


def _read(kept, dtype):
    """The kept object's data as a numpy array (without copying through the pool)."""
    if isinstance(kept, list):
        return kept[0]
    if isinstance(kept, dict):
        return kept["v"]
    if type(kept).__name__ == "PyCapsule":
        return np.from_dlpack(_Capsule(kept))
    if type(kept).__name__ == "Tensor":
        return kept.numpy()
    if isinstance(kept, pickle.PickleBuffer):
        return np.asarray(kept.raw()).view(dtype)
    return np.asarray(memoryview(kept) if isinstance(kept, ctypes.Array) else kept).view(dtype)


class _Capsule:
    """A capsule as numpy's from_dlpack takes it (an object with __dlpack__)."""
    def __init__(self, c):
        self.c = c

    def __dlpack__(self, **_):
        return self.c

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("how", sorted(KEEPERS))
def test_a_kept_derived_object_never_changes(how, dtype):
    y = _result(dtype)
    kept = KEEPERS[how](y)
    capsule = how == "dlpack-capsule"            # a capsule is read once: at the end
    want = (y if capsule else _read(kept, dtype)).copy()
    del y
    gc.collect()
    _stir(dtype)
    got = _read(kept, dtype)
    assert np.array_equal(got, want), f"a result kept through {how} changed"


def test_a_result_in_a_reference_cycle_is_kept_until_collected():
    class Node:
        pass
    n = Node()
    n.me, n.y = n, _result()
    want, where = n.y.copy(), n.y.ctypes.data
    r = weakref.ref(n)
    del n
    _stir()                                      # the cycle is not collected yet
    if r() is not None:
        assert np.array_equal(r().y, want)
    gc.collect()
    assert r() is None
    assert _result(seed=2).ctypes.data == where  # collected: its buffer is free again


def test_out_and_inputs_that_are_pooled_results():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    y = mpskern.softmax(x)
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    for _ in range(3):                           # y = op(y): the input is never the output
        y2 = mpskern.softmax(y)
        assert not np.shares_memory(y, y2)
        y = y2
    keep = mpskern.softmax(x)
    got = mpskern.softmax(x * 2, out=keep)       # out= a pooled result: written in place
    assert got is keep
    mpskern.softmax(keep, out=keep[::-1][::-1])  # in place over itself, through a view
    z = mpskern.softmax(x)
    assert not np.shares_memory(z, keep)
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-7)
    a = mpskern.layer_norm(z, SHAPE[-1:])        # a pooled input to an op of the same size
    del z
    b = mpskern.layer_norm(a, SHAPE[-1:])        # a's buffer is referenced: not b's
    assert not np.shares_memory(a, b)


def test_a_result_dropped_while_an_input_converts_is_not_reused_as_that_input():
    """An input whose __array__ drops the caller's last reference to a pooled result and
    returns it: the op then holds it, so its result cannot take that buffer."""
    box = {"y": _result()}
    want = box["y"].copy()

    class Hand:
        def __array__(self, dtype=None, copy=None):
            return box.pop("y")
    out = mpskern.softmax(Hand())
    np.testing.assert_allclose(out, mpskern.softmax(want), rtol=1e-6, atol=1e-9)


def test_threads_calling_ops_never_see_their_results_change():
    bad, errors = [], []

    def work(t):
        try:
            rng = np.random.default_rng(t)
            kept = []
            for i in range(6):
                x = rng.standard_normal(SHAPE).astype(np.float32)
                y = mpskern.softmax(x) if i % 2 else mpskern.layer_norm(x, SHAPE[-1:])
                kept.append((y, y.copy()))
                if len(kept) > 2:
                    y0, w0 = kept.pop(0)
                    if not np.array_equal(y0, w0):
                        bad.append(t)
            for y0, w0 in kept:
                if not np.array_equal(y0, w0):
                    bad.append(t)
        except Exception as e:                   # noqa: BLE001 (reported below)
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors and not bad and not any(t.is_alive() for t in ts)
