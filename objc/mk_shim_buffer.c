// mk_shim_buffer.c: host memory seen by a Metal device (see mk_shim_host.h): the page range
// zero-copy wraps, copy-mode mirroring, overlap and size checks.
#include "mk_shim_host.h"

#include <stdlib.h>
#include <string.h>

int mk_shim_page_span(const void *host, size_t nbytes, size_t page, mk_page_span *out) {
    memset(out, 0, sizeof *out);
    if (page == 0 || (page & (page - 1)) != 0) return -1;
    uintptr_t p = (uintptr_t)host;
    if (nbytes > UINTPTR_MAX - p) return -1;                 // the data runs past the address space
    uintptr_t base = p & ~(uintptr_t)(page - 1);
    size_t offset = (size_t)(p - base);
    size_t used = offset + nbytes;
    if (used < offset || used > SIZE_MAX - (page - 1)) return -1;
    out->base = base;
    out->offset = offset;
    out->length = (used + page - 1) / page * page;   // base + length - 1 fits: base is page-aligned
    return 0;
}

mk_status mk_shim_page_span_of(const void *host, size_t nbytes, size_t page, mk_page_span *out) {
    if (nbytes == 0) {
        memset(out, 0, sizeof *out);
        return MK_OK;
    }
    if (mk_shim_page_span(host, nbytes, page, out) != 0)
        return mk_set_error(MK_ERR_INVALID, "mk_buffer_wrap: %zu bytes at %p do not fit the address space "
                            "in pages of %zu bytes", nbytes, host, page);
    return MK_OK;
}

size_t mk_shim_alloc_length(size_t nbytes) { return nbytes ? nbytes : 16; }

int mk_shim_zero_copy_allowed(void) {
    const char *e = getenv("MPSKERN_ZERO_COPY");
    return !(e && strcmp(e, "0") == 0);
}

int mk_shim_upload(const mk_buffer *b, int copied, void *device_view) {
    if (!copied || !b->host || !b->nbytes || !(b->flags & MK_BUFFER_READ) || !device_view) return 0;
    memcpy(device_view, b->host, b->nbytes);
    return 1;
}

int mk_shim_download(const mk_buffer *b, int copied, const void *device_view) {
    if (!copied || !b->host || !b->nbytes || !(b->flags & MK_BUFFER_WRITE) || !device_view) return 0;
    memcpy(b->host, device_view, b->nbytes);
    return 1;
}

int mk_shim_overlap(const mk_buffer *a, const mk_buffer *b, int same_storage) {
    if (!a || !b) return 0;
    if (a == b || same_storage) return 1;
    if (!a->host || !b->host || !a->nbytes || !b->nbytes) return 0;
    uintptr_t a0 = (uintptr_t)a->host, b0 = (uintptr_t)b->host;
    return a0 < b0 + b->nbytes && b0 < a0 + a->nbytes;
}

mk_status mk_shim_check_device(const mk_device *d, const char *op) {
    if (!d) return mk_set_error(MK_ERR_INVALID, "%s: device is NULL", op);
    if (d->ops->kind != MK_DEVICE_METAL)
        return mk_set_error(MK_ERR_INVALID, "%s: Apple's MPS primitives need a Metal device, not a simulated one", op);
    return MK_OK;
}

mk_status mk_shim_check_buffer(const mk_device *d, const mk_buffer *b, size_t need, const char *op,
                               const char *what) {
    if (!b) return mk_set_error(MK_ERR_INVALID, "%s: buffer %s is NULL", op, what);
    if (b->device != d)
        return mk_set_error(MK_ERR_INVALID, "%s: buffer %s belongs to another device", op, what);
    if (need == SIZE_MAX)
        return mk_set_error(MK_ERR_INVALID, "%s: the arguments need more bytes of buffer %s than "
                            "the address space holds", op, what);
    if (b->nbytes < need)
        return mk_set_error(MK_ERR_INVALID, "%s: buffer %s holds %zu bytes, the arguments need %zu",
                            op, what, b->nbytes, need);
    return MK_OK;
}
