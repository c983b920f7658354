# _abi.pxd: Cython's view of the C ABI (objc/mpskern.h, metal/mk_args.h) but for the kernel
# families: their structs and mk_cpu_/mk_mps_ entry points are _kernels.pxi, written by setup.py
# from mk_args.h's MK_KERNELS list. Keep in step (tests/test_abi_drift.py fails on any drift).
from libc.stdint cimport uint32_t, uint64_t, int32_t, int64_t

cdef extern from "mk_args.h":
    int MK_F32, MK_F16

cdef extern from "mpskern.h" nogil:
    int MK_ABI_VERSION
    ctypedef enum mk_status:
        MK_OK, MK_ERR_INVALID, MK_ERR_UNAVAILABLE, MK_ERR_COMPILE, MK_ERR_RUNTIME,
        MK_ERR_NOMEM, MK_ERR_CHECK, MK_ERR_UNSUPPORTED, MK_ERR_INTERRUPTED
    const char *mk_last_error()

    void mk_cpu_set_num_threads(int n)
    int mk_cpu_get_num_threads()

    ctypedef enum mk_device_kind:
        MK_DEVICE_METAL, MK_DEVICE_SIM
    ctypedef struct mk_device:
        pass
    ctypedef struct mk_buffer:
        pass
    ctypedef struct mk_library:
        pass
    ctypedef struct mk_pipeline:
        pass
    ctypedef struct mk_device_info:
        char name[128]
        char architecture[64]
        int family, is_simulator, simd_width
        uint32_t max_threads_per_threadgroup, max_threadgroup_memory
        uint64_t recommended_working_set
        int unified_memory
        uint32_t page_size
    int mk_device_count(mk_device_kind kind, char *why, size_t why_len)
    mk_status mk_device_create(mk_device_kind kind, int index, mk_device **out)
    void mk_device_free(mk_device *d)
    mk_status mk_device_get_info(mk_device *d, mk_device_info *out)

    int MK_BUFFER_READ, MK_BUFFER_WRITE
    mk_status mk_buffer_wrap(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out)
    mk_status mk_buffer_alloc(mk_device *d, size_t nbytes, mk_buffer **out)
    int mk_buffer_is_zero_copy(const mk_buffer *b)
    mk_status mk_buffer_sync(mk_buffer *b)
    void mk_buffer_free(mk_buffer *b)
    mk_status mk_guarded_alloc(size_t nbytes, void **out)
    void mk_guarded_free(void *p)

    mk_status mk_library_create(mk_device *d, const char *source, const char *const *macros,
                                mk_library **out)
    mk_status mk_library_load(mk_device *d, const char *compiled_path, mk_library **out)
    void mk_library_free(mk_library *l)
    mk_status mk_pipeline_create(mk_device *d, mk_library *l, const char *kernel_name,
                                 mk_pipeline **out)
    mk_status mk_pipeline_limits(mk_pipeline *p, uint32_t *max_threads, uint32_t *exec_width)
    void mk_pipeline_free(mk_pipeline *p)

    enum: MK_MAX_BINDINGS
    ctypedef struct mk_binding:
        mk_buffer *buffer
        uint64_t offset
        const void *bytes
        uint32_t nbytes
    int MK_GRID_THREADGROUPS, MK_GRID_THREADS
    ctypedef struct mk_dispatch:
        mk_pipeline *pipeline
        uint32_t grid[3]
        uint32_t threadgroup[3]
        int grid_units
        uint32_t threadgroup_memory[4]
        uint32_t nbindings
        mk_binding bindings[MK_MAX_BINDINGS]
    ctypedef struct mk_timing:
        double gpu_ms, wall_ms
    mk_status mk_run(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *timing)
    ctypedef struct mk_run_control:
        double time_limit_s
        int interruptible
    mk_status mk_run_ex(mk_device *d, const mk_dispatch *list, uint32_t n,
                        const mk_run_control *c, mk_timing *timing)

    int MK_ORDER_FORWARD, MK_ORDER_REVERSE, MK_ORDER_RANDOM
    ctypedef struct mk_sim_options:
        int check, order
        uint64_t seed
        int workers, family
        uint32_t max_threadgroup_memory, max_threads_per_threadgroup
        double time_limit_s
        uint32_t pipeline_max_threads
    mk_status mk_sim_set_options(mk_device *d, const mk_sim_options *o)
    ctypedef struct mk_sim_profile_options:
        uint32_t max_groups
        int32_t sampled_only
        uint32_t banks, bank_bytes, line_bytes
    mk_status mk_sim_profile_begin(mk_device *d, const mk_sim_profile_options *o)
    mk_status mk_sim_profile_end(mk_device *d, char *json, size_t cap, size_t *needed)
