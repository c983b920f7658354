"""Page-aligned numpy arrays, so GPU backends can use them without a copy.

Metal wraps host memory without copying (newBufferWithBytesNoCopy) only in whole pages:
16 KiB on Apple silicon, 4 KiB on most other machines; the OS says which. Arrays from
`mpskern.empty` start on a page boundary and own whole pages, so a Metal buffer over them
starts at offset 0 and touches no neighbouring memory. Any other array still works: the
shim wraps its enclosing pages (or copies) and bench results say which happened.

The pages lie between inaccessible guard regions (1 GiB each side, mk_guarded_alloc), so
the simulator runs kernels on them in place too: a kernel's stray access next to them
faults (KernelError) instead of reaching other memory. Other arrays the simulator copies
into such memory for the run. Where the OS runs out of mappings, a plain page-aligned
numpy allocation is the fallback (the simulator then copies it).
"""
import mmap
import os
from math import prod

import numpy as np

from mpskern import _native
from mpskern.shapes import index

__all__ = ["empty", "page_size", "is_page_aligned"]


def page_size():
    """The OS's memory page size in bytes (16384 on Apple silicon)."""
    return mmap.PAGESIZE


def empty(shape, dtype=np.float32):
    """Like numpy.empty (C order), but the data starts on a page boundary and the
    allocation is a whole number of pages: Metal can use it without a copy.

    Parameters
    ----------
    shape : int or tuple of ints
        The array's shape.
    dtype : numpy dtype
        Default float32.

    Returns
    -------
    numpy.ndarray
        Uninitialised, C order, page-aligned and writable. MemoryError (naming the shape
        and bytes) where numpy.empty would refuse it too: the OS's overcommit policy.

    Example
    -------
        x = mk.empty((1024, 1024))
        x[...] = 1.0
        y = mk.softmax(x)                    # on Metal: no copy of x
    """
    dtype = np.dtype(dtype)
    try:  # operator.index semantics, as numpy.empty: 2.5 or "3" is an error, not truncated
        shape = (index(shape),) if np.ndim(shape) == 0 else tuple(index(s) for s in shape)
    except TypeError:
        raise TypeError(f"mpskern.empty: shape must be an int or a sequence of ints, "
                        f"got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"mpskern.empty: negative dimension in shape {shape}")
    if dtype.hasobject:
        raise TypeError(f"mpskern.empty: dtype {dtype} holds Python objects, which cannot live "
                        "in raw pages; use numpy.empty for it")
    probe = np.empty((0,), dtype)  # numpy's reading of it: 'S0' is S1, a subarray dtype adds axes
    dtype, shape = probe.dtype, shape + probe.shape[1:]
    page = page_size()
    nbytes = prod(shape) * dtype.itemsize     # exact (np.prod's int64 wraps for huge shapes)
    if nbytes >= 2**63:
        raise MemoryError(f"mpskern.empty: shape {shape} of {dtype} is {nbytes} bytes, more "
                          "than any allocation can hold (2**63); pass a smaller shape")
    span = max(-(-nbytes // page), 1) * page           # whole pages, at least one
    try:
        raw = np.frombuffer(_native.GuardedMemory(nbytes, span), np.uint8)
        start = 0
    except MemoryError:       # out of mappings, or more than the OS lends (as numpy.empty)
        try:
            raw = np.empty(span + page, dtype=np.uint8)    # one spare page to align within
        except MemoryError:
            raise MemoryError(f"mpskern.empty: cannot allocate shape {shape} of {dtype} "
                              f"({nbytes:,} bytes): more than the OS will lend now; pass a "
                              "smaller shape") from None
        start = (-raw.ctypes.data) % page
    return np.ndarray(shape, dtype, buffer=raw, offset=start)   # (itemsize 0 too: 'V0')


def available_bytes():
    """Bytes of memory a new allocation can get now without swapping or an OOM kill, as far
    as the OS says: Linux's MemAvailable, capped by the cgroup's limit (containers); the
    physical memory elsewhere (macOS); None where neither is known."""
    have = None
    try:
        with open("/proc/meminfo") as f:
            for ln in f:
                if ln.startswith("MemAvailable:"):
                    have = int(ln.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read())
        with open("/sys/fs/cgroup/memory.stat") as f:      # page cache it can reclaim
            used -= next((int(ln.split()[1]) for ln in f if ln.startswith("inactive_file ")), 0)
        if limit != "max":
            free = max(int(limit) - used, 0)
            have = free if have is None else min(have, free)
    except (OSError, ValueError):
        pass
    if have is None:
        try:
            have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            pass
    return have


def is_page_aligned(a):
    """True if the array's data starts on a page boundary."""
    return np.asarray(a).ctypes.data % page_size() == 0
