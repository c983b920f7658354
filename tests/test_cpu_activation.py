"""objc/cpu/mk_cpu_activation.c, the fused activations of the cpu gemm / conv2d output
passes, compiled here on its own (as the host compiler builds it for the extension) and
called through ctypes: every activation at every tail length around the vector widths, over
float32's whole range and at the non-finite values, against mpskern.reference.activation
(torch's formulas in float64)."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mpskern.reference import activate as activation

ROOT = Path(__file__).resolve().parent.parent
CODES = {"relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
pytestmark = pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler")


@pytest.fixture(scope="module")
def act(tmp_path_factory):
    so = tmp_path_factory.mktemp("act") / "mk_cpu_activation.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O3", "-std=gnu11", "-fno-trapping-math",
                    "-Wall", "-Werror", "-I", str(ROOT / "objc"), "-I", str(ROOT / "metal"),
                    "-I", str(ROOT / "objc" / "cpu"), str(ROOT / "objc" / "cpu" / "mk_cpu_activation.c"),
                    "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.mk_activate.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]

    def run(x, name):
        y = np.ascontiguousarray(x, np.float32).copy()
        lib.mk_activate(y.ctypes.data, y.size, CODES[name] if name else 0)
        return y
    return run


# absolute error allowed, relative to max(1, |x|): the float32 rounding of the result and
# of its exp/erfc pieces (gelu's erfc is a fit good to 4e-7 evaluated in float32)
TOL = {"relu": 0.0, "gelu": 6e-7, "gelu_tanh": 8e-7, "silu": 4e-7}


@pytest.mark.parametrize("name", sorted(CODES))
def test_against_torch_formulas(act, name):
    x = np.concatenate([np.linspace(-12, 12, 200001), np.geomspace(1e-30, 3e38, 2000),
                        -np.geomspace(1e-30, 3e38, 2000), [0.0, -0.0]]).astype(np.float32)
    got = act(x, name).astype(np.float64)
    want = activation(x, name)
    err = np.abs(got - want) / np.maximum(1.0, np.abs(x.astype(np.float64)))
    assert np.isfinite(got).all() and err.max() <= TOL[name], (name, err.max(), x[err.argmax()])


def _floats_between(lo, hi, step):
    """every `step`-th float32 from lo to hi (both > 0), and their negatives"""
    bits = np.arange(np.float32(lo).view(np.uint32), np.float32(hi).view(np.uint32), step,
                     dtype=np.uint32)
    x = bits.view(np.float32)
    return np.concatenate([x, -x])


# where the exp's argument is clamped and 2^w underflows (silu |x| ~ 88-104, gelu_tanh's
# |t| there at |x| ~ 10.6-11.3) and where gelu's polynomial hands over to 0.5 |x| (5.09)
BANDS = {"silu": (80.0, 112.0, 7), "gelu_tanh": (9.0, 12.5, 7), "gelu": (4.5, 5.7, 3),
         "relu": (1e-45, 1e-37, 101)}


@pytest.mark.parametrize("name", sorted(CODES))
def test_densely_where_the_formulas_clamp(act, name):
    x = _floats_between(*BANDS[name])
    got = act(x, name).astype(np.float64)
    err = np.abs(got - activation(x, name)) / np.maximum(1.0, np.abs(x.astype(np.float64)))
    assert np.isfinite(got).all() and err.max() <= TOL[name], (name, err.max(), x[err.argmax()])


@pytest.mark.parametrize("name", sorted(CODES))
def test_non_finite_as_torch(act, name):
    """NaN stays NaN (relu too); +inf -> +inf; -inf -> 0 for relu and NaN for the smooth ones
    (torch 2.13: gelu(-inf), gelu_tanh(-inf) and silu(-inf) are NaN)."""
    x = np.array([np.nan, np.inf, -np.inf], np.float32)
    got = act(x, name)
    want = activation(x, name)
    assert np.array_equal(got, want.astype(np.float32), equal_nan=True), (name, got, want)


@pytest.mark.parametrize("name", sorted(CODES))
def test_every_tail_length(act, name):
    """Lengths 1..80 (vector bodies and tails at 4, 8 and 16 lanes); the element past the
    end is never written."""
    rng = np.random.default_rng(0)
    for n in range(1, 81):
        x = rng.uniform(-6, 6, n + 1).astype(np.float32)
        y = x.copy()
        y[:n] = act(x[:n], name)
        assert y[n] == x[n]
        np.testing.assert_allclose(y[:n], activation(x[:n], name), rtol=0, atol=TOL[name] * 6 + 1e-30)


def test_none_leaves_the_row(act):
    x = np.linspace(-3, 3, 33).astype(np.float32)
    assert act(x, None).tobytes() == x.tobytes()
