"""mpskern.metal_kernel's arguments checked against the kernel's parsed signature
(mpskern/kernel_args.py): every kind of mismatch planted once and refused with a TypeError
naming the [[buffer(i)]], the parameter and the fix; valid calls (vector, struct, template
instantiation, const and constant pointers, read-only inputs) run and compute the right
answer. Also threadgroup_memory= for [[threadgroup(i)]] parameters, output_shapes /
output_dtypes, and macros with Python bools."""
import re

import numpy as np
import pytest

import mpskern
from mpskern import sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
SAXPY = mpskern.metal_kernel(HEAD + """
kernel void saxpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& a [[buffer(2)]], constant uint& n [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    if (i < n) y[i] = a * x[i] + y[i];
}
""", "saxpy")
HALF = mpskern.metal_kernel(HEAD + """
kernel void twice(device const half* x [[buffer(0)]], device half* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) { y[i] = x[i] * 2.0h; }
""", "twice")


def run(k, *args, n=8, **kw):
    return k(*args, grid=(n,), threadgroup=(n,), backend="sim", **kw)


def refused(k, *args, match, **kw):
    with pytest.raises(TypeError, match=match) as e:
        run(k, *args, **kw)
    return str(e.value)


def test_a_valid_call_runs():
    x, y = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    assert run(SAXPY, x, y, np.float32(2), np.uint32(8)) is None
    np.testing.assert_array_equal(y, 2 * np.arange(8) + 1)


def test_element_type_mismatch_names_buffer_parameter_and_fix():
    x = np.ones(8, np.float32)                        # float32 bound to device half*
    msg = refused(HALF, x, np.zeros(8, np.float16), match=r"\[\[buffer\(0\)\]\] 'x'")
    assert "`device const half*`" in msg and "float32 array" in msg
    assert "x.astype(np.float16)" in msg and "declare the parameter with float" in msg
    y = np.zeros(8, np.float32)
    refused(HALF, np.ones(8, np.float16), y, match=r"\[\[buffer\(1\)\]\] 'y'.*float16")


def test_scalar_of_the_wrong_type():
    x, y = np.ones(8, np.float32), np.ones(8, np.float32)
    msg = refused(SAXPY, x, y, np.uint32(2), np.uint32(8), match=r"\[\[buffer\(2\)\]\] 'a'")
    assert "`constant float&`" in msg and "uint32" in msg and "np.float32" in msg


def test_python_numbers_get_the_parameters_own_type_suggested():
    x, y = np.ones(8, np.float32), np.ones(8, np.float32)
    msg = refused(SAXPY, x, y, 2.0, np.uint32(8), match=r"\[\[buffer\(2\)\]\] 'a'")
    assert "np.float32(2.0)" in msg and "uint32(2.0)" not in msg
    msg = refused(SAXPY, x, y, np.float32(2), 8, match=r"\[\[buffer\(3\)\]\] 'n'")
    assert "np.uint32(8)" in msg


def test_an_extra_argument():
    x, y = np.ones(8, np.float32), np.ones(8, np.float32)
    msg = refused(SAXPY, x, y, np.float32(2), np.uint32(8), np.float32(1),
                  match=r"argument 4 would bind \[\[buffer\(4\)\]\]")
    assert "[[buffer(3)]] n" in msg


def test_a_missing_argument():
    x, y = np.ones(8, np.float32), np.ones(8, np.float32)
    msg = refused(SAXPY, x, y, np.float32(2), match=r"missing: \[\[buffer\(3\)\]\] 'n'")
    assert "3 argument(s) given" in msg


@pytest.mark.parametrize("value", [bytearray(32), b"\0" * 32, np.float32(0)])
def test_a_written_parameter_needs_an_array(value):
    x = np.ones(8, np.float32)
    msg = refused(SAXPY, x, value, np.float32(2), np.uint32(8), match=r"\[\[buffer\(1\)\]\] 'y'")
    assert "writes would be lost" in msg or "pointer" in msg


def test_a_written_parameter_needs_a_writable_array():
    x, y = np.ones(8, np.float32), np.ones(8, np.float32)
    y.flags.writeable = False
    msg = refused(SAXPY, x, y, np.float32(2), np.uint32(8), match=r"\[\[buffer\(1\)\]\] 'y'")
    assert "read-only" in msg and "a.copy()" in msg and "const device float*" in msg


def test_a_scalar_for_a_pointer():
    y = np.ones(8, np.float32)
    msg = refused(SAXPY, np.float32(1), y, np.float32(2), np.uint32(8), match=r"\[\[buffer\(0\)\]\] 'x'")
    assert "pointer" in msg and "constant float&" in msg


def test_valid_idioms_pass():
    src = HEAD + """
struct P { float a; uint n; };
template <typename T>
kernel void k(device const T* x [[buffer(0)]], constant float4* c [[buffer(1)]],
              device float4* y [[buffer(2)]], constant P& p [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
    if (i < p.n) y[i] = float4(float(x[i])) * c[0] * p.a;
}
template [[host_name("k_half")]] kernel void k<half>(device const half* x [[buffer(0)]],
    constant float4* c [[buffer(1)]], device float4* y [[buffer(2)]], constant P& p [[buffer(3)]],
    uint i [[thread_position_in_grid]]);
"""
    k = mpskern.metal_kernel(src, "k_half")
    x = np.arange(8, dtype=np.float16)
    x.flags.writeable = False                          # read-only input for a const pointer: fine
    c = np.array([1, 2, 3, 4], np.float32)
    y = np.zeros((8, 4), np.float32)
    p = np.array((0.5, 8), dtype=[("a", np.float32), ("n", np.uint32)])[()]
    run(k, x, c, y, p)
    np.testing.assert_array_equal(y, np.arange(8)[:, None] * c * 0.5)
    with pytest.raises(TypeError, match=r"\[\[buffer\(0\)\]\] 'x'.*half"):
        run(k, np.arange(8, dtype=np.float32), c, y, p)  # the instantiation's type is checked


def test_the_signature_is_parsed_once_per_kernel_and_macros():
    from mpskern import kernel_args
    src = HEAD + "kernel void m(device T* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 1; }\n"
    k = mpskern.metal_kernel(src, "m", macros={"T": "float"})
    assert k.params[0].dtype == np.float32
    assert mpskern.metal_kernel(src, "m", macros={"T": "half"}).params[0].dtype == np.float16
    hits = kernel_args.signature.cache_info().hits
    assert k.params is k.params and kernel_args.signature.cache_info().hits == hits + 2


# ------------------------------------------------------------------ threadgroup_memory
REVERSE = mpskern.metal_kernel(HEAD + """
kernel void rev(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                threadgroup float* t [[threadgroup(0)]],
                uint i [[thread_index_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
    t[i] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[i] = t[n - 1 - i];
}
""", "rev")


@pytest.mark.parametrize("tgm", [64 * 4, [64 * 4], {0: 64 * 4}])
@pytest.mark.parametrize("check", [False, True])
def test_threadgroup_memory(tgm, check):
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    run(REVERSE, x, y, n=64, threadgroup_memory=tgm, check=check)
    np.testing.assert_array_equal(y, x[::-1])


def test_threadgroup_memory_too_small_is_found_by_the_check():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(mpskern.KernelCheckError, match="out-of-bounds"):
        run(REVERSE, x, y, n=64, threadgroup_memory=32 * 4, check=True)


def test_threadgroup_memory_errors():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(TypeError, match=r"\[\[threadgroup\(0\)\]\] 't'.*threadgroup_memory=\{0: nbytes\}"):
        run(REVERSE, x, y, n=64)
    with pytest.raises(TypeError, match=r"gives \[\[threadgroup\(1\)\]\], which the kernel does not declare"):
        run(REVERSE, x, y, n=64, threadgroup_memory={0: 256, 1: 16})
    with pytest.raises(ValueError, match="not a whole number of float"):
        run(REVERSE, x, y, n=64, threadgroup_memory=255)
    with pytest.raises(ValueError, match=r"threadgroup_memory\[0\] must be a number of bytes >= 0"):
        run(REVERSE, x, y, n=64, threadgroup_memory=-4)
    with pytest.raises(ValueError, match="index 7"):
        run(REVERSE, x, y, n=64, threadgroup_memory={7: 4})
    with pytest.raises(TypeError, match="threadgroup_memory must be"):
        run(REVERSE, x, y, n=64, threadgroup_memory="256")


# ------------------------------------------------------------------ outputs
def test_outputs_by_shape_and_dtype():
    x = np.arange(8, dtype=np.float32)
    k = mpskern.metal_kernel(HEAD + """
kernel void two(device const float* x [[buffer(0)]], device float* a [[buffer(1)]],
                device half* b [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    a[i] += x[i]; b[i] = half(x[i] * 2.0f);
}""", "two")
    a, b = run(k, x, output_shapes=[(8,), 8], output_dtypes=[np.float32, "float16"], init_value=1)
    np.testing.assert_array_equal(a, x + 1)
    assert b.dtype == np.float16 and b.shape == (8,)
    np.testing.assert_array_equal(b, (2 * x).astype(np.float16))
    with pytest.raises(TypeError, match=r"\[\[buffer\(2\)\]\] 'b'.*float32"):
        run(k, x, output_shapes=[8, 8], output_dtypes=[np.float32, np.float32])
    with pytest.raises(ValueError, match="2 output_shapes but 1 output_dtypes"):
        run(k, x, output_shapes=[8, 8], output_dtypes=[np.float32])
    with pytest.raises(TypeError, match="go together"):
        run(k, x, output_shapes=[8, 8])
    with pytest.raises(TypeError, match="float64"):
        run(k, x, output_shapes=[8, 8], output_dtypes=[np.float64, np.float16])


# ------------------------------------------------------------------ macros
def test_python_bools_in_macros_are_1_and_0():
    src = HEAD + """
kernel void flag(device int* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
#if USE_IT
    y[i] = 7;
#else
    y[i] = -1;
#endif
    y[i] += ON + OFF * 10;
}"""
    y = np.zeros(4, np.int32)
    run(mpskern.metal_kernel(src, "flag", macros={"USE_IT": True, "ON": True, "OFF": False}), y, n=4)
    np.testing.assert_array_equal(y, 8)
    run(mpskern.metal_kernel(src, "flag", macros={"USE_IT": False, "ON": np.True_, "OFF": True}), y, n=4)
    np.testing.assert_array_equal(y, 10)
    with pytest.raises(TypeError, match=re.escape("macros['N'] must be an int, float, str or bool, got list")):
        mpskern.metal_kernel(src, "flag", macros={"N": [1]})
