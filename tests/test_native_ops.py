"""mpskern._native's op table (mpskern/_native_ops.pxi): one row per op, the generic
cpu_run / mps_run and the bound cpu_<op> / mps_<op>, pack_args, and the one GIL rule."""
import threading
import time

import numpy as np
import pytest

from mpskern import _native

F32 = _native.F32
SOFTMAX = dict(outer=3, n=5, inner=1, log=0)


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_every_row_names_its_arrays_and_struct():
    assert set(_native.OPS) >= {"gemm", "conv2d", "pool2d", "softmax", "rownorm", "group_norm",
                                "batch_norm", "attention"}
    for name, row in _native.OPS.items():
        assert row.name == name and len(row.arrays) == len(row.written) >= 2
        assert row.written[-1] and row.fields
        assert callable(getattr(_native, f"cpu_{name}")) and callable(getattr(_native, f"mps_{name}"))
    assert _native.OPS["batch_norm"].written == (False, True, True, False, False, True)


@pytest.mark.parametrize("how", ["bound", "row", "name", "named object"])
def test_cpu_run_takes_a_row_its_name_or_a_named_object(how):
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    y = np.zeros_like(x)

    class Kernel:
        name = "softmax"
    if how == "bound":
        _native.cpu_softmax(SOFTMAX, F32, x, y)
    else:
        op = {"row": _native.OPS["softmax"], "name": "softmax", "named object": Kernel()}[how]
        _native.cpu_run(op, SOFTMAX, F32, x, y)
    np.testing.assert_allclose(y, _softmax_ref(x), rtol=1e-5)


def test_wrong_calls_say_what_is_wrong():
    x = np.zeros((3, 5), np.float32)
    with pytest.raises(TypeError, match=r"softmax takes 2 arrays \(x, y\), got 1"):
        _native.cpu_softmax(SOFTMAX, F32, x)
    with pytest.raises(TypeError, match=r"softmax takes 2 arrays \(x, y\), got 3"):
        _native.cpu_run("softmax", SOFTMAX, F32, x, x, x)
    with pytest.raises(ValueError, match=r"'nope' is not an op of mpskern._native; one of gemm"):
        _native.cpu_run("nope", SOFTMAX, F32, x, x)
    with pytest.raises(ValueError, match=r"args has no value for field 'log'"):
        _native.cpu_softmax(dict(outer=3, n=5, inner=1), F32, x, x)
    with pytest.raises(TypeError, match=r"args must be a dict"):
        _native.cpu_softmax([3, 5, 1, 0], F32, x, x)
    with pytest.raises(OverflowError):
        _native.cpu_softmax(dict(SOFTMAX, n=2 ** 31), F32, x, x)
    with pytest.raises(ValueError, match="read-only"):       # the output must be writable
        _native.cpu_softmax(SOFTMAX, F32, x, np.frombuffer(bytes(60), np.float32).reshape(3, 5))
    with pytest.raises(TypeError):
        _native.mps_run("softmax", None, SOFTMAX, F32, None, None)
    with pytest.raises(ValueError, match="unknown args kind 'nope'"):
        _native.pack_args("nope", {})


def test_pack_args_is_the_struct_the_kernels_get():
    raw = _native.pack_args("rownorm", dict(rows=4, n=7, kind=1, has_weight=0, has_bias=1,
                                            eps=0.5, unused="ignored"))
    assert np.frombuffer(raw[:20], np.int32).tolist() == [4, 7, 1, 0, 1]
    assert np.frombuffer(raw[20:], np.float32).tolist() == [0.5]


@pytest.mark.parametrize("order", ["struct", "reversed", "extra first", "extra between",
                                   "copy of a builder's"])
def test_the_struct_is_the_same_whatever_the_dict_order(order):
    """fill() reads a dict in the struct's order without lookups while its keys are the
    struct's fields in order, then by name: the bytes may not depend on the path taken."""
    fields = _native.OPS["gemm"].fields
    want = {f: i + 1 for i, f in enumerate(fields)}
    want.update(alpha=0.5, beta=-2.0)
    items = list(want.items())
    args = {"struct": lambda: dict(items), "reversed": lambda: dict(items[::-1]),
            "extra first": lambda: dict([("zz", 9)] + items),
            "extra between": lambda: dict(items[:5] + [("zz", 9)] + items[5:]),
            "copy of a builder's": lambda: dict(want)}[order]()
    raw = _native.pack_args("gemm", args)
    i32, f32 = np.frombuffer(raw, np.int32), np.frombuffer(raw, np.float32)
    for k, f in enumerate(fields):
        assert (f32[k] if f in ("alpha", "beta") else i32[k]) == want[f], (order, f)
    del args["ldc"]                        # a field missing after the in-order prefix
    with pytest.raises(ValueError, match=r"args has no value for field 'ldc'"):
        _native.pack_args("gemm", args)
    with pytest.raises(OverflowError):     # range checks on the in-order path too
        _native.pack_args("gemm", dict(items, M=2 ** 31))
    with pytest.raises(TypeError):
        _native.pack_args("gemm", dict(items, N="7"))


def test_every_argument_struct_is_a_row_and_cpu_execute_is_the_table():
    """Each mk_*_args struct of _abi.pxd is a row; the cpu backend's one entry is cpu_run
    itself (no Python frame between a public op and the table)."""
    from mpskern.backends.cpu import CpuBackend
    from test_abi_drift import models
    _, pxd = models()
    assert set(_native.OPS) == {n[3:-5] for n in pxd.structs if n.endswith("_args")}
    for name, row in _native.OPS.items():
        assert list(row.fields) == [f for f, _ in pxd.structs[f"mk_{name}_args"]]
    assert CpuBackend.execute is _native.cpu_run


def test_big_calls_release_the_gil():
    """A Python thread keeps running while another thread is inside a big CPU kernel (the
    rule: operands of 32 KiB or more release the GIL). Were the GIL held, the watcher could
    not take a single timestamp inside a call; one inside any of the calls is asked (a busy
    machine may not schedule it during every call)."""
    x = np.random.default_rng(1).random((1 << 21, 4), np.float32)   # 32 MiB
    y = np.empty_like(x)
    args = dict(outer=1 << 21, n=4, inner=1, log=0)   # short rows: the slowest per byte
    old = _native.cpu_get_num_threads()
    _native.cpu_set_num_threads(1)
    calls, ticks, done = [], [], threading.Event()

    def watch():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    try:
        w = threading.Thread(target=watch)
        w.start()
        time.sleep(0.01)
        for _ in range(4):
            t0 = time.perf_counter()
            _native.cpu_run("softmax", args, F32, x, y)
            calls.append((t0, time.perf_counter()))
        done.set()
        w.join()
    finally:
        _native.cpu_set_num_threads(old)
    inside = [t for t in ticks for a, b in calls if a < t < b]
    assert inside, ("no timestamp of the watcher inside any call", calls)
