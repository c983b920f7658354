// mk_internal.h: what the device implementations (Metal shim, simulator) share behind the
// C ABI. Every handle knows its device; a device knows its implementation's table.
#ifndef MK_INTERNAL_H
#define MK_INTERNAL_H
#include "mpskern.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mk_device_ops {
    mk_device_kind kind;
    void (*device_free)(mk_device *d);
    mk_status (*get_info)(mk_device *d, mk_device_info *out);
    mk_status (*buffer_wrap)(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out);
    mk_status (*buffer_alloc)(mk_device *d, size_t nbytes, mk_buffer **out);
    mk_status (*buffer_sync)(mk_buffer *b);
    void (*buffer_free)(mk_buffer *b);
    mk_status (*library_create)(mk_device *d, const char *source, const char *const *macros,
                                mk_library **out);
    mk_status (*library_load)(mk_device *d, const char *path, mk_library **out);
    void (*library_free)(mk_library *l);
    mk_status (*pipeline_create)(mk_device *d, mk_library *l, const char *name, mk_pipeline **out);
    void (*pipeline_free)(mk_pipeline *p);
    mk_status (*run)(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *t);
    mk_status (*sim_set_options)(mk_device *d, const mk_sim_options *o);
    // a run under mk_run_control (NULL: the implementation runs `run` and ignores it)
    mk_status (*run_ex)(mk_device *d, const mk_dispatch *list, uint32_t n,
                        const mk_run_control *c, mk_timing *t);
} mk_device_ops;

// Handles: the generic part every implementation fills; `impl` is the implementation's
// own object (a bridged Objective-C object on Metal, a C++ object in the simulator).
// pipeline_cap: the simulator's pipeline_max_threads (0 = none); every pipeline of the device
// then allows min(its own maximum, pipeline_cap) threads per threadgroup (mk_pipeline_limits).
struct mk_device { const mk_device_ops *ops; void *impl; uint32_t pipeline_cap; };
struct mk_buffer { mk_device *device; void *impl; void *host; size_t nbytes; int flags; int zero_copy; };
struct mk_library { mk_device *device; void *impl; };
struct mk_pipeline {
    mk_device *device; void *impl;
    uint32_t max_threads, exec_width;
    const char *name;                        // the kernel's (for messages; owned by impl)
    // bytes [[buffer(i)]] needs at least (a `constant T&`: sizeof(T)); 0 = not known.
    // mk_run refuses a shorter binding on every device, before it reaches the kernel.
    uint32_t min_bytes[MK_MAX_BINDINGS];
};

// Each implementation registers itself from a constructor function (Metal: objc/mk_metal*.m,
// simulator: objc/sim/mk_sim.cc), so this generic layer links without either of them
// (objc/check_shim.py links objc/*.m + objc/*.c alone; the Linux build has no Metal shim).
typedef struct mk_device_provider {
    int (*count)(char *why, size_t why_len);
    mk_status (*create)(int index, mk_device **out);
} mk_device_provider;
void mk_register_provider(mk_device_kind kind, const mk_device_provider *p);

// mk_run's binding-size check (mk_device.c), for implementations and tests
mk_status mk_check_binding_sizes(const mk_dispatch *ds);

#ifdef __cplusplus
}
#endif
#endif
