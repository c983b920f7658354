# _native_gpu.pxi (included by _native.pyx): GPU devices (Metal, simulator), buffers,
# libraries, pipelines and dispatch through the device-generic part of the C ABI.
cimport cython
from libc.stdlib cimport malloc, free
import math as _math
import signal as _signal
import threading as _threading

_KINDS = {"metal": MK_DEVICE_METAL, "sim": MK_DEVICE_SIM}
_ORDERS = {"forward": MK_ORDER_FORWARD, "reverse": MK_ORDER_REVERSE, "random": MK_ORDER_RANDOM}


def device_count(str kind):
    """(number of devices of `kind`, reason when 0)."""
    cdef char why[512]
    n = mk_device_count(<mk_device_kind>_KINDS[kind], why, sizeof(why))
    return n, why.decode("utf-8", "replace")


cdef class Device:
    """A Metal GPU or a simulated one (kind "metal" / "sim")."""
    cdef mk_device* ptr
    cdef readonly str kind
    cdef dict _info

    def __cinit__(self, str kind, int index=0):
        if kind not in _KINDS:
            raise ValueError(f"unknown device kind {kind!r}; expected one of {sorted(_KINDS)}")
        self.kind = kind
        check(mk_device_create(<mk_device_kind>_KINDS[kind], index, &self.ptr))

    def __dealloc__(self):
        if self.ptr != NULL:
            mk_device_free(self.ptr)
            self.ptr = NULL

    def info(self):
        cdef mk_device_info i
        check(mk_device_get_info(self.ptr, &i))
        return dict(name=i.name.decode("utf-8", "replace"),
                    architecture=i.architecture.decode("utf-8", "replace"),
                    family=i.family, is_simulator=bool(i.is_simulator), simd_width=i.simd_width,
                    max_threads_per_threadgroup=i.max_threads_per_threadgroup,
                    max_threadgroup_memory=i.max_threadgroup_memory,
                    recommended_working_set=i.recommended_working_set,
                    unified_memory=bool(i.unified_memory), page_size=i.page_size)

    def set_sim_options(self, *, bint check_mode=False, str order="forward", uint64_t seed=0,
                        int workers=0, int family=0, uint32_t max_threadgroup_memory=0,
                        uint32_t max_threads_per_threadgroup=0, time_limit=None,
                        uint32_t pipeline_max_threads=0):
        """time_limit: seconds after which every run stops (KernelError), None for none."""
        cdef mk_sim_options o
        if order not in _ORDERS:
            raise ValueError(f"order must be one of {sorted(_ORDERS)}, got {order!r}")
        o.time_limit_s = _seconds(time_limit)
        o.check = check_mode
        o.order = _ORDERS[order]
        o.seed = seed
        o.workers = workers
        o.family = family
        o.max_threadgroup_memory = max_threadgroup_memory
        o.max_threads_per_threadgroup = max_threads_per_threadgroup
        o.pipeline_max_threads = pipeline_max_threads
        check(mk_sim_set_options(self.ptr, &o))

    def sim_profile_begin(self, *, uint32_t max_groups=0, bint sampled_only=False,
                          uint32_t banks=32, uint32_t bank_bytes=4, uint32_t line_bytes=128):
        """Simulator profiling mode on (objc/sim/profile.cc): every later dispatch of a
        library built with profile=True is counted until sim_profile_end()."""
        cdef mk_sim_profile_options o
        o.max_groups = max_groups
        o.sampled_only = sampled_only
        o.banks = banks
        o.bank_bytes = bank_bytes
        o.line_bytes = line_bytes
        check(mk_sim_profile_begin(self.ptr, &o))

    def sim_profile_end(self):
        """Profiling mode off; the reports of the dispatches since sim_profile_begin (a JSON
        array, one object per dispatch)."""
        cdef size_t need = 0
        cdef char* buf
        check(mk_sim_profile_end(self.ptr, NULL, 0, &need))
        while True:
            buf = <char*>malloc(need)
            if buf == NULL:
                raise MemoryError("sim_profile_end: no memory for the report")
            try:
                cap = need
                check(mk_sim_profile_end(self.ptr, buf, cap, &need))
                if need <= cap:
                    return buf[:need - 1].decode("utf-8", "replace")
            finally:
                free(buf)

    def wrap(self, array, bint writable=False):
        """A device view of a C-contiguous array (zero-copy where the device can)."""
        return Buffer._wrap(self, array, writable)

    def alloc(self, size_t nbytes):
        """Device scratch memory."""
        return Buffer._alloc(self, nbytes)

    def library_from_source(self, str source, dict macros=None):
        """Compile MSL source at run time (Metal); macros are NAME -> value."""
        return Library._from_source(self, source, macros or {})

    def library_load(self, str path):
        """Load a library the simulator's front-end built (a shared object)."""
        return Library._load(self, path)

    def run(self, list dispatches, time_limit=None):
        """Encode the dispatches in one command buffer, run them in order and wait.
        Each is a dict: pipeline, grid, threadgroup, bindings (Buffer, (Buffer, offset) or
        bytes per [[buffer(i)]]), grid_units ("threadgroups" default, or "threads"),
        threadgroup_memory (bytes per [[threadgroup(i)]]). Returns (gpu_ms, wall_ms).
        Simulator: time_limit (seconds) stops the run (KernelError), and Ctrl-C stops it
        (KeyboardInterrupt) when called from the main thread under Python's default
        SIGINT handler."""
        cdef uint32_t n = len(dispatches)
        cdef mk_dispatch* list_ = <mk_dispatch*>malloc(max(n, 1) * sizeof(mk_dispatch))
        cdef mk_timing t
        cdef mk_status st
        cdef mk_run_control ctl
        ctl.time_limit_s = _seconds(time_limit)
        ctl.interruptible = (_signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
                             and _threading.current_thread() is _threading.main_thread())
        cdef Pipeline p
        cdef Buffer b
        keep = []
        if list_ == NULL:
            raise MemoryError()
        try:
            memset(list_, 0, max(n, 1) * sizeof(mk_dispatch))
            for k, d in enumerate(dispatches):
                p = d["pipeline"]
                list_[k].pipeline = p.ptr
                grid = tuple(d["grid"]) + (1,) * (3 - len(d["grid"]))
                tg = tuple(d["threadgroup"]) + (1,) * (3 - len(d["threadgroup"]))
                for j in range(3):
                    list_[k].grid[j] = grid[j]
                    list_[k].threadgroup[j] = tg[j]
                units = d.get("grid_units", "threadgroups")
                if units not in ("threadgroups", "threads"):
                    raise ValueError(f"grid_units must be 'threadgroups' or 'threads', got {units!r}")
                list_[k].grid_units = MK_GRID_THREADS if units == "threads" else MK_GRID_THREADGROUPS
                tgm = list(d.get("threadgroup_memory", ()))
                if len(tgm) > 4:
                    raise ValueError("at most 4 [[threadgroup(i)]] allocations")
                for j, v in enumerate(tgm):
                    list_[k].threadgroup_memory[j] = v
                binds = d["bindings"]
                if len(binds) > MK_MAX_BINDINGS:
                    raise ValueError(f"{len(binds)} buffers bound; at most {MK_MAX_BINDINGS}")
                list_[k].nbindings = len(binds)
                for j, v in enumerate(binds):
                    if v is None:
                        continue
                    if isinstance(v, (bytes, bytearray)):
                        keep.append(v)
                        list_[k].bindings[j].bytes = <const char*>v
                        list_[k].bindings[j].nbytes = len(v)
                    elif isinstance(v, tuple):
                        b = v[0]
                        list_[k].bindings[j].buffer = b.ptr
                        list_[k].bindings[j].offset = v[1]
                    else:
                        b = v
                        list_[k].bindings[j].buffer = b.ptr
            with nogil:               # it waits for the device: release_gil(0, True)
                st = mk_run_ex(self.ptr, list_, n, &ctl, &t)
            check(st)
            return t.gpu_ms, t.wall_ms
        finally:
            free(list_)


def _seconds(v):
    """A time limit in seconds: None or 0 for none, else a finite positive number."""
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise TypeError(f"time_limit must be a number of seconds or None, got {v!r}")
    s = float(v)
    if not (0 <= s < 1e9) or _math.isnan(s):
        raise ValueError(f"time_limit must be a finite number of seconds >= 0 (0 or None: "
                         f"no limit), got {v!r}")
    return s


cdef extern from "unistd.h" nogil:
    long sysconf(int name)
    int _SC_PAGESIZE


cdef size_t mk_page_size():
    return <size_t>sysconf(_SC_PAGESIZE)


cdef class GuardedMemory:
    """Page-aligned memory between inaccessible guard regions (mk_guarded_alloc): `span`
    bytes (whole pages) as a writable buffer numpy can view (mpskern.empty), of which the
    first `nbytes` are the array's (the simulator watches the rest for stray writes).
    Metal and the simulator use it without a copy; a stray access next to it faults."""
    cdef void* ptr
    cdef readonly size_t nbytes, span

    def __cinit__(self, size_t nbytes, size_t span):
        if span < nbytes or span % mk_page_size():
            raise ValueError(f"span {span} must be whole pages holding nbytes {nbytes}")
        check(mk_guarded_alloc(nbytes, &self.ptr))
        self.nbytes, self.span = nbytes, span

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.ptr, <Py_ssize_t>self.span, 0, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def __dealloc__(self):
        mk_guarded_free(self.ptr)


# no_gc_clear: the GC must not drop .device/.library before __dealloc__ frees the
# handle through them (the handle's device is used to free it).
@cython.no_gc_clear
cdef class Buffer:
    cdef mk_buffer* ptr
    cdef readonly Device device
    cdef readonly object array       # keeps the host memory alive
    cdef readonly size_t nbytes

    @staticmethod
    cdef Buffer _wrap(Device dev, object array, bint writable):
        cdef Buffer b = Buffer.__new__(Buffer)
        b.device = dev
        b.array = array
        b.nbytes = array.nbytes
        cdef void* p = addr(array, writable, NULL)
        flags = MK_BUFFER_READ | (MK_BUFFER_WRITE if writable else 0)
        check(mk_buffer_wrap(dev.ptr, p, b.nbytes, flags, &b.ptr))
        return b

    @staticmethod
    cdef Buffer _alloc(Device dev, size_t nbytes):
        cdef Buffer b = Buffer.__new__(Buffer)
        b.device = dev
        b.nbytes = nbytes
        check(mk_buffer_alloc(dev.ptr, nbytes, &b.ptr))
        return b

    @property
    def zero_copy(self):
        return bool(mk_buffer_is_zero_copy(self.ptr))

    def sync(self):
        """Make the device's writes visible in the wrapped array."""
        cdef mk_status st
        if release_gil(self.nbytes, False):      # a copy-mode buffer copies nbytes back
            with nogil:
                st = mk_buffer_sync(self.ptr)
        else:
            st = mk_buffer_sync(self.ptr)
        check(st)

    def __dealloc__(self):
        if self.ptr != NULL:
            mk_buffer_free(self.ptr)
            self.ptr = NULL


@cython.no_gc_clear
cdef class Library:
    cdef mk_library* ptr
    cdef readonly Device device

    @staticmethod
    cdef Library _from_source(Device dev, str source, dict macros):
        cdef Library l = Library.__new__(Library)
        cdef const char* csrc
        cdef mk_status st
        l.device = dev
        enc = [f"{k}={v}".encode() for k, v in macros.items()]
        cdef const char** m = <const char**>malloc((len(enc) + 1) * sizeof(char*))
        if m == NULL:
            raise MemoryError()
        try:
            for i, s in enumerate(enc):
                m[i] = s
            m[len(enc)] = NULL
            src = source.encode()
            csrc = src
            with nogil:               # Metal compiles the source: release_gil(0, True)
                st = mk_library_create(dev.ptr, csrc, m, &l.ptr)
            check(st)
        finally:
            free(m)
        return l

    @staticmethod
    cdef Library _load(Device dev, str path):
        cdef Library l = Library.__new__(Library)
        cdef mk_status st
        l.device = dev
        enc = path.encode()
        cdef const char* cpath = enc
        with nogil:                   # dlopen runs the library's initialisers: release_gil(0, True)
            st = mk_library_load(dev.ptr, cpath, &l.ptr)
        check(st)
        return l

    def pipeline(self, str name):
        return Pipeline._create(self, name)

    def __dealloc__(self):
        if self.ptr != NULL:
            mk_library_free(self.ptr)
            self.ptr = NULL


@cython.no_gc_clear
cdef class Pipeline:
    cdef mk_pipeline* ptr
    cdef readonly Library library
    cdef readonly str name

    @staticmethod
    cdef Pipeline _create(Library lib, str name):
        cdef Pipeline p = Pipeline.__new__(Pipeline)
        cdef mk_status st
        p.library = lib
        p.name = name
        enc = name.encode()
        cdef const char* cname = enc
        cdef mk_device* dev = lib.device.ptr
        with nogil:                   # Metal builds the pipeline state: release_gil(0, True)
            st = mk_pipeline_create(dev, lib.ptr, cname, &p.ptr)
        check(st)
        return p

    @property
    def max_threads(self):
        cdef uint32_t mt, ew
        mk_pipeline_limits(self.ptr, &mt, &ew)
        return mt

    @property
    def exec_width(self):
        cdef uint32_t mt, ew
        mk_pipeline_limits(self.ptr, &mt, &ew)
        return ew

    def __dealloc__(self):
        if self.ptr != NULL:
            mk_pipeline_free(self.ptr)
            self.ptr = NULL
