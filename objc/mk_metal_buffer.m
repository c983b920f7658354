// mk_metal_buffer.m: host memory seen by a Metal device. Zero-copy where possible:
// newBufferWithBytesNoCopy needs a page-aligned pointer and a whole number of pages, so the
// enclosing page range is wrapped and the data's offset inside it remembered (mpskern.empty
// hands out page-aligned arrays, offset 0). If Metal refuses (or MPSKERN_ZERO_COPY=0), the
// buffer is a copy that mirrors the host memory around each run (mk_metal_upload/download).
#import "mk_metal.h"

#include <stdlib.h>
#include <string.h>

static mk_status new_handle(mk_device *d, MKMetalBuffer *mb, void *host, size_t nbytes, int flags,
                            int zero_copy, mk_buffer **out) {
    mk_buffer *b = calloc(1, sizeof *b);
    if (!b) return mk_set_error(MK_ERR_NOMEM, "mk_buffer: out of memory");
    b->device = d;
    b->impl = (__bridge_retained void *)mb;
    b->host = host;
    b->nbytes = nbytes;
    b->flags = flags;
    b->zero_copy = zero_copy;
    *out = b;
    return MK_OK;
}

static BOOL zero_copy_allowed(void) {
    const char *e = getenv("MPSKERN_ZERO_COPY");
    return !(e && strcmp(e, "0") == 0);
}

mk_status mk_metal_buffer_wrap(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out) {
    @autoreleasepool {
        if (!out) return mk_set_error(MK_ERR_INVALID, "mk_buffer_wrap: out is NULL");
        *out = NULL;
        if (!host && nbytes) return mk_set_error(MK_ERR_INVALID, "mk_buffer_wrap: host is NULL");
        MKMetalDevice *md = mk_metal_device(d);
        MKMetalBuffer *mb = [MKMetalBuffer new];
        if (nbytes == 0) {
            // Metal has no empty buffers; a tiny one keeps bindings valid and nothing is copied.
            mb.buffer = [md.device newBufferWithLength:16 options:MTLResourceStorageModeShared];
            if (!mb.buffer) return mk_set_error(MK_ERR_NOMEM, "Metal: newBufferWithLength(16) failed");
            return new_handle(d, mb, host, 0, flags, 1, out);
        }
        NSUInteger page = md.pageSize;
        uintptr_t p = (uintptr_t)host;
        uintptr_t base = p & ~(uintptr_t)(page - 1);
        NSUInteger offset = (NSUInteger)(p - base);
        NSUInteger length = (offset + nbytes + page - 1) / page * page;
        if (zero_copy_allowed())
            mb.buffer = [md.device newBufferWithBytesNoCopy:(void *)base length:length
                                                    options:MTLResourceStorageModeShared
                                                deallocator:nil];
        if (mb.buffer) {
            mb.offset = offset;
            return new_handle(d, mb, host, nbytes, flags, 1, out);
        }
        mb.buffer = [md.device newBufferWithLength:nbytes options:MTLResourceStorageModeShared];
        if (!mb.buffer)
            return mk_set_error(MK_ERR_NOMEM, "Metal: newBufferWithLength(%zu) failed", nbytes);
        mb.offset = 0;
        mb.copied = YES;
        return new_handle(d, mb, host, nbytes, flags, 0, out);
    }
}

mk_status mk_metal_buffer_alloc(mk_device *d, size_t nbytes, mk_buffer **out) {
    @autoreleasepool {
        if (!out) return mk_set_error(MK_ERR_INVALID, "mk_buffer_alloc: out is NULL");
        *out = NULL;
        MKMetalDevice *md = mk_metal_device(d);
        MKMetalBuffer *mb = [MKMetalBuffer new];
        mb.buffer = [md.device newBufferWithLength:(nbytes ? nbytes : 16)
                                           options:MTLResourceStorageModeShared];
        if (!mb.buffer) return mk_set_error(MK_ERR_NOMEM, "Metal: newBufferWithLength(%zu) failed", nbytes);
        // Device scratch: nothing mirrors it, its host view is the shared buffer itself.
        return new_handle(d, mb, mb.buffer.contents, nbytes, MK_BUFFER_READ | MK_BUFFER_WRITE, 1, out);
    }
}

mk_status mk_metal_buffer_sync(mk_buffer *b) {
    @autoreleasepool {
        // mk_run and mk_mps_* already copy back after each run; syncing again is harmless.
        mk_metal_download(b);
        return MK_OK;
    }
}

void mk_metal_buffer_free(mk_buffer *b) {
    @autoreleasepool {
        if (b->impl) (void)(__bridge_transfer MKMetalBuffer *)b->impl;
        free(b);
    }
}
