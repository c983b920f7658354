"""_args.row_strided and _args.span share one count of the elements an array spans
(_elements_spanned): same answers as counting the byte offsets of every element, on zero,
negative, partial-element and padded strides."""
import numpy as np
import pytest

from mpskern import _args

BASE = np.arange(4096, dtype=np.float32)


def _offsets(x):
    """Byte offset of every element from x's first, by brute force."""
    idx = np.indices(x.shape).reshape(x.ndim, -1).T
    return np.array([sum(i * s for i, s in zip(ix, x.strides)) for ix in idx])


def _strided(shape, strides):
    """A read-only view of BASE at these byte strides (from its middle if any is negative)."""
    start = BASE[BASE.size // 2:] if any(s < 0 for s in strides) else BASE
    return np.lib.stride_tricks.as_strided(start, shape, strides, writeable=False)


CASES = [((3, 5), (40, 4)), ((3, 5), (0, 4)), ((4, 1, 5), (80, 7, 4)), ((2, 3, 4), (0, 64, 4)),
         ((3, 5), (-40, 4)), ((3, 5), (40, -4)), ((3, 5), (42, 4)), ((3, 5), (40, 8)),
         ((1, 5), (-3, 4)), ((6,), (4,)), ((2, 2, 2), (4, 8, 4)), ((3, 0), (40, 4))]


@pytest.mark.parametrize("shape, strides", CASES)
def test_row_strided_and_span_agree_with_the_element_offsets(shape, strides):
    x = _strided(shape, strides)
    es = x.itemsize
    off = _offsets(x) if x.size else np.zeros(0, int)
    whole = x.size > 0 and all(s >= 0 and s % es == 0 for n, s in zip(shape, strides) if n > 1)
    want = whole and (shape[-1] == 1 or strides[-1] == es)
    assert _args.row_strided(x) == want
    if whole:
        n = off.max() // es + 1
        assert _args._elements_spanned(x) == n
        s = _args.span(x)
        assert s.shape == (n,) and s.ctypes.data == x.ctypes.data
        assert np.array_equal(s[off // es], x.reshape(-1))     # every element where it lies
    elif x.size:
        assert _args._elements_spanned(x) is None
        with pytest.raises(ValueError, match="not whole non-negative elements"):
            _args.span(x)         # the old sum gave a short or negative length here


def test_the_int32_limit_counts_the_span_not_the_size():
    x = np.lib.stride_tricks.as_strided(BASE, (2, 4), (4 * (2 ** 31 - 4), 4), writeable=False)
    assert _args._elements_spanned(x) == 2 ** 31 and not _args.row_strided(x)
    y = np.lib.stride_tricks.as_strided(BASE, (2, 4), (4 * (2 ** 31 - 5), 4), writeable=False)
    assert _args._elements_spanned(y) == 2 ** 31 - 1 and _args.row_strided(y)
