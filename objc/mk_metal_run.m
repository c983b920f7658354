// mk_metal_run.m: run-time compilation of MSL source (newLibraryWithSource:options: with
// preprocessor macros), compute pipelines, and dispatch lists encoded into one command
// buffer with one compute encoder, timed by the command buffer's GPU timestamps.
#import "mk_metal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- libraries */

// "NAME=VALUE" -> NAME: VALUE (an NSNumber when VALUE is an integer, else the string);
// "NAME" alone means NAME=1, as -DNAME does.
static NSDictionary<NSString *, NSObject *> *macro_dict(const char *const *macros) {
    NSMutableDictionary<NSString *, NSObject *> *m = [NSMutableDictionary dictionary];
    for (; macros && *macros; macros++) {
        NSString *s = [NSString stringWithUTF8String:*macros];
        if (!s.length) continue;
        NSRange eq = [s rangeOfString:@"="];
        NSString *name = eq.location == NSNotFound ? s : [s substringToIndex:eq.location];
        NSString *value = eq.location == NSNotFound ? @"1" : [s substringFromIndex:eq.location + 1];
        NSScanner *sc = [NSScanner scannerWithString:value];
        long long iv = 0;
        BOOL integral = [sc scanLongLong:&iv] && sc.isAtEnd;
        m[name] = integral ? @(iv) : value;
    }
    return m;
}

mk_status mk_metal_library_create(mk_device *d, const char *source, const char *const *macros,
                                  mk_library **out) {
    @autoreleasepool {
        if (!out) return mk_set_error(MK_ERR_INVALID, "mk_library_create: out is NULL");
        *out = NULL;
        if (!source) return mk_set_error(MK_ERR_INVALID, "mk_library_create: source is NULL");
        NSString *src = [NSString stringWithUTF8String:source];
        if (!src) return mk_set_error(MK_ERR_INVALID, "mk_library_create: source is not UTF-8");
        MTLCompileOptions *opt = [MTLCompileOptions new];
        opt.preprocessorMacros = macro_dict(macros);
        // IEEE semantics, as the simulator runs them: fast math may fold isnan() and infinity
        // comparisons away (max pooling propagates NaN like torch; softmax's -inf masks).
        // MPSKERN_METAL_FAST_MATH=1 opts back in.
        const char *fm = getenv("MPSKERN_METAL_FAST_MATH");
        opt.fastMathEnabled = (fm && fm[0] == '1') ? YES : NO;
        NSError *err = nil;
        id<MTLLibrary> lib = [mk_metal_device(d).device newLibraryWithSource:src options:opt error:&err];
        if (!lib)   // (a library with err set carries warnings only)
            return mk_set_error(MK_ERR_COMPILE, "Metal compiler:\n%s",
                                err ? err.localizedDescription.UTF8String : "(no log)");
        mk_library *l = calloc(1, sizeof *l);
        if (!l) return mk_set_error(MK_ERR_NOMEM, "mk_library_create: out of memory");
        l->device = d;
        l->impl = (__bridge_retained void *)lib;
        *out = l;
        return MK_OK;
    }
}

mk_status mk_metal_library_load(mk_device *d, const char *path, mk_library **out) {
    @autoreleasepool {
        if (out) *out = NULL;
        return mk_set_error(MK_ERR_UNSUPPORTED,
                            "mk_library_load loads simulator libraries; a Metal device compiles MSL "
                            "source at run time (mk_library_create)");
    }
}

void mk_metal_library_free(mk_library *l) {
    @autoreleasepool {
        if (l->impl) (void)(__bridge_transfer id<MTLLibrary>)l->impl;
        free(l);
    }
}

/* ---------------------------------------------------------------- pipelines */

mk_status mk_metal_pipeline_create(mk_device *d, mk_library *l, const char *name, mk_pipeline **out) {
    @autoreleasepool {
        if (!out) return mk_set_error(MK_ERR_INVALID, "mk_pipeline_create: out is NULL");
        *out = NULL;
        if (!l || l->device != d || !name)
            return mk_set_error(MK_ERR_INVALID, "mk_pipeline_create: needs a library of this device and a kernel name");
        id<MTLLibrary> lib = (__bridge id<MTLLibrary>)l->impl;
        id<MTLFunction> fn = [lib newFunctionWithName:[NSString stringWithUTF8String:name]];
        if (!fn)
            return mk_set_error(MK_ERR_INVALID, "no kernel named '%s' in the library; it has: %s", name,
                                [[lib.functionNames componentsJoinedByString:@", "] UTF8String]);
        NSError *err = nil;
        id<MTLComputePipelineState> ps =
            [mk_metal_device(d).device newComputePipelineStateWithFunction:fn error:&err];
        if (!ps)
            return mk_set_error(MK_ERR_COMPILE, "Metal: pipeline for '%s' failed: %s", name,
                                err ? err.localizedDescription.UTF8String : "(no message)");
        mk_pipeline *p = calloc(1, sizeof *p);
        if (!p) return mk_set_error(MK_ERR_NOMEM, "mk_pipeline_create: out of memory");
        p->device = d;
        p->impl = (__bridge_retained void *)ps;
        p->max_threads = (uint32_t)ps.maxTotalThreadsPerThreadgroup;
        p->exec_width = (uint32_t)ps.threadExecutionWidth;
        *out = p;
        return MK_OK;
    }
}

void mk_metal_pipeline_free(mk_pipeline *p) {
    @autoreleasepool {
        if (p->impl) (void)(__bridge_transfer id<MTLComputePipelineState>)p->impl;
        free(p);
    }
}

/* ---------------------------------------------------------------- dispatch */

// setBytes: takes at most 4 KiB; larger constant data goes in a temporary buffer.
#define MK_SETBYTES_MAX 4096

static mk_status check_dispatch(mk_device *d, const mk_dispatch *x, uint32_t i, NSUInteger tg_mem_max) {
    mk_pipeline *p = x->pipeline;
    uint64_t threads = (uint64_t)x->threadgroup[0] * x->threadgroup[1] * x->threadgroup[2];
    if (threads == 0)
        return mk_set_error(MK_ERR_INVALID, "mk_run: dispatch %u has an empty threadgroup (%u, %u, %u)",
                            i, x->threadgroup[0], x->threadgroup[1], x->threadgroup[2]);
    if (threads > p->max_threads)
        return mk_set_error(MK_ERR_INVALID,
                            "mk_run: dispatch %u asks for %llu threads per threadgroup; this pipeline "
                            "allows at most %u (maxTotalThreadsPerThreadgroup)",
                            i, (unsigned long long)threads, p->max_threads);
    uint64_t mem = [(__bridge id<MTLComputePipelineState>)p->impl staticThreadgroupMemoryLength];
    for (int k = 0; k < 4; k++) mem += ((uint64_t)x->threadgroup_memory[k] + 15u) & ~(uint64_t)15u;
    if (mem > tg_mem_max)
        return mk_set_error(MK_ERR_INVALID,
                            "mk_run: dispatch %u needs %llu bytes of threadgroup memory; the device has %lu",
                            i, (unsigned long long)mem, (unsigned long)tg_mem_max);
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

mk_status mk_metal_run(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *t) {
    @autoreleasepool {
        MKMetalDevice *md = mk_metal_device(d);
        for (uint32_t i = 0; i < n; i++) {
            mk_status st = check_dispatch(d, &list[i], i, md.device.maxThreadgroupMemoryLength);
            if (st != MK_OK) return st;
        }
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < list[i].nbindings; j++)
                if (list[i].bindings[j].buffer) mk_metal_upload(list[i].bindings[j].buffer);

        id<MTLCommandBuffer> cb = [md.queue commandBuffer];
        id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];   // serial: dispatches run in order
        for (uint32_t i = 0; i < n; i++) {
            const mk_dispatch *x = &list[i];
            if (!x->grid[0] || !x->grid[1] || !x->grid[2]) continue;     // nothing to run
            [enc setComputePipelineState:(__bridge id<MTLComputePipelineState>)x->pipeline->impl];
            for (uint32_t j = 0; j < x->nbindings; j++) {
                const mk_binding *b = &x->bindings[j];
                if (b->buffer) {
                    MKMetalBuffer *mb = mk_metal_buffer(b->buffer);
                    [enc setBuffer:mb.buffer offset:mb.offset + b->offset atIndex:j];
                } else if (b->bytes && b->nbytes <= MK_SETBYTES_MAX) {
                    [enc setBytes:b->bytes length:b->nbytes atIndex:j];
                } else if (b->bytes) {
                    id<MTLBuffer> tmp = [md.device newBufferWithBytes:b->bytes length:b->nbytes
                                                              options:MTLResourceStorageModeShared];
                    if (!tmp) {
                        [enc endEncoding];
                        return mk_set_error(MK_ERR_NOMEM, "Metal: constant buffer of %u bytes", b->nbytes);
                    }
                    [enc setBuffer:tmp offset:0 atIndex:j];   // the encoder retains it
                }
            }
            for (int k = 0; k < 4; k++)
                if (x->threadgroup_memory[k])   // the length must be a multiple of 16 bytes
                    [enc setThreadgroupMemoryLength:(x->threadgroup_memory[k] + 15u) & ~15u atIndex:(NSUInteger)k];
            MTLSize grid = MTLSizeMake(x->grid[0], x->grid[1], x->grid[2]);
            MTLSize tg = MTLSizeMake(x->threadgroup[0], x->threadgroup[1], x->threadgroup[2]);
            if (x->grid_units == MK_GRID_THREADS)
                [enc dispatchThreads:grid threadsPerThreadgroup:tg];
            else
                [enc dispatchThreadgroups:grid threadsPerThreadgroup:tg];
        }
        [enc endEncoding];
        double t0 = mk_metal_now_ms();
        [cb commit];
        [cb waitUntilCompleted];
        mk_status st = mk_metal_finish(cb, cb, t0, t, "mk_run");
        if (st != MK_OK) return st;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < list[i].nbindings; j++)
                if (list[i].bindings[j].buffer) mk_metal_download(list[i].bindings[j].buffer);
        return MK_OK;
    }
}
