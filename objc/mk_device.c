// mk_device.c: the device-generic half of the C ABI: routes each call to the
// implementation (Metal or simulator) that owns the handle.
#include "mk_internal.h"
#include <string.h>

#include <stdio.h>

static const mk_device_provider *providers[3];

void mk_register_provider(mk_device_kind kind, const mk_device_provider *p) {
    if ((int)kind >= 1 && (int)kind <= 2) providers[kind] = p;
}

static const char *kind_name(mk_device_kind kind) {
    return kind == MK_DEVICE_METAL ? "metal" : kind == MK_DEVICE_SIM ? "sim" : "?";
}

int mk_device_count(mk_device_kind kind, char *why, size_t why_len) {
    if (why && why_len) why[0] = 0;
    if ((int)kind < 1 || (int)kind > 2 || !providers[kind]) {
        if (why && why_len)
            snprintf(why, why_len, "this build of mpskern has no %s device implementation%s",
                     kind_name(kind), kind == MK_DEVICE_METAL ? " (the Metal shim is built on macOS only)" : "");
        return 0;
    }
    return providers[kind]->count(why, why_len);
}

mk_status mk_device_create(mk_device_kind kind, int index, mk_device **out) {
    if (!out) return mk_set_error(MK_ERR_INVALID, "mk_device_create: out is NULL");
    *out = NULL;
    char why[256];
    if (mk_device_count(kind, why, sizeof why) <= index || index < 0)
        return mk_set_error(MK_ERR_UNAVAILABLE, "no %s device %d: %s", kind_name(kind), index,
                            why[0] ? why : "index out of range");
    return providers[kind]->create(index, out);
}

void mk_device_free(mk_device *d) { if (d) d->ops->device_free(d); }

mk_status mk_device_get_info(mk_device *d, mk_device_info *out) {
    memset(out, 0, sizeof *out);
    return d->ops->get_info(d, out);
}

mk_status mk_buffer_wrap(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out) {
    return d->ops->buffer_wrap(d, host, nbytes, flags, out);
}
mk_status mk_buffer_alloc(mk_device *d, size_t nbytes, mk_buffer **out) {
    return d->ops->buffer_alloc(d, nbytes, out);
}
int mk_buffer_is_zero_copy(const mk_buffer *b) { return b ? b->zero_copy : 0; }
mk_status mk_buffer_sync(mk_buffer *b) { return b->device->ops->buffer_sync(b); }
void mk_buffer_free(mk_buffer *b) { if (b) b->device->ops->buffer_free(b); }

mk_status mk_library_create(mk_device *d, const char *source, const char *const *macros,
                            mk_library **out) {
    return d->ops->library_create(d, source, macros, out);
}
mk_status mk_library_load(mk_device *d, const char *path, mk_library **out) {
    return d->ops->library_load(d, path, out);
}
void mk_library_free(mk_library *l) { if (l) l->device->ops->library_free(l); }

mk_status mk_pipeline_create(mk_device *d, mk_library *l, const char *name, mk_pipeline **out) {
    return d->ops->pipeline_create(d, l, name, out);
}
// A pipeline's maxTotalThreadsPerThreadgroup: its own, or the device's pipeline cap if lower.
static uint32_t pipeline_max(const mk_pipeline *p) {
    uint32_t cap = p->device->pipeline_cap;
    return cap && cap < p->max_threads ? cap : p->max_threads;
}

mk_status mk_pipeline_limits(mk_pipeline *p, uint32_t *max_threads, uint32_t *exec_width) {
    if (max_threads) *max_threads = pipeline_max(p);
    if (exec_width) *exec_width = p->exec_width;
    return MK_OK;
}
void mk_pipeline_free(mk_pipeline *p) { if (p) p->device->ops->pipeline_free(p); }

// A binding shorter than its parameter needs (a `constant T&` bound with fewer than
// sizeof(T) bytes) would be read out of bounds by the kernel: refused on every device.
mk_status mk_check_binding_sizes(const mk_dispatch *ds) {
    const mk_pipeline *p = ds->pipeline;
    for (uint32_t i = 0; i < ds->nbindings; i++) {
        const mk_binding *b = &ds->bindings[i];
        uint64_t have;
        if (b->buffer)
            have = b->offset <= b->buffer->nbytes ? b->buffer->nbytes - b->offset : 0;
        else if (b->bytes)
            have = b->nbytes;
        else
            continue;
        if (p->min_bytes[i] && have < p->min_bytes[i])
            return mk_set_error(MK_ERR_INVALID, "kernel '%s': [[buffer(%u)]] is a constant reference "
                                "to %u bytes; %llu bytes are bound", p->name ? p->name : "?", i,
                                p->min_bytes[i], (unsigned long long)have);
    }
    return MK_OK;
}

mk_status mk_run(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *t) {
    return mk_run_ex(d, list, n, NULL, t);
}

mk_status mk_run_ex(mk_device *d, const mk_dispatch *list, uint32_t n, const mk_run_control *c,
                    mk_timing *t) {
    mk_timing dummy;
    if (!t) t = &dummy;
    t->gpu_ms = t->wall_ms = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!list[i].pipeline || list[i].pipeline->device != d)
            return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u has no pipeline of this device", i);
        if (list[i].nbindings > MK_MAX_BINDINGS)
            return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u has %u bindings (max %d)",
                                i, list[i].nbindings, MK_MAX_BINDINGS);
        // thread positions are 32-bit uints in MSL: a grid dimension holds < 2^32 threads
        // (in 64 bits: threadgroups x threads overflowed uint32 into a grid of nothing)
        for (int k = 0; k < 3; k++) {
            uint64_t g = list[i].grid[k], tg = list[i].threadgroup[k];
            uint64_t threads = list[i].grid_units == MK_GRID_THREADS ? g : g * tg;
            if (threads > UINT32_MAX)
                return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u: %llu threadgroups of %llu "
                                    "threads make %llu threads along %c; thread positions are "
                                    "32-bit uints in MSL, at most 4294967295 per grid dimension", i,
                                    (unsigned long long)g, (unsigned long long)tg,
                                    (unsigned long long)threads, "xyz"[k]);
        }
        // the cap here; the pipeline's own limit is the implementation's to report (the simulator
        // names the kernel's [[max_total_threads_per_threadgroup]], Metal its pipeline)
        uint64_t threads = (uint64_t)list[i].threadgroup[0] * list[i].threadgroup[1] * list[i].threadgroup[2];
        if (pipeline_max(list[i].pipeline) < list[i].pipeline->max_threads && threads > pipeline_max(list[i].pipeline))
            return mk_set_error(MK_ERR_INVALID, "kernel '%s': threadgroup (%u,%u,%u) has %llu threads; the pipeline "
                                "allows %u (maxTotalThreadsPerThreadgroup)", list[i].pipeline->name ?
                                list[i].pipeline->name : "?", list[i].threadgroup[0], list[i].threadgroup[1],
                                list[i].threadgroup[2], (unsigned long long)threads, pipeline_max(list[i].pipeline));
        mk_status st = mk_check_binding_sizes(&list[i]);
        if (st != MK_OK) return st;
    }
    if (d->ops->run_ex) return d->ops->run_ex(d, list, n, c, t);
    if (c && c->time_limit_s > 0)
        return mk_set_error(MK_ERR_UNSUPPORTED, "mk_run: a time limit is a simulator option; on "
                            "%s the GPU's own watchdog ends runaway command buffers",
                            kind_name(d->ops->kind));
    return d->ops->run(d, list, n, t);
}

mk_status mk_sim_set_options(mk_device *d, const mk_sim_options *o) {
    if (!d->ops->sim_set_options)
        return mk_set_error(MK_ERR_UNSUPPORTED, "simulator options on a non-simulator device");
    mk_status st = d->ops->sim_set_options(d, o);
    if (st == MK_OK) d->pipeline_cap = o->pipeline_max_threads;
    return st;
}
