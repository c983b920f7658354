// mk_metal_buffer.m: host memory seen by a Metal device. Zero-copy where possible:
// newBufferWithBytesNoCopy needs a page-aligned pointer and a whole number of pages, so the
// enclosing page range is wrapped and the data's offset inside it remembered
// (mk_shim_page_span; mpskern.empty hands out page-aligned arrays, offset 0). If Metal
// refuses (or MPSKERN_ZERO_COPY=0), the buffer is a copy that mirrors the host memory
// around each run (mk_metal_upload/download).
#import "mk_metal.h"

#include <stdlib.h>

// A handle owning `mb`.
static mk_status new_handle(mk_device *d, MKMetalBuffer *mb, void *host, size_t nbytes, int flags,
                            int zero_copy, mk_buffer **out) {
    mk_status st = mk_shim_buffer_new(d, host, nbytes, flags, zero_copy, out);
    if (st == MK_OK) (*out)->impl = (__bridge_retained void *)mb;
    return st;
}

mk_status mk_metal_buffer_wrap(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out) {
    return mk_objc_guard("mk_buffer_wrap", ^mk_status {
        mk_status st;
        if ((st = mk_shim_out(out, "mk_buffer_wrap")) != MK_OK || (st = mk_shim_wrap_check(host, nbytes)) != MK_OK)
            return st;
        MKMetalDevice *md = mk_metal_device(d);
        MKMetalBuffer *mb = [MKMetalBuffer new];
        mk_page_span span;
        if ((st = mk_shim_page_span_of(host, nbytes, md.pageSize, &span)) != MK_OK) return st;
        if (!span.length) {
            // Metal has no empty buffers; a tiny one keeps bindings valid and nothing is copied.
            mb.buffer = [md.device newBufferWithLength:16 options:MTLResourceStorageModeShared];
            if (!mb.buffer) return mk_set_error(MK_ERR_NOMEM, "Metal: newBufferWithLength(16) failed");
            return new_handle(d, mb, host, 0, flags, 1, out);
        }
        if (mk_shim_zero_copy_allowed())
            mb.buffer = [md.device newBufferWithBytesNoCopy:(void *)span.base length:span.length
                                                    options:MTLResourceStorageModeShared
                                                deallocator:nil];
        if (mb.buffer) {
            mb.offset = span.offset;
            return new_handle(d, mb, host, nbytes, flags, 1, out);
        }
        mb.buffer = [md.device newBufferWithLength:nbytes options:MTLResourceStorageModeShared];
        if (!mb.buffer)
            return mk_set_error(MK_ERR_NOMEM, "Metal: newBufferWithLength(%zu) failed", nbytes);
        mb.offset = 0;
        mb.copied = YES;
        return new_handle(d, mb, host, nbytes, flags, 0, out);
    });
}

mk_status mk_metal_buffer_alloc(mk_device *d, size_t nbytes, mk_buffer **out) {
    return mk_objc_guard("mk_buffer_alloc", ^mk_status {
        mk_status st = mk_shim_out(out, "mk_buffer_alloc");
        if (st != MK_OK) return st;
        MKMetalDevice *md = mk_metal_device(d);
        MKMetalBuffer *mb = [MKMetalBuffer new];
        mb.buffer = [md.device newBufferWithLength:mk_shim_alloc_length(nbytes)
                                           options:MTLResourceStorageModeShared];
        if (!mb.buffer) return mk_set_error(MK_ERR_NOMEM, "Metal: newBufferWithLength(%zu) failed", nbytes);
        // Device scratch: nothing mirrors it, its host view is the shared buffer itself.
        return new_handle(d, mb, mb.buffer.contents, nbytes, MK_BUFFER_READ | MK_BUFFER_WRITE, 1, out);
    });
}

mk_status mk_metal_buffer_sync(mk_buffer *b) {
    return mk_objc_guard("mk_buffer_sync", ^mk_status {
        // mk_run and mk_mps_* already copy back after each run; syncing again is harmless.
        mk_metal_download(b);
        return MK_OK;
    });
}

void mk_metal_buffer_free(mk_buffer *b) {
    mk_objc_release(b->impl, "mk_buffer_free");
    free(b);
}
