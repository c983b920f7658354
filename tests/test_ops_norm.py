"""layer_norm, rms_norm, group_norm, batch_norm (inference and training with in-place
running statistics) against float64 references."""
import numpy as np
import pytest

import mpskern
import refs
from refs import backend  # noqa: F401  (fixture)


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("shape,ns,affine", [
    ((4, 8), 8, True), ((3, 5, 7), (7,), False), ((2, 3, 5, 6), (5, 6), True),
    ((2, 3, 4), (2, 3, 4), True), ((6, 513), 513, True)])
def test_layer_norm(backend, dtype, shape, ns, affine):
    rng = np.random.default_rng(9)
    x = refs.rand(shape, dtype, rng, -3, 5)
    nshape = (ns,) if isinstance(ns, int) else ns
    w = refs.rand(nshape, np.float32, rng) if affine else None
    b = refs.rand(nshape, dtype, rng) if affine else None   # input dtype accepted too
    got = mpskern.layer_norm(x, ns, w, b, 1e-5, backend=backend)
    refs.assert_close(got, refs.layer_norm(x, ns, w, b, 1e-5), dtype, what="layer_norm")


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("shape,ns,eps,affine", [
    ((4, 8), 8, None, True), ((3, 5, 7), (5, 7), 1e-6, False), ((5, 129), 129, None, False)])
def test_rms_norm(backend, dtype, shape, ns, eps, affine):
    rng = np.random.default_rng(10)
    x = refs.rand(shape, dtype, rng, -2, 2)
    w = refs.rand((ns,) if isinstance(ns, int) else ns, np.float32, rng) if affine else None
    got = mpskern.rms_norm(x, ns, w, eps, backend=backend)
    refs.assert_close(got, refs.rms_norm(x, ns, w, eps), dtype, what="rms_norm")


def test_rms_norm_default_eps_is_dtype_eps(backend):
    """A tiny row makes eps dominate: float16's eps (9.8e-4) is not float32's (1.2e-7)."""
    x = np.full((1, 4), 1e-3, np.float16)
    got = mpskern.rms_norm(x, 4, backend=backend)
    ref = refs.rms_norm(x, 4)
    assert abs(ref[0, 0] - 1.0) > 0.2  # the test can tell the eps apart
    refs.assert_close(got, ref, np.float16, what="rms_norm eps")


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("shape,groups,affine", [
    ((2, 6, 5, 5), 3, True), ((1, 4, 7), 1, False), ((3, 8, 3, 3), 8, True), ((2, 6), 2, True)])
def test_group_norm(backend, dtype, shape, groups, affine):
    rng = np.random.default_rng(11)
    x = refs.rand(shape, dtype, rng, -2, 3)
    w = refs.rand((shape[1],), np.float32, rng) if affine else None
    b = refs.rand((shape[1],), np.float32, rng) if affine else None
    got = mpskern.group_norm(x, groups, w, b, backend=backend)
    refs.assert_close(got, refs.group_norm(x, groups, w, b), dtype, what="group_norm")


@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (2, 5, 7), (8, 3)])
@pytest.mark.parametrize("training", [False, True])
def test_batch_norm(backend, dtype, shape, training):
    rng = np.random.default_rng(12)
    C = shape[1]
    x = refs.rand(shape, dtype, rng, -1, 3)
    rm = refs.rand((C,), np.float32, rng)
    rv = refs.rand((C,), np.float32, rng, 0.5, 2.0)
    w, b = refs.rand((C,), np.float32, rng), refs.rand((C,), np.float32, rng)
    ref_y, ref_rm, ref_rv = refs.batch_norm(x, rm, rv, w, b, training, 0.2, 1e-5)
    got = mpskern.batch_norm(x, rm, rv, w, b, training, 0.2, 1e-5, backend=backend)
    refs.assert_close(got, ref_y, dtype, what="batch_norm y")
    refs.assert_close(rm, ref_rm, np.float32, what="running_mean")   # updated in place
    refs.assert_close(rv, ref_rv, np.float32, what="running_var")


def test_batch_norm_training_updates_float16_and_strided_running_stats(backend):
    rng = np.random.default_rng(13)
    x = refs.rand((4, 3, 6), np.float32, rng)
    rm = np.zeros(3, np.float16)
    rv_store = np.ones(6, np.float32)
    rv = rv_store[::2]                     # non-contiguous view: updated through the view
    _, ref_rm, ref_rv = refs.batch_norm(x, rm, rv, training=True)
    mpskern.batch_norm(x, rm, rv, training=True, backend=backend)
    refs.assert_close(rm, ref_rm, np.float16, what="running_mean f16")
    refs.assert_close(rv_store[::2], ref_rv, np.float32, what="running_var view")
    assert np.all(rv_store[1::2] == 1.0)


def test_batch_norm_training_without_running_stats(backend):
    x = refs.rand((5, 2, 3), np.float32, np.random.default_rng(14))
    got = mpskern.batch_norm(x, None, None, training=True, backend=backend)
    refs.assert_close(got, refs.batch_norm(x, None, None, training=True)[0], np.float32)


def test_batch_norm_inference_with_read_only_stats(backend):
    x = refs.rand((2, 3, 4), np.float32, np.random.default_rng(15))
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    rm.flags.writeable = rv.flags.writeable = False
    got = mpskern.batch_norm(x, rm, rv, backend=backend)
    refs.assert_close(got, refs.batch_norm(x, rm, rv)[0], np.float32)
