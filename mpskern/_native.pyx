# _native.pyx: the Cython layer over the C ABI (objc/mpskern.h). One thin wrapper per ABI
# call, the GIL released around the work, status codes turned into Python exceptions
# carrying the C message. Arrays arrive already validated and C-contiguous from the
# Python layer; their memory is reached through the buffer protocol (no numpy C-API, so
# one build serves numpy 1.x and 2.x). Parts, by ABI section:
#   _native_cpu.pxi   mk_cpu_*            CPU kernels
#   _native_gpu.pxi   mk_device/buffer/library/pipeline/run, simulator options
#   _native_mps.pxi   mk_mps_*            Apple's primitives
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo,
                             PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE)
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset
from mpskern._abi cimport *

from cpython.exc cimport PyErr_CheckSignals
from mpskern._errors import (BackendUnavailable, KernelCheckError, KernelCompileError,
                             KernelError, MpskernError, Unsupported)

ABI_VERSION = MK_ABI_VERSION
F32 = MK_F32
F16 = MK_F16


cdef int check(mk_status st) except -1:
    """Raise the Python exception for a failing status, with the C message."""
    if st == MK_OK:
        return 0
    msg = mk_last_error().decode("utf-8", "replace")
    if st == MK_ERR_INVALID:
        raise ValueError(msg)
    if st == MK_ERR_UNAVAILABLE:
        raise BackendUnavailable(msg)
    if st == MK_ERR_COMPILE:
        raise KernelCompileError(msg)
    if st == MK_ERR_CHECK:
        raise KernelCheckError(msg)
    if st == MK_ERR_NOMEM:
        raise MemoryError(msg)
    if st == MK_ERR_UNSUPPORTED:
        raise Unsupported(msg)
    if st == MK_ERR_RUNTIME:
        raise KernelError(msg)
    if st == MK_ERR_INTERRUPTED:
        PyErr_CheckSignals()              # Python's SIGINT handler: KeyboardInterrupt
        raise KeyboardInterrupt(msg)
    raise MpskernError(msg)


cdef void* addr(object a, bint writable=False) except? NULL:
    """Address of a C-contiguous buffer (None -> NULL). The caller keeps `a` alive."""
    cdef Py_buffer v
    if a is None:
        return NULL
    PyObject_GetBuffer(a, &v, PyBUF_ANY_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0))
    cdef void* p = v.buf
    PyBuffer_Release(&v)
    return p


include "_native_cpu.pxi"
include "_native_gpu.pxi"
include "_native_mps.pxi"
