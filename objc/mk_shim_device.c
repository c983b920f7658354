// mk_shim_device.c: handles and Metal device discovery, the host half (see mk_shim_host.h).
#include "mk_shim_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

mk_status mk_shim_out(void *out, const char *op) {
    if (!out) return mk_set_error(MK_ERR_INVALID, "%s: out is NULL", op);
    *(void **)out = NULL;
    return MK_OK;
}

mk_status mk_shim_device_new(const mk_device_ops *ops, mk_device **out) {
    mk_device *d = calloc(1, sizeof *d);
    if (!d) return mk_set_error(MK_ERR_NOMEM, "mk_device_create: out of memory");
    d->ops = ops;
    *out = d;
    return MK_OK;
}

mk_status mk_shim_buffer_new(mk_device *d, void *host, size_t nbytes, int flags, int zero_copy,
                             mk_buffer **out) {
    mk_buffer *b = calloc(1, sizeof *b);
    if (!b) return mk_set_error(MK_ERR_NOMEM, "mk_buffer: out of memory");
    b->device = d;
    b->host = host;
    b->nbytes = nbytes;
    b->flags = flags;
    b->zero_copy = zero_copy;
    *out = b;
    return MK_OK;
}

mk_status mk_shim_library_new(mk_device *d, mk_library **out) {
    mk_library *l = calloc(1, sizeof *l);
    if (!l) return mk_set_error(MK_ERR_NOMEM, "mk_library_create: out of memory");
    l->device = d;
    *out = l;
    return MK_OK;
}

mk_status mk_shim_pipeline_new(mk_device *d, uint32_t max_threads, uint32_t exec_width, const char *name,
                               mk_pipeline **out) {
    mk_pipeline *p = calloc(1, sizeof *p);
    char *copy = strdup(name ? name : "");
    if (!p || !copy) {
        free(p);
        free(copy);
        return mk_set_error(MK_ERR_NOMEM, "mk_pipeline_create: out of memory");
    }
    p->device = d;
    p->max_threads = max_threads;
    p->exec_width = exec_width;
    p->name = copy;
    *out = p;
    return MK_OK;
}

void mk_shim_pipeline_free(mk_pipeline *p) {
    free((void *)p->name);
    free(p);
}

mk_status mk_shim_wrap_check(const void *host, size_t nbytes) {
    if (!host && nbytes) return mk_set_error(MK_ERR_INVALID, "mk_buffer_wrap: host is NULL");
    return MK_OK;
}

mk_status mk_shim_library_check(const char *source) {
    if (!source) return mk_set_error(MK_ERR_INVALID, "mk_library_create: source is NULL");
    return MK_OK;
}

mk_status mk_shim_pipeline_check(const mk_device *d, const mk_library *l, const char *name) {
    if (!l || l->device != d || !name)
        return mk_set_error(MK_ERR_INVALID, "mk_pipeline_create: needs a library of this device and a kernel name");
    return MK_OK;
}

void mk_shim_fill_info(mk_device_info *out, const char *name, int family, uint32_t max_threads,
                       uint32_t max_tg_memory, uint64_t working_set, int unified, uint32_t page) {
    snprintf(out->name, sizeof out->name, "%s", name ? name : "");
    out->family = family;
    out->is_simulator = 0;
    out->simd_width = 32;
    out->max_threads_per_threadgroup = max_threads;
    out->max_threadgroup_memory = max_tg_memory;
    out->recommended_working_set = working_set;
    out->unified_memory = unified ? 1 : 0;
    out->page_size = page;
}

int mk_shim_min_family(void) {
    const char *e = getenv("MPSKERN_METAL_MIN_FAMILY");
    if (!e || !*e) return 7;
    if (strncasecmp(e, "apple", 5) == 0) e += 5;
    char *end = NULL;
    long f = strtol(e, &end, 10);
    return end && *end == 0 && f >= 5 && f <= 7 ? (int)f : 7;
}

int mk_shim_newest_family(int (*supports)(void *ctx, int family), void *ctx, int lowest) {
    for (int f = 10; f >= lowest; f--)
        if (supports(ctx, f)) return f;
    return 0;
}

const char *mk_shim_family_macro(int family) {
    return family < 7 ? "MK_NO_SIMDGROUP_MATRIX=1" : NULL;
}

void mk_shim_no_device_why(char *why, size_t why_len, int n_all, const char *const *names) {
    if (!why || !why_len) return;
    if (n_all <= 0) {
        snprintf(why, why_len, "no Metal device found (metal needs macOS on Apple silicon)");
        return;
    }
    int n = snprintf(why, why_len, "metal needs an Apple silicon GPU (family Apple7, M1, or newer; "
                     "MPSKERN_METAL_MIN_FAMILY=5 admits Apple5/6 without simdgroup matrices); this Mac has: ");
    for (int i = 0; i < n_all && n >= 0 && (size_t)n < why_len; i++)
        n += snprintf(why + n, why_len - (size_t)n, "%s%s", i ? ", " : "", names[i] ? names[i] : "?");
}
