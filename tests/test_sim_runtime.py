"""The simulator end to end through the user-kernel API: dispatchThreads semantics,
barriers, threadgroup memory, SIMD collectives, fiber orders, errors at .metal lines."""
import numpy as np
import pytest

import mpskern
from mpskern import backends, sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

SAXPY = r'''
#include <metal_stdlib>
using namespace metal;
kernel void saxpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& a [[buffer(2)]], constant uint& n [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    if (i < n) y[i] = a * x[i] + y[i];
}
'''

# one threadgroup per row: SIMD partial sums, then a threadgroup reduction
ROWSUM = r'''
#include <metal_stdlib>
using namespace metal;
kernel void rowsum(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   constant uint& n [[buffer(2)]],
                   uint row [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]],
                   uint tpg [[threads_per_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                   uint lane [[thread_index_in_simdgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float part[32];
    float s = 0.0f;
    for (uint i = lid; i < n; i += tpg) s += x[row * n + i];
    s = simd_sum(s);
    if (lane == 0) part[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float v = lane < nsg ? part[lane] : 0.0f;
        v = simd_sum(v);
        if (lane == 0) out[row] = v;
    }
}
'''


def test_saxpy_partial_threadgroups():
    k = mpskern.metal_kernel(SAXPY, "saxpy")
    n = 1000                                    # not a multiple of the threadgroup
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.ones(n, np.float32)
    k(x, y, np.float32(2.5), np.uint32(n), grid=(n, 1, 1), threadgroup=(128, 1, 1), backend="sim")
    np.testing.assert_allclose(y, 2.5 * x.astype(np.float64) + 1, rtol=1e-6, atol=1e-6)


def test_noncontiguous_output_written_back():
    k = mpskern.metal_kernel(SAXPY, "saxpy")
    x = np.arange(8, dtype=np.float32)
    base = np.zeros(16, np.float32)
    y = base[::2]                               # a strided view: copied in, copied back
    k(x, y, np.float32(1), np.uint32(8), grid=(8,), threadgroup=(8,), backend="sim")
    np.testing.assert_array_equal(base[::2], x)
    np.testing.assert_array_equal(base[1::2], 0)


@pytest.mark.parametrize("tg", [32, 96, 256, 1024])
def test_rowsum_barrier_simd(tg):
    k = mpskern.metal_kernel(ROWSUM, "rowsum")
    rows, n = 5, 777
    x = np.random.default_rng(1).standard_normal((rows, n)).astype(np.float32)
    out = np.zeros(rows, np.float32)
    # grid counts threads: `rows` threadgroups of `tg` threads
    k(x, out, np.uint32(n), grid=(rows * tg,), threadgroup=(tg,), backend="sim")
    np.testing.assert_allclose(out, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def test_orders_bit_identical():
    k = mpskern.metal_kernel(ROWSUM, "rowsum")
    x = np.random.default_rng(2).standard_normal((7, 1000)).astype(np.float32)
    outs = []
    be = backends.get("sim")
    try:
        for order, seed in (("forward", 0), ("reverse", 0), ("random", 1), ("random", 2)):
            be.set_sim_options(order=order, seed=seed)
            out = np.zeros(7, np.float32)
            k(x, out, np.uint32(1000), grid=(7 * 256,), threadgroup=(256,), backend="sim")
            outs.append(out)
    finally:
        be.set_sim_options()
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


def test_compile_error_points_at_metal_line():
    bad = "#include <metal_stdlib>\nusing namespace metal;\nkernel void f(device float* p [[buffer(0)]]) {\n" \
          "    p[0] = undefined_name;\n}\n"
    k = mpskern.metal_kernel(bad, "f")
    with pytest.raises(mpskern.KernelCompileError, match=r"<metal_kernel f>:4.*undefined_name"):
        k(np.zeros(1, np.float32), grid=(1,), threadgroup=(1,), backend="sim")


def test_bad_arguments():
    k = mpskern.metal_kernel(SAXPY, "saxpy")
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="numpy scalar"):
        k(x, x, 2.0, np.uint32(4), grid=(4,), threadgroup=(4,), backend="sim")
    with pytest.raises(TypeError, match="float64"):
        k(x.astype(np.float64), x, np.float32(2), np.uint32(4), grid=(4,), threadgroup=(4,), backend="sim")
    with pytest.raises(ValueError, match="allows 1024"):
        k(x, x, np.float32(2), np.uint32(4), grid=(4,), threadgroup=(2048,), backend="sim")
    with pytest.raises(TypeError, match=r"missing: \[\[buffer\(3\)\]\] 'n'"):
        k(x, x, np.float32(2), grid=(4,), threadgroup=(4,), backend="sim")
    with pytest.raises(ValueError, match="no kernel named 'nope'.*saxpy"):
        mpskern.metal_kernel(SAXPY, "nope")(x, grid=(1,), threadgroup=(1,), backend="sim")
    with pytest.raises(ValueError, match="cannot run an MSL kernel"):
        k(x, x, np.float32(2), np.uint32(4), grid=(4,), threadgroup=(4,), backend="cpu")


def test_device_info_family(monkeypatch):
    from mpskern import _native
    monkeypatch.setenv("MPSKERN_SIM_FAMILY", "apple9")
    d = _native.Device("sim")
    info = d.info()
    assert info["family"] == 9 and info["name"] == "mpskern simulator (apple9)"
    assert info["max_threadgroup_memory"] == 32768 and info["max_threads_per_threadgroup"] == 1024
    monkeypatch.setenv("MPSKERN_SIM_FAMILY", "apple3")
    assert _native.device_count("sim")[0] == 0


def test_unavailable_without_a_compiler(monkeypatch):
    from mpskern import _native
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    n, why = _native.device_count("sim")
    assert n == 0 and "C++17 compiler" in why


def test_wild_access_and_stack_overflow_raise_instead_of_crashing():
    src = "#include <metal_stdlib>\nusing namespace metal;\n" + r'''
kernel void wild(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    y[i + (1u << 30)] = 1.0f;
}
kernel void deep(device float* y [[buffer(0)]], constant uint& n [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    float big[200000];                     // 800 KB > the 128 KiB fiber stack
    for (uint k = 0; k < n; k++) big[(k * 7919u) % 200000u] = float(k);
    y[i] = big[i % 200000u];
}
'''
    y = np.zeros(64, np.float32)
    with pytest.raises(mpskern.MpskernError, match="kernel 'wild' made an invalid memory access"):
        mpskern.metal_kernel(src, "wild")(y, grid=(64,), threadgroup=(64,), backend="sim")
    with pytest.raises(mpskern.MpskernError, match="kernel 'deep' overflowed a GPU thread's stack"):
        mpskern.metal_kernel(src, "deep")(y, np.uint32(200000), grid=(64,), threadgroup=(64,), backend="sim")
    # the simulator still works afterwards
    test_saxpy_partial_threadgroups()


def test_runs_in_a_forked_child_after_the_parent_used_the_pool():
    import multiprocessing as mp
    test_rowsum_barrier_simd(256)          # starts the worker threads in this process
    ctx = mp.get_context("fork")
    p = ctx.Process(target=test_rowsum_barrier_simd, args=(256,))
    p.start()
    p.join(120)
    assert p.exitcode == 0


def test_orders_apply_to_barrier_free_kernels():
    # a deliberately racy kernel: the last lane to run wins, so the order is visible
    src = "#include <metal_stdlib>\nusing namespace metal;\n" \
          "kernel void last(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[0] = float(i); }\n"
    k = mpskern.metal_kernel(src, "last")
    be = backends.get("sim")
    seen = {}
    try:
        for order, seed in (("forward", 0), ("reverse", 0), ("random", 5)):
            be.set_sim_options(order=order, seed=seed, workers=1)
            y = np.zeros(1, np.float32)
            k(y, grid=(64,), threadgroup=(64,), backend="sim")
            seen[order] = y[0]
    finally:
        be.set_sim_options()
    assert seen["forward"] == 63 and seen["reverse"] == 0 and seen["random"] not in (0, 63)
