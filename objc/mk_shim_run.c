// mk_shim_run.c: libraries and dispatch, the host half (see mk_shim_host.h): preprocessor
// macros, Metal's dispatch validation with our messages, how bindings are encoded, and the
// errors and timestamps of every command buffer of a run.
#include "mk_shim_host.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int mk_shim_macro_parse(const char *s, mk_shim_macro *m) {
    memset(m, 0, sizeof *m);
    if (!s || !*s) return 1;
    const char *eq = strchr(s, '=');
    size_t nlen = eq ? (size_t)(eq - s) : strlen(s);
    const char *value = eq ? eq + 1 : "1";
    if (nlen == 0 || nlen >= sizeof m->name || strlen(value) >= sizeof m->value) return -1;
    memcpy(m->name, s, nlen);
    strcpy(m->value, value);
    // decimal integers become NSNumbers (NSScanner's scanLongLong: sign, digits, whole string)
    if (*value) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        int spaces = value[0] == ' ' || value[0] == '\t';
        if (!spaces && end && *end == 0 && errno == 0) {
            m->is_int = 1;
            m->ival = v;
        }
    }
    return 0;
}

mk_status mk_shim_each_macro(const char *const *macros, int (*add)(void *ctx, const mk_shim_macro *m),
                             void *ctx) {
    mk_shim_macro m;
    for (; macros && *macros; macros++) {
        int r = mk_shim_macro_parse(*macros, &m);
        if (r > 0) continue;
        if (r < 0 || add(ctx, &m) != 0)
            return mk_set_error(MK_ERR_INVALID, "mk_library_create: malformed macro '%.200s' (NAME=VALUE, UTF-8)",
                                *macros);
    }
    return MK_OK;
}

int mk_shim_fast_math(void) {
    const char *fm = getenv("MPSKERN_METAL_FAST_MATH");
    return fm && fm[0] == '1';
}

uint32_t mk_shim_tg_length(uint32_t nbytes) {
    return nbytes > UINT32_MAX - 15u ? UINT32_MAX & ~15u : (nbytes + 15u) & ~15u;
}

mk_status mk_shim_check_dispatch(const mk_device *d, const mk_dispatch *x, uint32_t i,
                                 uint64_t static_tg_memory, uint64_t device_tg_memory) {
    const mk_pipeline *p = x->pipeline;
    uint64_t threads = (uint64_t)x->threadgroup[0] * x->threadgroup[1] * x->threadgroup[2];
    if (threads == 0)
        return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u has an empty threadgroup (%u, %u, %u)",
                            i, x->threadgroup[0], x->threadgroup[1], x->threadgroup[2]);
    if (threads > p->max_threads)
        return mk_set_error(MK_ERR_INVALID,
                            "mk_run: dispatch %u asks for %llu threads per threadgroup; this pipeline "
                            "allows at most %u (maxTotalThreadsPerThreadgroup)",
                            i, (unsigned long long)threads, p->max_threads);
    uint64_t mem = static_tg_memory;
    for (int k = 0; k < 4; k++) mem += ((uint64_t)x->threadgroup_memory[k] + 15u) & ~(uint64_t)15u;
    if (mem > device_tg_memory)
        return mk_set_error(MK_ERR_INVALID,
                            "mk_run: dispatch %u needs %llu bytes of threadgroup memory; the device has %llu",
                            i, (unsigned long long)mem, (unsigned long long)device_tg_memory);
    for (uint32_t j = 0; j < x->nbindings; j++) {
        const mk_binding *b = &x->bindings[j];
        if (b->buffer) {
            if (b->buffer->device != d)
                return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u binds a buffer of another device at %u", i, j);
            if (b->offset > b->buffer->nbytes)
                return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u binding %u: offset %llu past the buffer's %zu bytes",
                                    i, j, (unsigned long long)b->offset, b->buffer->nbytes);
        } else if (b->bytes && b->nbytes == 0) {
            return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u binding %u: empty constant data", i, j);
        }
    }
    return MK_OK;
}

mk_status mk_shim_check_dispatches(const mk_device *d, const mk_dispatch *list, uint32_t n,
                                   uint64_t (*static_tg)(void *ctx, const mk_pipeline *p), void *ctx,
                                   uint64_t device_tg_memory) {
    for (uint32_t i = 0; i < n; i++) {
        mk_status st = mk_shim_check_dispatch(d, &list[i], i, static_tg(ctx, list[i].pipeline), device_tg_memory);
        if (st != MK_OK) return st;
    }
    return MK_OK;
}

mk_bind_kind mk_shim_bind_kind(const mk_binding *b) {
    if (b->buffer) return MK_BIND_BUFFER;
    if (!b->bytes) return MK_BIND_NONE;
    return b->nbytes <= MK_SETBYTES_MAX ? MK_BIND_BYTES : MK_BIND_TEMP;
}

int mk_shim_dispatch_empty(const mk_dispatch *x) {
    return !x->grid[0] || !x->grid[1] || !x->grid[2];
}

mk_status mk_shim_encode(const mk_dispatch *list, uint32_t n, const mk_shim_encoder *e) {
    for (uint32_t i = 0; i < n; i++) {
        const mk_dispatch *x = &list[i];
        if (mk_shim_dispatch_empty(x)) continue;            // nothing to run
        e->pipeline(e->ctx, x->pipeline);
        for (uint32_t j = 0; j < x->nbindings; j++) {
            const mk_binding *b = &x->bindings[j];
            switch (mk_shim_bind_kind(b)) {
            case MK_BIND_BUFFER: e->buffer(e->ctx, j, b->buffer, b->offset); break;
            case MK_BIND_BYTES: e->bytes(e->ctx, j, b->bytes, b->nbytes); break;
            case MK_BIND_TEMP:
                if (e->temp(e->ctx, j, b->bytes, b->nbytes) != 0)
                    return mk_set_error(MK_ERR_NOMEM, "Metal: constant buffer of %u bytes", b->nbytes);
                break;
            case MK_BIND_NONE: break;
            }
        }
        for (uint32_t k = 0; k < 4; k++)
            if (x->threadgroup_memory[k]) e->tg_memory(e->ctx, k, mk_shim_tg_length(x->threadgroup_memory[k]));
        e->dispatch(e->ctx, x->grid, x->threadgroup, x->grid_units);
    }
    return MK_OK;
}

void mk_shim_each_bound_buffer(const mk_dispatch *list, uint32_t n, void (*f)(mk_buffer *)) {
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < list[i].nbindings; j++)
            if (list[i].bindings[j].buffer) f(list[i].bindings[j].buffer);
}

void mk_shim_each(mk_buffer *const *b, int n, void (*f)(mk_buffer *)) {
    for (int i = 0; i < n; i++)
        if (b[i]) f(b[i]);
}

void mk_shim_set_wall(mk_timing *t, double t0_ms) {
    if (t) t->wall_ms = mk_shim_now_ms() - t0_ms;
}

void mk_cb_errors_init(mk_cb_errors *e) {
    memset(e, 0, sizeof *e);
    e->gpu_start = -1;
}

void mk_cb_errors_add(mk_cb_errors *e, int failed, const char *message, double gpu_start, double gpu_end) {
    e->count++;
    if (gpu_start > 0 && (e->gpu_start < 0 || gpu_start < e->gpu_start)) e->gpu_start = gpu_start;
    if (gpu_end > e->gpu_end) e->gpu_end = gpu_end;
    if (!failed) return;
    const char *m = message && *message ? message : "(no message)";
    if (e->failed && strstr(e->msg, m)) {         // one message once (a failure repeats downstream)
        e->failed++;
        return;
    }
    size_t n = strlen(e->msg);
    snprintf(e->msg + n, sizeof e->msg - n, "%s%s", e->failed ? "; " : "", m);
    e->failed++;
}

mk_status mk_cb_errors_finish(const mk_cb_errors *e, const char *op, double t0_ms, mk_timing *t) {
    if (t) t->wall_ms = mk_shim_now_ms() - t0_ms;
    if (e->failed)
        return mk_set_error(MK_ERR_RUNTIME, "%s: Metal command buffer failed (%d of %d): %s", op,
                            e->failed, e->count, e->msg);
    if (t) t->gpu_ms = e->gpu_start > 0 && e->gpu_end >= e->gpu_start ? (e->gpu_end - e->gpu_start) * 1e3 : 0;
    return MK_OK;
}

double mk_shim_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
