"""The helpers the op tests share: the backend fixture, random inputs, assert_close. The
float64 references themselves live in mpskern/reference.py (shared with the benchmark,
the tuner and `mpskern selftest`) and are re-exported here as refs.conv2d etc.

Backends under test: MPSKERN_TEST_BACKENDS (comma separated, default "cpu"), e.g.
MPSKERN_TEST_BACKENDS=cpu,sim pytest -q tests/test_ops_softmax.py. Keep test shapes small:
the simulator is slow.
"""
import os

import numpy as np
import pytest

from mpskern import backends
from mpskern.reference import (  # noqa: F401  (re-exported: refs.conv2d, ...)
    avg_pool2d, batch_norm, conv2d, gemm, group_norm, layer_norm, log_softmax, matmul,
    max_error, max_pool2d, rms_norm, scaled_dot_product_attention, softmax, tolerance,
    window_starts)

BACKENDS = [b for b in os.environ.get("MPSKERN_TEST_BACKENDS", "cpu").split(",") if b]
DTYPES = [np.float32, np.float16]


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A backend name from MPSKERN_TEST_BACKENDS; skipped where this machine lacks it."""
    ok, why = backends.availability(request.param)
    if not ok:
        pytest.skip(f"backend {request.param} unavailable: {why}")
    return request.param


def rand(shape, dtype, rng, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def assert_close(got, ref, dtype, terms=1, what="", magnitude=None):
    """dtype, shape and the non-finite positions (of ref rounded to dtype: results beyond
    its range are +-Inf) agree, and on the finite entries
    max |got - ref| / max |ref| <= mpskern.reference.tolerance(dtype, terms), terms being
    the number of products summed into one output (reductions lose accuracy that way):
    the rule the benchmark, the tuner and selftest check with. `magnitude` (like ref):
    what each output's rounding error scales with where sums cancel (the op applied to
    |inputs|, e.g. |a| @ |b|); the error is then measured against its largest finite entry
    when that exceeds max |ref| (a float32 dot product of 1.9 and -1.9 cannot be right to
    ulps of its tiny result)."""
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), f"{what}: dtype {got.dtype}, expected {np.dtype(dtype)}"
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    if ref.size == 0:
        return
    g = got.astype(np.float64)
    with np.errstate(over="ignore"):          # beyond the dtype's range: +-Inf expected
        rounded = np.asarray(ref).astype(dtype).astype(np.float64)
    fin = np.isfinite(rounded)
    bad = np.flatnonzero(np.isfinite(g) != fin)
    assert not bad.size, (f"{what}: non-finite values differ at {bad.size} of {g.size} "
                          f"(first at flat index {bad[0]}: got {g.flat[bad[0]]}, "
                          f"reference {ref.flat[bad[0]]})")
    assert np.array_equal(g[~fin], rounded[~fin], equal_nan=True), \
        f"{what}: infinities differ in sign (or NaN where the reference has Inf)"
    err, bound = max_error(g[fin], ref[fin]), tolerance(dtype, terms)
    if magnitude is not None and fin.any():
        scale = max(float(np.max(np.abs(ref[fin]))), 1e-30)
        err *= scale / max(scale, float(np.max(np.abs(np.asarray(magnitude)[fin]))))
    against = "max |ref|" if magnitude is None else "max |ref| or the magnitude"
    assert err <= bound, (f"{what}: max error {err:.3g} (relative to {against}) exceeds the "
                          f"tolerance {bound:.3g} ({np.dtype(dtype).name}, {terms} terms)")
