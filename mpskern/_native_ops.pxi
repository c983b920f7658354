# _native_ops.pxi (included by _native.pyx): the op table. Each kernel family of the C ABI
# is one row (OPS[name]: a NativeOp): its argument struct (metal/mk_args.h), its arrays in
# ABI order ("!" marks the ones it writes) and one adapter per entry point (mk_cpu_<op>,
# mk_mps_<op>) that gives it a common C signature. Everything else is generic:
#     cpu_run(op, args, dtype, *arrays)            host arrays; returns None
#     mps_run(op, device, args, dtype, *buffers)   Buffers of a Metal Device; (gpu_ms, wall_ms)
#     cpu_<op>(args, dtype, *arrays), mps_<op>(device, args, dtype, *buffers)   the same, bound
#     pack_args(<op>, args)                        the struct's bytes, for `constant T&`
# where `args` is a dict whose keys are the struct's fields (extra keys are ignored). The
# per-family part (structs, entry points, adapters, rows) is _kernels.pxi / _kernels_rows.pxi,
# which setup.py writes from metal/mk_args.h's MK_KERNELS list (objc/cython_kernels.py): a
# new family is its struct and one line of that list.
cimport cython
from cpython.dict cimport PyDict_GetItem, PyDict_GetItemWithError, PyDict_Next
from cpython.ref cimport PyObject

ctypedef mk_status (*cpu_fn)(const void* args, int dtype, void** arrays) noexcept nogil
ctypedef mk_status (*mps_fn)(mk_device* d, const void* args, int dtype, mk_buffer** bufs,
                             mk_timing* t) noexcept nogil

cdef enum:
    _MAX_FIELDS = 32      # fields of one argument struct (all 4 bytes: mk_args.h's rule)
    _MAX_ARRAYS = 6       # arrays of one op

include "_kernels.pxi"      # structs, mk_cpu_/mk_mps_ entry points, args_t, adapters


# ---------------------------------------------------------------- argument structs
cdef struct Layout:
    int size                          # sizeof the C struct
    int nfields
    int offset[_MAX_FIELDS]           # byte offset of field i in the C struct
    bint is_float[_MAX_FIELDS]        # float32, else int32


cdef Layout _layout(args_t* tag, str name, list fields) except *:
    """The layout of the C struct `tag` points at (only its type matters): field names and
    types as _abi.pxd declares them (read back through Cython's struct -> dict), byte
    offsets as the C compiler laid them out (found by setting one field at a time). A field
    _abi.pxd lacks would be left uninitialised, so any gap is an ImportError."""
    cdef args_t s
    cdef Layout L
    cdef int i, k
    cdef int32_t marker
    memset(&s, 0, sizeof(s))
    cdef dict view = s                # Cython converts the struct field by field
    fields.extend(view)
    L.size = sizeof(s)
    L.nfields = len(fields)
    if L.nfields > _MAX_FIELDS or 4 * L.nfields != L.size:
        raise ImportError(f"mpskern._native: _abi.pxd declares {L.nfields} fields of "
                          f"mk_{name}_args, but the C struct has {L.size} bytes (4 per field): "
                          "bring _abi.pxd in step with metal/mk_args.h")
    for i, f in enumerate(fields):
        L.is_float[i] = type(view[f]) is float
        probe = dict.fromkeys(fields, 0)
        probe[f] = 1
        s = probe
        hits = []
        for k in range(0, L.size, 4):
            memcpy(&marker, (<char*>&s) + k, 4)
            if marker != 0:
                hits.append(k)
        if len(hits) != 1:
            raise ImportError(f"mpskern._native: field {f!r} of mk_{name}_args is not one "
                              "4-byte word of the C struct: bring _abi.pxd in step")
        L.offset[i] = hits[0]
    return L


cdef inline int store(const Layout* L, int i, object v, char* out) except -1:
    """Field i of the struct at `out` from v, as Cython converts a dict entry to a struct
    field (int32 fields range-checked: OverflowError)."""
    cdef int32_t iv
    cdef float fv
    if L.is_float[i]:
        fv = v
        memcpy(out + L.offset[i], &fv, 4)
    else:
        iv = v
        memcpy(out + L.offset[i], &iv, 4)
    return 0


cdef inline int fill(const Layout* L, tuple fields, object args, char* out) except -1:
    """Write dict `args` into the struct at `out` (L.size bytes), field by field (store).
    The builders of structs.py write the fields in the struct's order, so the dict's i-th
    entry is field i (the same interned name): read in order, without a hash lookup per
    field (an 18-field gemm struct: ~1.9k instructions less per call). From the first entry
    that is not (other orders, extra keys), the rest is looked up by name."""
    cdef PyObject* k
    cdef PyObject* v
    cdef Py_ssize_t pos = 0
    cdef int i = 0
    if type(args) is not dict:
        raise TypeError(f"args must be a dict of the struct's fields, got {type(args).__name__}")
    while i < L.nfields and PyDict_Next(args, &pos, &k, &v):
        if k != <PyObject*>fields[i]:
            break
        store(L, i, <object>v, out)
        i += 1
    while i < L.nfields:
        v = PyDict_GetItemWithError(args, fields[i])
        if v == NULL:
            raise ValueError(f"args has no value for field {fields[i]!r}; the struct's fields "
                             f"are {', '.join(fields)}")
        store(L, i, <object>v, out)
        i += 1
    return 0


# ---------------------------------------------------------------- the rows and their calls
@cython.final
cdef class NativeOp:
    """One row of the op table: an op's argument struct, its arrays and entry points."""
    cdef readonly str name            # "softmax": cpu_softmax, mps_softmax, pack_args("softmax")
    cdef readonly tuple fields        # the struct's field names as _abi.pxd lists them
    cdef readonly tuple arrays        # the op's arrays in ABI order
    cdef readonly tuple written       # which of them the op writes
    cdef readonly str primitive       # what backend "mps" runs it with (MPSGraph softMax, ...)
    cdef Layout layout
    cdef int n
    cdef unsigned wmask               # bit i: arrays[i] is written
    cdef cpu_fn cpu
    cdef mps_fn mps

    cdef bytes pack(self, object args):
        cdef uint32_t s[_MAX_FIELDS]
        fill(&self.layout, self.fields, args, <char*>s)
        return (<char*>s)[:self.layout.size]

    cdef wrong_count(self, str call, list given):
        n = len([a for a in given if a is not ...])
        raise TypeError(f"{call}_{self.name}: {self.name} takes {self.n} arrays "
                        f"({', '.join(self.arrays)}), got {n}")

    def __repr__(self):
        return f"<NativeOp {self.name}({', '.join(self.arrays)})>"


cdef dict _ROWS = {}
OPS = _ROWS       # name -> its NativeOp row


cdef inline NativeOp row_of(object op):
    """The row `op` names: the row itself, its name, or an object with that .name (a direct
    dict probe: a public op's call passes the name, and this is on its every call)."""
    cdef PyObject* r = NULL
    if type(op) is NativeOp:
        return <NativeOp>op
    name = op if type(op) is str else getattr(op, "name", None)
    if type(name) is str:
        r = PyDict_GetItem(_ROWS, name)
    if r == NULL:
        raise ValueError(f"{op!r} is not an op of mpskern._native; one of {', '.join(_ROWS)}")
    return <NativeOp>r


cdef inline object cpu_call(NativeOp r, object args, int dtype, object a0, object a1,
                            object a2, object a3, object a4, object a5):
    """Row r's mk_cpu_<op> on host arrays a0.. (None -> NULL; `...`: not given)."""
    cdef uint32_t s[_MAX_FIELDS]
    cdef void* p[_MAX_ARRAYS]
    cdef PyObject* given[_MAX_ARRAYS]
    cdef Py_ssize_t nbytes = 0
    cdef mk_status st
    cdef int i, n = r.n
    given[0], given[1], given[2] = <PyObject*>a0, <PyObject*>a1, <PyObject*>a2
    given[3], given[4], given[5] = <PyObject*>a3, <PyObject*>a4, <PyObject*>a5
    if given[n - 1] == <PyObject*>... or (n < _MAX_ARRAYS and given[n] != <PyObject*>...):
        r.wrong_count("cpu", [a0, a1, a2, a3, a4, a5])
    fill(&r.layout, r.fields, args, <char*>s)
    for i in range(n):
        p[i] = addr(<object>given[i], (r.wmask >> i) & 1, &nbytes)
    if release_gil(nbytes, False):
        with nogil:
            st = r.cpu(s, dtype, p)
    else:
        st = r.cpu(s, dtype, p)
    check(st)


cdef object mps_call(NativeOp r, Device d, object args, int dtype, tuple bufs):
    """Row r's mk_mps_<op> on Buffers of the Metal device d; (gpu_ms, wall_ms)."""
    cdef uint32_t s[_MAX_FIELDS]
    cdef mk_buffer* b[_MAX_ARRAYS]
    cdef mk_timing t
    cdef mk_status st
    cdef int i
    if len(bufs) != r.n:
        r.wrong_count("mps", list(bufs))
    fill(&r.layout, r.fields, args, <char*>s)
    for i in range(r.n):
        b[i] = NULL if bufs[i] is None else (<Buffer?>bufs[i]).ptr
    with nogil:                       # it waits for the GPU: release_gil(0, True)
        st = r.mps(d.ptr, s, dtype, b, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def cpu_run(op, args, int dtype, a0=..., a1=..., a2=..., a3=..., a4=..., a5=...):
    """cpu_run(op, args, dtype, *arrays): op's mk_cpu_<op> kernel on host arrays (C-contiguous;
    None -> NULL) in ABI order; `op` is a row of OPS, its name, or an object with that .name;
    `args` a dict of the argument struct's fields. The GIL: _native.pyx's rule."""
    cpu_call(row_of(op), args, dtype, a0, a1, a2, a3, a4, a5)


def mps_run(op, Device device not None, args, int dtype, *buffers):
    """mps_run(op, device, args, dtype, *buffers): Apple's primitive for op on Buffers of the
    Metal `device` (None -> NULL); returns (gpu_ms, wall_ms)."""
    return mps_call(row_of(op), device, args, dtype, buffers)


cdef tuple _entries(NativeOp r):
    """cpu_<op>, mps_<op>: cpu_run / mps_run with the row bound (plain functions, so Python
    calls them without an argument tuple: the tiny-call overhead)."""
    def cpu(args, int dtype, a0=..., a1=..., a2=..., a3=..., a4=..., a5=...):
        cpu_call(r, args, dtype, a0, a1, a2, a3, a4, a5)

    def mps(Device device not None, args, int dtype, *buffers):
        return mps_call(r, device, args, dtype, buffers)

    for f, call, head in ((cpu, "cpu", "args, dtype"), (mps, "mps", "device, args, dtype")):
        f.__name__ = f.__qualname__ = f"{call}_{r.name}"
        f.__doc__ = f"{call}_{r.name}({head}, {', '.join(r.arrays)}): {call}_run with op {r.name!r}"
    return cpu, mps


cdef tuple _row(args_t* tag, str name, str arrays, str primitive, cpu_fn cpu, mps_fn mps):
    """(cpu_<op>, mps_<op>) of one row; `tag` is a typed NULL naming the argument struct."""
    names = arrays.split()
    fields = []
    cdef NativeOp r = NativeOp.__new__(NativeOp)
    r.layout = _layout(tag, name, fields)
    assert 1 <= len(names) <= _MAX_ARRAYS
    r.name = name
    r.primitive = primitive
    r.fields = tuple(fields)
    r.arrays = tuple([n.rstrip("!") for n in names])
    r.written = tuple([n.endswith("!") for n in names])
    r.n = len(names)
    r.wmask = 0
    for i, n in enumerate(names):     # (no generator expressions in a fused function)
        r.wmask |= (1 << i) if n.endswith("!") else 0
    r.cpu = cpu
    r.mps = mps
    _ROWS[name] = r
    return _entries(r)


# ---------------------------------------------------------------- the table
# one row per kernel family: its struct (a typed NULL), arrays in ABI order ("!": written),
# the mps label, adapters
include "_kernels_rows.pxi"


def pack_args(str kind, dict args):
    """The bytes of an mk_<kind>_args struct, for binding as `constant T&` in a kernel."""
    cdef PyObject* r = PyDict_GetItem(_ROWS, kind)
    if r == NULL:
        raise ValueError(f"pack_args: unknown args kind {kind!r}; one of {', '.join(_ROWS)}")
    return (<NativeOp>r).pack(args)
