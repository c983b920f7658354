"""Fresh result arrays for the ops (_args.output). Large ones come from a small pool of
buffers that earlier results used and let go, so their pages are already mapped: at 16
threads on a 16-core Xeon a fresh 51 MB result (GPT-2's logits) costs 3.8 ms of page
faults (linear 256 x 768 -> 50257: 23.4 ms fresh vs 19.6 into a reused array, device run,
session 8); at 2 threads it is noise next to the op.

A buffer is reused only when nothing refers to it any more: every array or view made
from a result holds a reference to its buffer (numpy keeps the base), so a refcount of
the pool's own references alone means the last view is gone. At most POOL_BYTES are
held this way (results in use count too: past that, results are plain np.empty arrays),
so the pool never grows with the results a program keeps. MPSKERN_OUTPUT_POOL_MB=0 turns
it off (every result np.empty)."""
import math
import sys
import threading

import numpy as np

from mpskern import env

MIN_BYTES = 4 << 20        # smaller results: malloc's heap reuses them already
POOL_BYTES = int(env.get("MPSKERN_OUTPUT_POOL_MB", "256")) << 20
MAX_BLOCKS = 8

_blocks = []               # uint8 arrays, each referenced by this list only when free
_held = 0
_lock = threading.Lock()
_empty = np.empty
_dtype = np.dtype
_prod = math.prod


def _refs(b):
    return sys.getrefcount(b)


def _calibrate():
    """The count _refs gives for a buffer only _blocks refers to, read the way empty()
    reads it (a loop variable over the list), whatever this Python's own counting."""
    probe = [_empty(1, np.uint8)]
    for i in range(1):
        b = probe[i]
        return _refs(b)


_FREE = _calibrate()


def empty(shape, dtype):
    """An uninitialised C-contiguous array of `shape` and `dtype` (np.empty's), its
    memory possibly that of an earlier result nothing refers to any more."""
    dtype = _dtype(dtype)
    n = _prod(shape) * dtype.itemsize
    if n < MIN_BYTES or POOL_BYTES == 0:
        return _empty(shape, dtype)
    return _pooled(shape, dtype, n)


def _pooled(shape, dtype, n):
    global _held
    with _lock:
        best = None
        for i in range(len(_blocks)):      # the smallest free buffer that holds n bytes
            b = _blocks[i]
            if b.size >= n and (best is None or b.size < best.size) and _refs(b) == _FREE:
                best = b
        b = None
        if best is not None and best.size <= 2 * n:
            return best[:n].view(dtype).reshape(shape)
        best = None
        if len(_blocks) >= MAX_BLOCKS or _held + n > POOL_BYTES:
            for i in range(len(_blocks)):      # make room: let a free buffer go
                b = _blocks[i]
                if _refs(b) == _FREE and _held - b.size + n <= POOL_BYTES:
                    _held -= b.size
                    del _blocks[i]
                    break
            else:
                return _empty(shape, dtype)
        b = _empty(n, np.uint8)
        _blocks.append(b)
        _held += n
        return b.view(dtype).reshape(shape)


def held():
    """(buffers in the pool, bytes they hold, bytes of them free now): for tests."""
    with _lock:
        free = 0
        for i in range(len(_blocks)):
            b = _blocks[i]
            if _refs(b) == _FREE:
                free += b.size
        return len(_blocks), _held, free
