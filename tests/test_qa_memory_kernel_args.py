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
