"""On a Mac with Apple silicon: every op x dtype on `metal` and `mps` against `cpu` (the
cases of `mpskern selftest`), and the Metal shim's own contract (device info, zero-copy
and copied buffers, run-time compilation errors, dispatch limits, GPU timestamps).
Skipped elsewhere: nothing here can run without a Metal device. Run with `pytest -m mac`."""
import sys

import numpy as np
import pytest

import mpskern
from mpskern import _native, backends
from mpskern.cli import selftest as st
from mpskern.cli.selftest import CASES

pytestmark = [pytest.mark.mac,
              pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS on Apple silicon")]


def _need(backend):
    ok, why = backends.availability(backend)
    if not ok:
        pytest.skip(f"{backend}: {why}")


@pytest.mark.parametrize("backend", ["metal", "mps"])
@pytest.mark.parametrize("dtype", st.DTYPES)
@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}:{c.label}" for c in CASES])
def test_op_matches_cpu(case, dtype, backend):
    _need(backend)
    (row,) = st.run([backend], [dtype], cases=[case])
    if row.status == "unsupported":       # a documented MPS limitation, never a silent one
        assert row.note, "an unsupported case must say why"
        pytest.skip(row.note)
    assert row.status == "pass", (row.status, row.err_ref, row.err_cpu, row.tol, row.note)


COPY_CASES = [c for c in CASES if c.op in ("gemm", "conv2d", "avg_pool2d", "batch_norm", "softmax")]


@pytest.mark.parametrize("backend", ["metal", "mps"])
@pytest.mark.parametrize("case", COPY_CASES, ids=[f"{c.op}:{c.label}" for c in COPY_CASES])
def test_copy_fallback_matches_cpu(case, backend, monkeypatch):
    """With zero-copy refused (MPSKERN_ZERO_COPY=0) every buffer is a mirrored copy: the
    results, in-place outputs (gemm's C) and batch_norm's running stats must still land."""
    _need(backend)
    monkeypatch.setenv("MPSKERN_ZERO_COPY", "0")
    (row,) = st.run([backend], ["float32"], cases=[case])
    if row.status == "unsupported":
        pytest.skip(row.note)
    assert row.status == "pass", (row.status, row.err_ref, row.err_cpu, row.tol, row.note)


# -- the shim's contract --------------------------------------------------------------------
@pytest.fixture(scope="module")
def dev():
    _need("metal")
    return _native.Device("metal")


def test_device_info(dev):
    i = dev.info()
    assert i["name"] and not i["is_simulator"]
    assert 7 <= i["family"] <= 10
    assert i["simd_width"] == 32 and i["unified_memory"]
    assert i["max_threads_per_threadgroup"] >= 1024
    assert i["max_threadgroup_memory"] >= 32 * 1024
    assert i["recommended_working_set"] > 0
    assert i["page_size"] == mpskern.memory.page_size() == 16384


COPY_KERNEL = """
#include <metal_stdlib>
using namespace metal;
kernel void scale(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& k [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    y[i] = x[i] * k * FACTOR;
}
"""


def _scale(dev, x, y, macros=None):
    lib = dev.library_from_source(COPY_KERNEL, macros or {"FACTOR": 1})
    p = lib.pipeline("scale")
    bx, by = dev.wrap(x), dev.wrap(y, True)
    t = dev.run([dict(pipeline=p, grid=(x.size,), threadgroup=(64,), grid_units="threads",
                      bindings=[bx, by, np.float32(3).tobytes()])])
    return bx, by, t


def test_zero_copy_for_page_aligned_and_offset_arrays(dev):
    x = mpskern.empty(1000)
    x[...] = np.arange(1000)
    y = mpskern.empty(1000)
    bx, by, (gpu_ms, wall_ms) = _scale(dev, x, y)
    assert bx.zero_copy and by.zero_copy
    np.testing.assert_array_equal(y, 3 * x)
    assert 0 < gpu_ms <= wall_ms
    # not page-aligned: the enclosing pages are wrapped, still no copy
    xs, ys = x[3:], np.zeros(997, np.float32)
    bx, by, _ = _scale(dev, xs, ys)
    assert bx.zero_copy
    np.testing.assert_array_equal(ys, 3 * xs)


def test_copied_buffers_write_back(dev, monkeypatch):
    monkeypatch.setenv("MPSKERN_ZERO_COPY", "0")
    x = np.arange(257, dtype=np.float32)
    y = np.zeros(257, np.float32)
    bx, by, _ = _scale(dev, x, y, {"FACTOR": 2})
    assert not bx.zero_copy and not by.zero_copy
    np.testing.assert_array_equal(y, 6 * x)


def test_compile_error_carries_the_log(dev):
    with pytest.raises(mpskern.KernelCompileError, match="undeclared_thing"):
        dev.library_from_source("kernel void k(device float* x [[buffer(0)]]) { x[0] = undeclared_thing; }")


def test_unknown_kernel_lists_the_library(dev):
    lib = dev.library_from_source(COPY_KERNEL, {"FACTOR": 1})
    with pytest.raises(ValueError, match="scale"):
        lib.pipeline("nope")


def test_library_load_is_for_the_simulator(dev):
    with pytest.raises(NotImplementedError, match="simulator"):
        dev.library_load("/nonexistent.so")


def test_too_many_threads_is_a_clear_error(dev):
    lib = dev.library_from_source(COPY_KERNEL, {"FACTOR": 1})
    p = lib.pipeline("scale")
    x = np.zeros(4096, np.float32)
    with pytest.raises(ValueError, match="threads per threadgroup"):
        dev.run([dict(pipeline=p, grid=(4,), threadgroup=(p.max_threads + 32,),
                      bindings=[dev.wrap(x), dev.wrap(x, True), np.float32(1).tobytes()])])


def test_mps_records_timing_and_zero_copy():
    _need("mps")
    be = backends.get("mps")
    x = mpskern.empty((64, 100))
    x[...] = np.random.default_rng(0).standard_normal((64, 100))
    y = mpskern.empty((64, 100))
    be.execute("softmax", dict(outer=64, n=100, inner=1, log=0), _native.F32, x, y)
    gpu_ms, wall_ms = be.last_timing
    assert 0 < gpu_ms <= wall_ms
    assert be.last_config == {"primitive": "MPSGraph softMax", "zero_copy": True}
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)
