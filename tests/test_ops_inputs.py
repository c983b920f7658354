"""Input forms every op accepts: non-contiguous and read-only arrays, zero-size batches
(no backend call), out= (including out aliasing an input and non-contiguous out)."""
import numpy as np
import pytest

import mpskern
import refs
from mpskern import backends
from refs import backend  # noqa: F401  (fixture)

f32 = np.float32


def test_non_contiguous_inputs(backend):
    rng = np.random.default_rng(20)
    a = refs.rand((6, 5), f32, rng).T            # (5, 6), Fortran order
    b = refs.rand((12, 4), f32, rng)[::2]        # (6, 4), strided rows
    refs.assert_close(mpskern.matmul(a, b, backend=backend), refs.matmul(a, b), f32, 6)
    x = refs.rand((2, 3, 10, 12), f32, rng)[:, :, ::2, 1::2]
    w = refs.rand((3, 4, 3, 3), f32, rng).transpose(1, 0, 2, 3)
    refs.assert_close(mpskern.conv2d(x, w, padding=1, backend=backend),
                      refs.conv2d(x, w, padding=1), f32, 27)
    s = refs.rand((7, 9), f32, rng)[:, ::3]
    refs.assert_close(mpskern.softmax(s, 0, backend=backend), refs.softmax(s, 0), f32)
    refs.assert_close(mpskern.max_pool2d(x, 2, backend=backend),
                      refs.max_pool2d(x, 2), f32)
    wn = refs.rand((8,), f32, rng)[::2]
    refs.assert_close(mpskern.group_norm(x, 1, wn[:3], backend=backend),
                      refs.group_norm(x, 1, wn[:3]), f32)


def test_read_only_inputs(backend):
    rng = np.random.default_rng(21)
    x = refs.rand((3, 8), f32, rng)
    w = refs.rand((8,), f32, rng)
    for arr in (x, w):
        arr.flags.writeable = False
    refs.assert_close(mpskern.layer_norm(x, 8, w, backend=backend),
                      refs.layer_norm(x, 8, w), f32)
    refs.assert_close(mpskern.matmul(x, x.T, backend=backend), refs.matmul(x, x.T), f32, 8)
    refs.assert_close(mpskern.softmax(x, backend=backend), refs.softmax(x), f32)


def test_python_float_lists_are_float64_and_rejected():
    # a Python list becomes float64 under numpy's rules, so it is rejected like float64
    with pytest.raises(TypeError, match="float64"):
        mpskern.softmax([1.0, 2.0], backend="cpu")


ZERO = [
    (mpskern.matmul, (np.zeros((0, 3, 4), f32), np.zeros((4, 5), f32)), {}, (0, 3, 5)),
    (mpskern.matmul, (np.zeros((3, 4), f32), np.zeros((4, 0), f32)), {}, (3, 0)),
    (mpskern.gemm, (np.zeros((0, 4), f32), np.zeros((4, 5), f32)), {}, (0, 5)),
    (mpskern.conv2d, (np.zeros((0, 2, 5, 5), f32), np.zeros((3, 2, 3, 3), f32)), {}, (0, 3, 3, 3)),
    (mpskern.max_pool2d, (np.zeros((0, 2, 5, 5), f32), 2), {}, (0, 2, 2, 2)),
    (mpskern.avg_pool2d, (np.zeros((0, 3, 5, 5), f32), 3, 2, 1), {}, (0, 3, 3, 3)),
    (mpskern.softmax, (np.zeros((0, 7), f32),), {}, (0, 7)),
    (mpskern.log_softmax, (np.zeros((4, 0), f32),), {}, (4, 0)),
    (mpskern.layer_norm, (np.zeros((0, 8), f32), 8), {}, (0, 8)),
    (mpskern.rms_norm, (np.zeros((0, 2, 8), np.float16), (2, 8)), {}, (0, 2, 8)),
    (mpskern.group_norm, (np.zeros((0, 4, 3), f32), 2), {}, (0, 4, 3)),
    (mpskern.batch_norm, (np.zeros((0, 3, 2), f32), np.zeros(3, f32), np.ones(3, f32)),
     dict(training=True), (0, 3, 2)),
]


@pytest.mark.parametrize("fn,args,kw,shape", ZERO, ids=[f"{z[0].__name__}-{i}" for i, z in enumerate(ZERO)])
def test_zero_size_batches_skip_the_backend(monkeypatch, fn, args, kw, shape):
    cpu = backends.get("cpu")

    def boom(*a, **k):
        raise AssertionError("the backend was called for an empty result")
    monkeypatch.setattr(cpu, "execute", boom)   # every kernel goes through execute
    got = fn(*args, backend="cpu", **kw)
    assert got.shape == shape and got.dtype == args[0].dtype


def test_out_is_filled_and_returned(backend):
    rng = np.random.default_rng(22)
    x = refs.rand((3, 5), f32, rng)
    out = np.empty((3, 5), f32)
    got = mpskern.softmax(x, out=out, backend=backend)
    assert got is out
    refs.assert_close(out, refs.softmax(x), f32)
    a, b = refs.rand((4, 6), f32, rng), refs.rand((6, 3), f32, rng)
    out = np.empty((4, 3), f32)
    assert mpskern.matmul(a, b, out=out, backend=backend) is out
    refs.assert_close(out, refs.matmul(a, b), f32, 6)


def test_out_aliasing_the_input(backend):
    x = refs.rand((4, 6), f32, np.random.default_rng(23))
    ref = refs.log_softmax(x)
    got = mpskern.log_softmax(x, out=x, backend=backend)
    assert got is x
    refs.assert_close(x, ref, f32)
    a = refs.rand((5, 5), f32, np.random.default_rng(24))
    ref = refs.matmul(a, a)
    mpskern.matmul(a, a, out=a, backend=backend)  # reads a while writing it
    refs.assert_close(a, ref, f32, 5)


def test_non_contiguous_out(backend):
    x = refs.rand((2, 3, 6, 6), f32, np.random.default_rng(25))
    store = np.zeros((2, 3, 3, 6), f32)
    out = store[:, :, :, ::2]
    got = mpskern.avg_pool2d(x, 2, out=out, backend=backend)
    assert got is out
    refs.assert_close(store[:, :, :, ::2], refs.avg_pool2d(x, 2), f32)
    assert np.all(store[:, :, :, 1::2] == 0)
