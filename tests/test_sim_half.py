"""Arithmetic as the GPU does it: half arithmetic in the simulator rounds to half after
every operation, bit-identical to numpy's float16 (which rounds each operation) with every
host compiler -- g++ and clang++ both (clang++ keeps float precision between half
operations unless told otherwise); and a `constant T&` argument shorter than sizeof(T) is
refused at dispatch in every mode instead of being read out of bounds."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mpskern
from mpskern import sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HALF_OPS = r'''
#include <metal_stdlib>
using namespace metal;
kernel void ops(device const half* a [[buffer(0)]], device const half* b [[buffer(1)]],
                device const half* c [[buffer(2)]], device half* o [[buffer(3)]],
                constant uint& n [[buffer(4)]], uint i [[thread_position_in_grid]]) {
    if (i >= n) return;
    half x = a[i], y = b[i], z = c[i];
    o[0 * n + i] = (x + y) - y;
    o[1 * n + i] = x * y + z;
    o[2 * n + i] = x / y * y;
    o[3 * n + i] = x * y - z * x;
    half4 v = half4(x, y, z, x) * half4(y) + half4(z);
    o[4 * n + i] = v.x + v.y - v.z;
    half acc = x;
    acc += y;
    acc *= z;
    acc -= x;
    o[5 * n + i] = acc;
    o[6 * n + i] = fma(x, y, z);
    o[7 * n + i] = max(x + y, z) - min(x, y * z);
}
'''
NOPS = 8


def _expected(a, b, c):
    """numpy's float16 arithmetic: every operation rounded to float16."""
    f = np.float16
    x, y, z = a, b, c
    v = (np.stack([x, y, z, x]) * y + z).astype(f)
    acc = ((((x + y) * z) - x)).astype(f)
    fma = (x.astype(np.float64) * y + z).astype(f)     # one rounding (exact in float64)
    return np.stack([(x + y) - y, x * y + z, x / y * y, x * y - z * x, v[0] + v[1] - v[2], acc,
                     fma, np.maximum(x + y, z) - np.minimum(x, y * z)]).astype(f)


def _inputs(n=4096):
    rng = np.random.default_rng(11)
    a = (rng.standard_normal(n) * 4).astype(np.float16)
    b = (rng.standard_normal(n) * 3 + 0.5).astype(np.float16)
    c = (rng.standard_normal(n) * 100).astype(np.float16)
    b[b == 0] = np.float16(1)
    return a, b, c


def _run_ops():
    a, b, c = _inputs()
    n = a.size
    o = np.zeros(NOPS * n, np.float16)
    mpskern.metal_kernel(HALF_OPS, "ops")(a, b, c, o, np.uint32(n), grid=(n,), threadgroup=(256,),
                                          backend="sim")
    got = o.reshape(NOPS, n)
    want = _expected(a, b, c)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    return [float(s.mean()) for s in same]


def _compilers():
    out = []
    for name in ("g++", "clang++", "clang++-19", "clang++-18", "clang++-17"):
        path = shutil.which(name)
        if path and not any(os.path.realpath(path) == os.path.realpath(p) for p in out):
            out.append(path)
    return out


COMPILERS = _compilers()


@pytest.mark.parametrize("cxx", COMPILERS or [None], ids=[os.path.basename(c) for c in COMPILERS] or ["none"])
def test_half_rounds_after_every_operation_with_each_host_compiler(cxx, tmp_path):
    if cxx is None:
        pytest.skip("no host compiler")
    # this file's helpers, the mpskern under test (conftest's PYTHONPATH), another compiler
    code = ("import json, sys; sys.path.insert(0, %r); import test_sim_half as t; "
            "from mpskern.sim import compiler; print(json.dumps([compiler.compiler()[1], t._run_ops()]))"
            % os.path.join(ROOT, "tests"))
    env = dict(os.environ, CXX=cxx, MPSKERN_CACHE_DIR=os.environ.get("MPSKERN_CACHE_DIR") or str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    version, same = json.loads(r.stdout.strip().splitlines()[-1])
    assert same == [1.0] * NOPS, (version, same)


def test_both_compilers_are_tested_in_ci():
    if not os.environ.get("CI"):
        pytest.skip("only CI must have both")
    names = {os.path.basename(c) for c in COMPILERS}
    assert "g++" in names and any(n.startswith("clang++") for n in names), COMPILERS


# ---------------------------------------------------------------- constant T& size
STRUCT_ARG = r'''
#include <metal_stdlib>
using namespace metal;
struct P { float scale; float shift; uint n; uint pad; };
kernel void affine(device float* x [[buffer(0)]], constant P& p [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
    if (i < p.n) x[i] = x[i] * p.scale + p.shift;
}
'''
P_DT = np.dtype([("scale", np.float32), ("shift", np.float32), ("n", np.uint32), ("pad", np.uint32)])


@pytest.mark.parametrize("check", [False, True])
def test_constant_reference_shorter_than_its_type_is_refused(check):
    k = mpskern.metal_kernel(STRUCT_ARG, "affine")
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match=r"'affine': \[\[buffer\(1\)\]\] is a constant reference to "
                                           r"16 bytes; 4 bytes are bound"):
        k(x, np.float32(2), grid=(8,), threadgroup=(8,), backend="sim", check=check)
    with pytest.raises(ValueError, match=r"to 16 bytes; 12 bytes are bound"):
        k(x, np.zeros(3, np.float32), grid=(8,), threadgroup=(8,), backend="sim", check=check)
    np.testing.assert_array_equal(x, 1)                       # nothing ran
    p = np.zeros((), P_DT)
    p["scale"], p["shift"], p["n"] = 2, 1, 8
    k(x, p[()], grid=(8,), threadgroup=(8,), backend="sim", check=check)
    np.testing.assert_array_equal(x, 3)
    big = np.zeros(2, P_DT)                                    # longer is fine (Metal too)
    big[0] = p
    k(x, big, grid=(8,), threadgroup=(8,), backend="sim", check=check)
    np.testing.assert_array_equal(x, 7)
