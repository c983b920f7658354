"""QA regressions: mpskern.empty rejects non-integer shapes (numpy.empty's rule) instead of
truncating 2.5 to 2; metal_kernel's grid/threadgroup name themselves for non-numeric input."""
import numpy as np
import pytest

import mpskern


@pytest.mark.parametrize("shape", [2.5, "abc", (2, 1.5), ("3",)])
def test_empty_rejects_non_integer_shapes(shape):
    with pytest.raises(TypeError, match="mpskern.empty: shape must be an int or a sequence"):
        mpskern.empty(shape)


def test_empty_accepts_numpy_ints():
    a = mpskern.empty((np.int64(3), 2), np.float16)
    assert a.shape == (3, 2) and a.dtype == np.float16 and mpskern.memory.is_page_aligned(a)


@pytest.mark.parametrize("grid", ["a", ("a", 1), ("1", "x")])
def test_kernel_grid_of_strings_names_grid(grid):
    k = mpskern.metal_kernel("", "f")
    with pytest.raises(TypeError, match="grid must be a tuple of 1 to 3 ints"):
        k(grid=grid, threadgroup=1, backend="sim")


_WRITE_ONES = """
#include <metal_stdlib>
using namespace metal;
kernel void ones(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 1.0f; }
"""


def test_kernel_never_writes_a_read_only_array(tmp_path, monkeypatch):
    k = mpskern.metal_kernel(_WRITE_ONES, "ones")
    data = b"\0" * 16
    immutable = np.frombuffer(data, np.float32)          # memory of a Python bytes object
    with pytest.raises(TypeError, match=r"\[\[buffer\(0\)\]\] 'y'.*read-only"):
        k(immutable, grid=4, threadgroup=4, backend="sim")   # the signature says y is written
    assert data == b"\0" * 16
    # where the signature cannot be read (no preprocessor), the array is bound as a copy
    monkeypatch.setattr(mpskern.kernel_args, "signature", lambda *a: None)
    k(immutable, grid=4, threadgroup=4, backend="sim")
    assert data == b"\0" * 16 and not immutable.any()
    np.zeros(64, np.float32).tofile(tmp_path / "z.bin")
    mapped = np.memmap(tmp_path / "z.bin", np.float32, mode="r")   # read-only pages
    k(mapped, grid=64, threadgroup=64, backend="sim")  # was SIGSEGV caught as MpskernError
    assert not mapped.any()
    y = np.zeros(4, np.float32)
    k(y, grid=4, threadgroup=4, backend="sim")          # writable arrays are still written
    assert (y == 1).all()


def test_kernel_rejects_float64_scalars(monkeypatch):
    k = mpskern.metal_kernel(_WRITE_ONES, "ones")
    with pytest.raises(TypeError, match=r"argument 1 would bind \[\[buffer\(1\)\]\]"):
        k(np.zeros(4, np.float32), np.float64(2.0), grid=4, threadgroup=4, backend="sim")
    monkeypatch.setattr(mpskern.kernel_args, "signature", lambda *a: None)   # (no preprocessor)
    with pytest.raises(TypeError, match=r"argument 1: a float64 scalar .* np.float32"):
        k(np.zeros(4, np.float32), np.float64(2.0), grid=4, threadgroup=4, backend="sim")


def _sum_kernel(n):
    params = ", ".join(f"const device float* a{i} [[buffer({i})]]" for i in range(n - 1))
    terms = " + ".join(f"a{i}[t]" for i in range(n - 1))
    return ("#include <metal_stdlib>\nusing namespace metal;\n"
            f"kernel void total({params}, device float* y [[buffer({n - 1})]], "
            f"uint t [[thread_position_in_grid]]) {{ y[t] = {terms}; }}\n")


def test_kernel_binds_every_metal_buffer_slot():
    """Metal has 31 buffer slots ([[buffer(0)]] .. [[buffer(30)]]); all of them bind, and one
    argument more is refused naming the limit (it was 16: [[buffer(16)]] failed to compile)."""
    from mpskern import _native
    n = _native.MAX_BINDINGS
    assert n == 31
    ins = [np.full(4, i, np.float32) for i in range(n - 1)]
    y = np.zeros(4, np.float32)
    mpskern.metal_kernel(_sum_kernel(n), "total")(*ins, y, grid=4, threadgroup=4, backend="sim")
    assert (y == sum(range(n - 1))).all()
    with pytest.raises(ValueError, match=r"32 arguments; a kernel has at most 31 buffers"):
        mpskern.metal_kernel(_sum_kernel(n + 1), "total")(*ins, y, y, grid=4, threadgroup=4,
                                                         backend="sim")


@pytest.mark.parametrize("dtype", ["S0", "U0", "V0", "M8[ns]", "c16", "U5", "?",
                                   np.dtype((np.float32, (2, 3))), [("a", "<f4"), ("b", "<i2")]])
def test_empty_reads_a_dtype_as_numpy_empty_does(dtype):
    """'S0' (numpy: S1) and subarray dtypes (numpy: more axes) were numpy errors from inside
    mpskern.empty ('When changing to a smaller dtype...'); qa10."""
    got, want = mpskern.empty((2, 3), dtype), np.empty((2, 3), dtype)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    assert mpskern.memory.is_page_aligned(got) and got.flags.writeable and got.flags.c_contiguous
    got[...] = want                          # its memory is all there


@pytest.mark.parametrize("dtype", [object, [("a", "O")]])
def test_empty_refuses_object_dtypes_saying_why(dtype):
    with pytest.raises(TypeError, match="holds Python objects.*use numpy.empty"):
        mpskern.empty((2, 3), dtype)
