"""The simulator's checking mode: planted bugs are each reported with the kernel, the
.metal line and the threads involved; correct kernels pass silently and unchanged."""
import re

import numpy as np
import pytest
from simtools import BUG_ARGS, BUG_HEAD

import mpskern
from mpskern import sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

HEAD, ARGS = BUG_HEAD, BUG_ARGS

BUGS = {
    # name: (body, marker line, expected finding)
    "missing_barrier": ("""
    threadgroup float t[64];
    t[i] = 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    t[i] = x[g];                       // WRITE
    y[g] = t[(i + 1) % 64];            // READ (needs a barrier before it)
""", "data race on threadgroup memory"),
    "out_of_bounds": ("""
    y[g] = x[g + 1];                   // READ past the end for the last thread
""", "out-of-bounds read"),
    "early_return": ("""
    threadgroup float t[64];
    if (i == 5) return;
    t[i] = x[g];
    threadgroup_barrier(mem_flags::mem_threadgroup);   // BARRIER
    y[g] = t[63 - i];
""", "barrier divergence"),
    "cross_group_race": ("""
    if (i == 0) y[0] = float(tg);      // WRITE by every threadgroup
""", "data race on device [[buffer(1)]]"),
    "uninitialised": ("""
    threadgroup float t[64];
    y[g] = t[i];                       // READ of memory nobody wrote
""", "read of uninitialised threadgroup memory"),
}


def _source(name):
    body, _ = BUGS[name]
    return HEAD + f"kernel void {name}({ARGS}) {{{body}}}\n"


def _line(src, marker):
    return next(n for n, ln in enumerate(src.splitlines(), 1) if marker in ln)


@pytest.mark.parametrize("order", ["forward", "random"])
@pytest.mark.parametrize("name", sorted(BUGS))
def test_planted_bug_is_reported(name, order):
    from mpskern import backends
    src = _source(name)
    x = np.arange(128, dtype=np.float32)
    y = np.zeros(128, np.float32)
    be = backends.get("sim")
    be.set_sim_options(order=order, seed=3)
    try:
        with pytest.raises(mpskern.KernelCheckError) as e:
            mpskern.metal_kernel(src, name)(x, y, grid=(128,), threadgroup=(64,), backend="sim",
                                            check=True)
    finally:
        be.set_sim_options()
    msg = str(e.value)
    assert BUGS[name][1] in msg, msg
    assert f"kernel '{name}'" in msg, msg
    marker = {"missing_barrier": "READ", "out_of_bounds": "READ", "early_return": "BARRIER",
              "cross_group_race": "WRITE", "uninitialised": "READ"}[name]
    assert f"<metal_kernel {name}>:{_line(src, marker)}" in msg, msg
    assert re.search(r"thread \(\d+,0,0\) of threadgroup \(\d,0,0\)", msg), msg
    if name == "missing_barrier":      # both sides of the race, with their lines
        assert f":{_line(src, 'WRITE')}" in msg and f":{_line(src, 'READ')}" in msg, msg
    if name == "cross_group_race":
        assert "threadgroup (0,0,0)" in msg and "threadgroup (1,0,0)" in msg, msg
    if name == "early_return":
        assert "thread (5,0,0)" in msg and "returned before the barrier" in msg, msg


CORRECT = HEAD + """
kernel void shift(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant uint& n [[buffer(2)]],
                  uint i [[thread_index_in_threadgroup]], uint g [[thread_position_in_grid]],
                  uint lane [[thread_index_in_simdgroup]], uint tpg [[threads_per_threadgroup]]) {
    threadgroup float t[64];
    threadgroup half h[64];
    t[i] = g < n ? x[g] : 0.0f;
    h[i] = half(t[i]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = t[(i + 1) % tpg] + float(h[tpg - 1 - i]) + simd_shuffle_down(t[i], 1u);
    if (g < n) y[g] = v + simd_prefix_exclusive_sum(float(lane));
}
"""


def test_correct_kernel_passes_checked_and_matches_unchecked():
    k = mpskern.metal_kernel(CORRECT, "shift")
    x = np.random.default_rng(0).standard_normal(200).astype(np.float32)
    y1, y2 = np.zeros(200, np.float32), np.zeros(200, np.float32)
    k(x, y1, np.uint32(200), grid=(200,), threadgroup=(64,), backend="sim")
    k(x, y2, np.uint32(200), grid=(200,), threadgroup=(64,), backend="sim", check=True)
    assert y1.tobytes() == y2.tobytes()
    # reference: per threadgroup of 64 (the last one partial: 8 threads, so a kernel that
    # read t[8..63] there would read uninitialised memory: the checker would say so)
    xp = np.zeros(256); xp[:200] = x
    ref = np.zeros(256)
    for base in range(0, 256, 64):
        t = xp[base:base + 64]
        size = min(64, 200 - base)
        for i in range(size):
            lane = i % 32
            sg_end = min((i // 32 + 1) * 32, size)
            down = t[i + 1] if i + 1 < sg_end else t[i]
            ref[base + i] = t[(i + 1) % size] + np.float16(t[size - 1 - i]) + down + lane * (lane - 1) / 2
    np.testing.assert_allclose(y1, ref[:200], rtol=1e-3, atol=1e-3)


def test_lanes_at_different_barriers():
    src = HEAD + f"""kernel void split({ARGS}) {{
    if (i < 32) {{
        threadgroup_barrier(mem_flags::mem_threadgroup);   // FIRST
    }} else {{
        threadgroup_barrier(mem_flags::mem_threadgroup);   // SECOND
    }}
    y[g] = x[g];
}}
"""
    y = np.zeros(64, np.float32)
    with pytest.raises(mpskern.KernelCheckError, match="barrier divergence in kernel 'split'") as e:
        mpskern.metal_kernel(src, "split")(np.zeros(64, np.float32), y, grid=(64,), threadgroup=(64,),
                                           backend="sim", check=True)
    msg = str(e.value)
    assert f":{_line(src, 'FIRST')}" in msg and f":{_line(src, 'SECOND')}" in msg, msg


SIMD_SYNC = HEAD + f"""kernel void sgsync({ARGS}, uint lane [[thread_index_in_simdgroup]]) {{
    threadgroup float t[64];
    t[i] = x[g];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    y[g] = t[(i & ~31u) + ((lane + 1) % 32)];   // SAME simdgroup: ordered by simdgroup_barrier
#ifdef CROSS
    y[g] += t[(i + 32) % 64];                   // OTHER simdgroup: needs a threadgroup barrier
#endif
}}
"""


def test_simdgroup_barrier_orders_its_simdgroup_only():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    mpskern.metal_kernel(SIMD_SYNC, "sgsync")(x, y, grid=(64,), threadgroup=(64,), backend="sim",
                                               check=True)
    np.testing.assert_array_equal(y, [(i & ~31) + (i % 32 + 1) % 32 for i in range(64)])
    with pytest.raises(mpskern.KernelCheckError, match="data race on threadgroup memory") as e:
        mpskern.metal_kernel(SIMD_SYNC, "sgsync", macros={"CROSS": 1})(
            x, y, grid=(64,), threadgroup=(64,), backend="sim", check=True)
    assert f":{_line(SIMD_SYNC, 'OTHER')}" in str(e.value)


def test_threadgroup_array_overrun_names_the_variable():
    src = HEAD + f"""kernel void overrun({ARGS}) {{
    threadgroup float a[64];
    threadgroup float b[64];
    a[i] = x[g];
    b[i] = 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[g] = a[i + 1];                   // READ a[64] for the last thread
}}
"""
    with pytest.raises(mpskern.KernelCheckError) as e:
        mpskern.metal_kernel(src, "overrun")(np.zeros(64, np.float32), np.zeros(64, np.float32),
                                             grid=(64,), threadgroup=(64,), backend="sim", check=True)
    msg = str(e.value)
    assert "out-of-bounds read of threadgroup memory in kernel 'overrun'" in msg, msg
    assert f"<metal_kernel overrun>:{_line(src, 'READ')}" in msg and "thread (63,0,0)" in msg, msg
    assert f"0 bytes past the end of 'a' (<metal_kernel overrun>:{_line(src, 'float a[64]')})" in msg, msg


def test_read_only_input_is_not_written_back():
    # a numpy array over immutable bytes: checking mode must not copy its mirror back
    x = np.frombuffer(np.arange(64, dtype=np.float32).tobytes(), np.float32)
    assert not x.flags.writeable
    y = np.zeros(64, np.float32)
    src = HEAD + f"kernel void cp({ARGS}) {{ y[g] = x[g] + 1.0f; }}\n"
    mpskern.metal_kernel(src, "cp")(x, y, grid=(64,), threadgroup=(64,), backend="sim", check=True)
    np.testing.assert_array_equal(y, np.arange(64) + 1)


def test_threadgroup_memory_exactly_at_the_limit_is_no_finding():
    """16 + 8 + 8 KiB in three variables is the device's 32 KiB: checking mode's red zones
    between them put the last one past byte 32768, which it once reported as an
    out-of-bounds write (attn's attention_simd at MK_BQ=32)."""
    src = HEAD + """
kernel void full(device float* y [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
    threadgroup float a[4096];
    threadgroup float b[2048];
    threadgroup float c[2048];
    for (uint k = i; k < 4096; k += 64) a[k] = float(k);
    for (uint k = i; k < 2048; k += 64) { b[k] = 1.0f; c[k] = 2.0f; }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[i] = a[4095 - i] + b[2047 - i] + c[2047 - i];
}
"""
    y = np.zeros(64, np.float32)
    mpskern.metal_kernel(src, "full")(y, grid=(64,), threadgroup=(64,), backend="sim", check=True)
    np.testing.assert_array_equal(y, 4095 - np.arange(64) + 3.0)
