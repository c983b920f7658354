"""The compatibility header's math against numpy (float32 and half, scalars and vectors),
and an integer division by zero reported instead of crashing."""
import numpy as np
import pytest

import mpskern
from mpskern import sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

FUNCS = {   # MSL expression of x, y (AX: abs(x)) on 4-vectors -> numpy reference
    "sqrt(AX)": lambda x, y: np.sqrt(np.abs(x)),
    "rsqrt(AX + 1)": lambda x, y: 1 / np.sqrt(np.abs(x) + 1),
    "exp(x)": np.exp, "exp2(x)": np.exp2, "log(AX + 1)": lambda x, y: np.log(np.abs(x) + 1),
    "fast::exp(x)": np.exp, "precise::log2(AX + 1)": lambda x, y: np.log2(np.abs(x) + 1),
    "tanh(x)": np.tanh, "sin(x)": np.sin, "cos(x)": np.cos, "atan2(x, y)": np.arctan2,
    "floor(x)": np.floor, "ceil(x)": np.ceil, "round(x)": lambda x, y: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "trunc(x)": np.trunc, "fract(x)": lambda x, y: x - np.floor(x), "abs(x)": np.abs,
    "sign(x)": np.sign, "saturate(x)": lambda x, y: np.clip(x, 0, 1),
    "min(x, y)": np.minimum, "max(x, y)": np.maximum, "fmin(x, y)": np.fmin,
    "clamp(x, -0.5, 0.75)": lambda x, y: np.clip(x, -0.5, 0.75), "mix(x, y, 0.25)": lambda x, y: x + (y - x) * 0.25,
    "fma(x, y, 1.5)": lambda x, y: x * y + 1.5, "pow(AX + 0.5, y)": lambda x, y: (np.abs(x) + 0.5) ** y,
    "fmod(x, y)": np.fmod, "step(y, x)": lambda x, y: (x >= y).astype(float),
    "select(x, y, x < y)": lambda x, y: np.where(x < y, y, x), "copysign(x, y)": np.copysign,
    "smoothstep(-1.0, 1.0, x)": lambda x, y: (lambda t: t * t * (3 - 2 * t))(np.clip((x + 1) / 2, 0, 1)),
}


def _kernel(T):
    V = T + "4"
    lines = [f"    {{ {V} x = {V}(xs[g]), y = {V}(ys[g]); {V} r = {e.replace('AX', 'abs(x)')}; "
             f"out[{i} * n + g] = float(r.z); }}" for i, e in enumerate(FUNCS)]
    return ("#include <metal_stdlib>\nusing namespace metal;\n"
            f"kernel void m(device const {T}* xs [[buffer(0)]], device const {T}* ys [[buffer(1)]],\n"
            "              device float* out [[buffer(2)]], constant uint& n [[buffer(3)]],\n"
            "              uint g [[thread_position_in_grid]]) {\n    if (g >= n) return;\n"
            + "\n".join(lines) + "\n}\n")


@pytest.mark.parametrize("T,dt,tol", [("float", np.float32, 2e-6), ("half", np.float16, 2e-3)])
def test_math_functions_vs_numpy(T, dt, tol):
    rng = np.random.default_rng(0)
    n = 200
    x = rng.uniform(-3, 3, n).astype(dt)
    y = rng.uniform(-3, 3, n).astype(dt)
    y[np.abs(y) < 0.1] = 0.5
    out = np.zeros((len(FUNCS), n), np.float32)
    mpskern.metal_kernel(_kernel(T), "m")(x, y, out, np.uint32(n), grid=(n,), threadgroup=(64,),
                                          backend="sim")
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    for row, (expr, ref) in zip(out, FUNCS.items()):
        args = (xd,) if getattr(ref, "nin", 2) == 1 else (xd, yd)   # np.exp(x, y) would write y
        want = ref(*args).astype(dt).astype(np.float64)   # the result is rounded to T
        np.testing.assert_allclose(row, want, rtol=tol * 4, atol=tol * 4, err_msg=expr)


def test_integer_division_by_zero_raises():
    src = "#include <metal_stdlib>\nusing namespace metal;\n" + \
        "kernel void d(device int* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n" \
        "    y[i] = 7 / (y[i] - 1);\n}\n"
    y = np.ones(4, np.int32)
    with pytest.raises(mpskern.MpskernError, match="kernel 'd' divided an integer by zero"):
        mpskern.metal_kernel(src, "d")(y, grid=(4,), threadgroup=(4,), backend="sim")
