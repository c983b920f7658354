# _native.pyx: the Cython layer over the C ABI (objc/mpskern.h). Status codes become Python
# exceptions carrying the C message; arrays arrive already validated and C-contiguous from
# the Python layer and are reached through the buffer protocol (no numpy C-API, so one
# build serves numpy 1.x and 2.x). Parts:
#   _native_ops.pxi   the op table: cpu_<op>, mps_<op> and pack_args from one row per op
#   _native_gpu.pxi   mk_device/buffer/library/pipeline/run, simulator options
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo,
                             PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE)
from libc.stdint cimport int32_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset
from mpskern._abi cimport *

from cpython.exc cimport PyErr_CheckSignals
from mpskern._errors import (BackendUnavailable, KernelCheckError, KernelCompileError,
                             KernelError, MpskernError, Unsupported)

ABI_VERSION = MK_ABI_VERSION
F32 = MK_F32
F16 = MK_F16
MAX_BINDINGS = MK_MAX_BINDINGS     # [[buffer(i)]] slots of one dispatch: 0 .. MAX_BINDINGS-1

_ERRORS = {MK_ERR_INVALID: ValueError, MK_ERR_UNAVAILABLE: BackendUnavailable,
           MK_ERR_COMPILE: KernelCompileError, MK_ERR_CHECK: KernelCheckError,
           MK_ERR_NOMEM: MemoryError, MK_ERR_UNSUPPORTED: Unsupported,
           MK_ERR_RUNTIME: KernelError, MK_ERR_INTERRUPTED: KeyboardInterrupt}


cdef int check(mk_status st) except -1:
    """Raise the Python exception for a failing status, with the C message."""
    if st == MK_OK:
        return 0
    if st == MK_ERR_INTERRUPTED:
        PyErr_CheckSignals()              # Python's SIGINT handler: KeyboardInterrupt
    raise _ERRORS.get(st, MpskernError)(mk_last_error().decode("utf-8", "replace"))


# The one rule for holding the GIL through a call into C. Keep it when the call is certain
# to be short: a CPU kernel whose operands total under 32 KiB (at most ~0.1 ms on the
# slowest op per byte, softmax over rows of 4; a few us for the others), so releasing would
# cost more than it frees, and under a busy Python thread a released GIL is only won back
# after its 5 ms switch interval. Release it for everything else: bigger CPU kernels (so
# Python threads run them in parallel) and every call that waits for a device or its
# compiler (mps_*, Device.run, library compile/load, pipeline creation), and a buffer sync
# that moves 32 KiB or more. benchmarks/native_calls.py measures both sides.
cdef enum:
    _GIL_KEEP_BELOW = 32768


cdef inline bint release_gil(Py_ssize_t operand_bytes, bint waits_for_device) noexcept:
    return waits_for_device or operand_bytes >= _GIL_KEEP_BELOW


cdef inline void* addr(object a, bint writable, Py_ssize_t* nbytes) except? NULL:
    """Address of a C-contiguous buffer (None -> NULL), adding its size to *nbytes. The
    caller keeps `a` alive."""
    cdef Py_buffer v
    if a is None:
        return NULL
    PyObject_GetBuffer(a, &v, PyBUF_ANY_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0))
    cdef void* p = v.buf
    if nbytes != NULL:
        nbytes[0] += v.len
    PyBuffer_Release(&v)
    return p


def cpu_set_num_threads(int n):
    mk_cpu_set_num_threads(n)


def cpu_get_num_threads():
    return mk_cpu_get_num_threads()


include "_native_ops.pxi"
include "_native_gpu.pxi"
