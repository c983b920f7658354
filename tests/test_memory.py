"""mpskern.empty: page-aligned arrays owning whole pages (what Metal wraps without a copy)."""
import mmap
import os

import numpy as np
import pytest

import mpskern
from mpskern.memory import empty, is_page_aligned, page_size


def test_page_size_is_the_os_page_size():
    assert page_size() == mmap.PAGESIZE == os.sysconf("SC_PAGE_SIZE")
    assert page_size() & (page_size() - 1) == 0          # a power of two


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 3, 17, 19), (4097,), 9])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_empty_is_aligned_contiguous_writable(shape, dtype):
    a = mpskern.empty(shape, dtype)
    want = (shape,) if isinstance(shape, int) else shape
    assert a.shape == want and a.dtype == np.dtype(dtype)
    assert a.ctypes.data % page_size() == 0 and is_page_aligned(a)
    assert a.flags.c_contiguous and a.flags.writeable
    a[...] = 3                                          # the memory is usable end to end
    assert np.all(a == 3)


def test_empty_owns_whole_pages():
    page = page_size()
    for n in (1, page - 1, page, page + 1, 3 * page + 5):
        a = empty((n,), np.uint8)
        owner = a.base
        while owner.base is not None and isinstance(owner.base, np.ndarray):
            owner = owner.base
        lo, hi = owner.ctypes.data, owner.ctypes.data + owner.nbytes
        start = a.ctypes.data
        pages_end = start + -(-n // page) * page
        assert lo <= start and pages_end <= hi, (n, lo, start, pages_end, hi)


def test_empty_defaults_and_errors():
    assert mpskern.empty((2, 2)).dtype == np.float32
    assert mpskern.empty((0, 4)).shape == (0, 4)
    with pytest.raises(ValueError, match="negative"):
        mpskern.empty((2, -1))


@pytest.mark.parametrize("shape", [(2**32, 2**32), (2**62, 4), 2**63 - 1])
def test_empty_of_more_bytes_than_any_allocation_is_a_memory_error(shape):
    # np.prod's int64 wrapped to 0 bytes: "cannot reshape array of size 0" / an OverflowError
    with pytest.raises(MemoryError, match=r"mpskern.empty: shape .* bytes, more than any allocation"):
        mpskern.empty(shape)


def _numpy_refuses(nbytes):
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("AddressSanitizer's malloc aborts the process instead of failing (.ci/sanitize)")
    try:
        np.empty(nbytes, np.uint8)
    except MemoryError:
        return True
    return False


@pytest.mark.parametrize("times", [1.5, 4, 2**20])
def test_empty_refuses_what_numpy_refuses(times):
    # mpskern.empty((2**40,)) handed out 4 TiB of a 23 GiB machine: the guarded mapping was
    # reserved without accounting (MAP_NORESERVE) and made writable by mprotect, so the OS's
    # overcommit check never ran and the array failed only when touched (SIGSEGV/OOM kill).
    # The rule is numpy's (the OS's policy for one allocation), not a limit of our own
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    nbytes = int(ram * times) // 4 * 4
    if not _numpy_refuses(nbytes):
        pytest.skip(f"numpy.empty hands out {nbytes} bytes here too (overcommit policy)")
    for shape, dtype in (((nbytes,), np.uint8), ((nbytes // 4,), np.float32),
                         ((2, nbytes // 4), np.float16)):
        with pytest.raises(MemoryError, match=r"mpskern.empty: cannot allocate shape .*"
                                              r"bytes.*pass a smaller shape"):
            mpskern.empty(shape, dtype)
    a = mpskern.empty((1 << 20,))             # and allocating still works afterwards
    a[...] = 1
    assert is_page_aligned(a) and a.sum() == 1 << 20


@pytest.mark.parametrize("shape", [True, (True, 3), (2, np.True_)])
def test_empty_refuses_a_bool_as_a_size(shape):
    with pytest.raises(TypeError, match="shape must be an int or a sequence of ints"):
        mpskern.empty(shape)


def test_plain_numpy_arrays_are_usually_not_page_aligned():
    # why mpskern.empty exists: numpy's allocator aligns to 16-64 bytes, not to pages
    offsets = {np.empty(1000, np.float32).ctypes.data % page_size() for _ in range(8)}
    assert offsets != {0}
