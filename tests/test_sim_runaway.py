"""Runaway simulator kernels (issue 15 items 4 and 5): Ctrl-C stops a run within a second
with KeyboardInterrupt, time_limit= (per call, or set_sim_options for the device) stops it
with a KernelError naming the kernel, and the process stays usable. A grid of 2**32 - 1
threads really runs (it once made no threadgroups at all); grids beyond Metal's 32-bit
thread positions are refused with the numbers. The runaway cases run in subprocesses
with timeouts, so a regression fails the test instead of hanging the suite."""
import json
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import foreground
import mpskern
from mpskern import backends, sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

SRC = """
#include <metal_stdlib>
using namespace metal;
// no barrier: the lanes run as a plain loop in one fiber
kernel void spin(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    float v = y[i];
    while (v >= 0.0f) { v = v * 1.0000001f + 1.0f; if (v > 1e30f) v = 0.0f; }
    y[i] = v;
}
// a barrier first (lanes are fibers), then a loop that mostly sits in libm's sin
kernel void spin_fibers(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]],
                        uint l [[thread_index_in_threadgroup]]) {
    threadgroup float t[64];
    t[l] = y[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = t[63 - l];
    while (v >= 0.0f) { v = sin(v) + 2.0f; }
    y[i] = v;
}
// every lane but the grid's last returns at once
kernel void last(device uint* y [[buffer(0)]], uint i [[thread_position_in_grid]],
                 uint n [[threads_per_grid]]) {
    if (i == n - 1) y[0] = i;
}
kernel void fill(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 3.0f; }
"""

CHILD = textwrap.dedent(r'''
    import json, sys, time
    import numpy as np
    import mpskern as mk
    from mpskern import backends

    src, name, mode, check = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    be = backends.get("sim")
    k, fill = mk.metal_kernel(src, name), mk.metal_kernel(src, "fill")
    be.pipeline(name, source=k.source, macros={}, check=check)      # compile before timing
    be.pipeline("fill", source=fill.source, macros={}, check=check)
    y = np.zeros(256, np.float32)
    kw = dict(grid=(256,), threadgroup=(64,), backend="sim", check=check)
    if mode == "limit":
        kw["time_limit"] = 0.3
    elif mode == "device-limit":
        be.set_sim_options(check_mode=check, time_limit=0.3)
    print(json.dumps({"ready": True}), flush=True)
    t0 = time.monotonic()
    try:
        k(y, **kw)
        out = {"raised": None}
    except KeyboardInterrupt as e:
        out = {"raised": "KeyboardInterrupt", "msg": str(e)}
    except mk.KernelError as e:
        out = {"raised": "KernelError", "msg": str(e)}
    out["seconds"] = time.monotonic() - t0
    if mode == "device-limit":
        be.set_sim_options(check_mode=check)                 # back to no limit
    y[:] = 0
    fill(y, grid=(256,), threadgroup=(64,), backend="sim", check=check)
    out["usable"] = bool((y == 3).all())
    if mode == "sigint":      # Python's own SIGINT handling is back after the run
        import os, signal
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            out["python_sigint"] = "not raised"
        except KeyboardInterrupt:
            out["python_sigint"] = "KeyboardInterrupt"
    print(json.dumps(out), flush=True)
''')


def _start(name, mode, check):
    return foreground.popen([sys.executable, "-c", CHILD, SRC, name, mode, str(int(check))])


def _result(p, timeout):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the run was not stopped within {timeout} s:\n{err[-1500:]}")
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert rows and "usable" in rows[-1], f"child died (rc {p.returncode}):\n{err[-2000:]}"
    return rows[-1]


@pytest.mark.parametrize("name, check", [("spin", False), ("spin_fibers", False),
                                         ("spin", True), ("spin_fibers", True)])
def test_ctrl_c_stops_a_runaway_kernel_within_a_second(name, check):
    p = _start(name, "sigint", check)
    assert json.loads(p.stdout.readline()) == {"ready": True}
    time.sleep(0.4)                       # in the kernel's loop by now
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    r = _result(p, timeout=30)
    stopped_after = time.monotonic() - sent
    assert r["raised"] == "KeyboardInterrupt", r
    assert stopped_after < 1.0 + 2.0, r   # (+ the child's own fill call and exit)
    assert r["seconds"] < 0.4 + 1.5, r
    assert r["usable"] and r["python_sigint"] == "KeyboardInterrupt", r


@pytest.mark.parametrize("mode", ["limit", "device-limit"])
@pytest.mark.parametrize("name, check", [("spin", False), ("spin_fibers", True)])
def test_time_limit_stops_a_runaway_kernel(name, check, mode):
    r = _result(_start(name, mode, check), timeout=60)
    assert r["raised"] == "KernelError", r
    assert f"kernel '{name}' ran past the time limit of 0.3 s" in r["msg"], r
    assert 0.3 <= r["seconds"] < 1.0, r
    assert r["usable"], r


def test_a_grid_of_2_32_minus_1_threads_runs_them():
    """Was: (2**32 - 1 + 1023) / 1024 in uint32 = 0 threadgroups; the call returned at once
    and the last thread never ran. Now it runs (and is stopped by the time limit)."""
    k = mpskern.metal_kernel(SRC, "last")
    y = np.zeros(1, np.uint32)
    t0 = time.monotonic()
    with pytest.raises(mpskern.KernelError, match="ran past the time limit of 0.5 s"):
        k(y, grid=(2 ** 32 - 1,), threadgroup=(1024,), backend="sim", time_limit=0.5)
    assert time.monotonic() - t0 >= 0.5
    k(y, grid=(2 ** 20 + 3,), threadgroup=(1024,), backend="sim")
    assert y[0] == 2 ** 20 + 2


@pytest.mark.parametrize("grid, tg, want", [
    ((2 ** 32,), (1,), r"grid \(4294967296, 1, 1\) has 4294967296 threads along x \(4294967296 "
                       r"threadgroups of 1\).*at most 4294967295"),
    ((1, 2 ** 40), (1, 1024), r"1099511627776 threads along y \(1073741824 threadgroups of 1024\)"),
    ((8,), (2048,), r"threadgroup \(2048,\) has 2048 threads; .* allows 1024"),
])
def test_grids_past_metal_limits_are_refused_with_the_numbers(grid, tg, want):
    k = mpskern.metal_kernel(SRC, "fill")
    with pytest.raises(ValueError, match=want):
        k(np.zeros(8, np.float32), grid=grid, threadgroup=tg, backend="sim")


def test_mk_run_refuses_threadgroup_grids_of_2_32_threads():
    """dispatchThreadgroups: 4194304 groups of 1024 threads = 2**32, one more than a uint
    thread position holds (was: threads_per_grid wrapped to 0)."""
    be = backends.get("sim")
    pipe = be.pipeline("fill", source=SRC)
    buf = be.wrap(np.zeros(8, np.float32), True)
    with pytest.raises(ValueError, match=r"4194304 threadgroups of 1024 threads make 4294967296 "
                                         r"threads along x"):
        be.device.run([dict(pipeline=pipe, grid=(2 ** 22, 1, 1), threadgroup=(1024, 1, 1),
                            bindings=[buf])])


@pytest.mark.parametrize("bad, err", [(-1, ValueError), (float("nan"), ValueError),
                                      (float("inf"), ValueError), ("1", TypeError),
                                      (True, TypeError)])
def test_time_limit_must_be_seconds(bad, err):
    k = mpskern.metal_kernel(SRC, "fill")
    with pytest.raises(err, match="time_limit"):
        k(np.zeros(8, np.float32), grid=(8,), threadgroup=(8,), backend="sim", time_limit=bad)
    with pytest.raises(err, match="time_limit"):
        backends.get("sim").set_sim_options(time_limit=bad)


def test_a_run_within_its_limit_is_untouched():
    k = mpskern.metal_kernel(SRC, "fill")
    y = np.zeros(64, np.float32)
    k(y, grid=(64,), threadgroup=(32,), backend="sim", time_limit=30)
    assert (y == 3).all()
