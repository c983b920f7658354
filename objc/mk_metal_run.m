// mk_metal_run.m: run-time compilation of MSL source (newLibraryWithSource:options: with
// preprocessor macros), compute pipelines, and dispatch lists encoded into one command
// buffer with one compute encoder, timed by the command buffer's GPU timestamps. The
// decisions (macros, validation, what is encoded how) are mk_shim_run.c's; this file
// hands them to Metal.
#import "mk_metal.h"

#include <stdlib.h>

/* ---------------------------------------------------------------- libraries */

// "NAME=VALUE" -> NAME: VALUE (an NSNumber when VALUE is an integer, else the string).
static int add_macro(void *ctx, const mk_shim_macro *mc) {
    NSMutableDictionary<NSString *, NSObject *> *m = (__bridge NSMutableDictionary *)ctx;
    NSString *name = [NSString stringWithUTF8String:mc->name], *value = [NSString stringWithUTF8String:mc->value];
    if (!name || !value) return -1;                 // not UTF-8
    m[name] = mc->is_int ? @(mc->ival) : value;
    return 0;
}

mk_status mk_metal_library_create(mk_device *d, const char *source, const char *const *macros,
                                  mk_library **out) {
    return mk_objc_guard("mk_library_create", ^mk_status {
        mk_status st;
        if ((st = mk_shim_out(out, "mk_library_create")) != MK_OK || (st = mk_shim_library_check(source)) != MK_OK)
            return st;
        NSString *src = [NSString stringWithUTF8String:source];
        if (!src) return mk_set_error(MK_ERR_INVALID, "mk_library_create: source is not UTF-8");
        MTLCompileOptions *opt = [MTLCompileOptions new];
        NSMutableDictionary<NSString *, NSObject *> *dict = [NSMutableDictionary dictionary];
        if ((st = mk_shim_each_macro(macros, add_macro, (__bridge void *)dict)) != MK_OK) return st;
        const char *family_macro[2] = {mk_shim_family_macro(mk_metal_device(d).family), NULL};
        if ((st = mk_shim_each_macro(family_macro, add_macro, (__bridge void *)dict)) != MK_OK) return st;
        opt.preprocessorMacros = dict;
        // IEEE semantics, as the simulator runs them: fast math may fold isnan() and infinity
        // comparisons away (max pooling propagates NaN like torch; softmax's -inf masks).
        // MPSKERN_METAL_FAST_MATH=1 opts back in.
        opt.fastMathEnabled = mk_shim_fast_math();
        NSError *err = nil;
        id<MTLLibrary> lib = [mk_metal_device(d).device newLibraryWithSource:src options:opt error:&err];
        if (!lib)   // (a library with err set carries warnings only)
            return mk_set_error(MK_ERR_COMPILE, "Metal compiler:\n%s",
                                err ? err.localizedDescription.UTF8String : "(no log)");
        if ((st = mk_shim_library_new(d, out)) == MK_OK) (*out)->impl = (__bridge_retained void *)lib;
        return st;
    });
}

mk_status mk_metal_library_load(mk_device *d, const char *path, mk_library **out) {
    @autoreleasepool {
        mk_shim_out(out, "mk_library_load");
        return mk_set_error(MK_ERR_UNSUPPORTED,
                            "mk_library_load loads simulator libraries; a Metal device compiles MSL "
                            "source at run time (mk_library_create)");
    }
}

void mk_metal_library_free(mk_library *l) {
    mk_objc_release(l->impl, "mk_library_free");
    free(l);
}

/* ---------------------------------------------------------------- pipelines */

// A struct argument (`constant T&`, our argument structs) needs sizeof(T) bytes: mk_run
// refuses a shorter binding (mk_check_binding_sizes) before the GPU reads past it.
static void record_min_bytes(mk_pipeline *p, MTLComputePipelineReflection *refl) {
    for (MTLArgument *arg in refl.arguments)
        if (arg.type == MTLArgumentTypeBuffer && arg.bufferStructType && arg.index < MK_MAX_BINDINGS)
            p->min_bytes[arg.index] = (uint32_t)arg.bufferDataSize;
}

mk_status mk_metal_pipeline_create(mk_device *d, mk_library *l, const char *name, mk_pipeline **out) {
    return mk_objc_guard("mk_pipeline_create", ^mk_status {
        mk_status st;
        if ((st = mk_shim_out(out, "mk_pipeline_create")) != MK_OK ||
            (st = mk_shim_pipeline_check(d, l, name)) != MK_OK)
            return st;
        id<MTLLibrary> lib = (__bridge id<MTLLibrary>)l->impl;
        id<MTLFunction> fn = [lib newFunctionWithName:[NSString stringWithUTF8String:name]];
        if (!fn)
            return mk_set_error(MK_ERR_INVALID, "no kernel named '%s' in the library; it has: %s", name,
                                [[lib.functionNames componentsJoinedByString:@", "] UTF8String]);
        NSError *err = nil;
        MTLComputePipelineReflection *refl = nil;
        id<MTLComputePipelineState> ps =
            [mk_metal_device(d).device newComputePipelineStateWithFunction:fn
                                                                   options:MTLPipelineOptionArgumentInfo
                                                                reflection:&refl error:&err];
        if (!ps)
            return mk_set_error(MK_ERR_COMPILE, "Metal: pipeline for '%s' failed: %s", name,
                                err ? err.localizedDescription.UTF8String : "(no message)");
        st = mk_shim_pipeline_new(d, (uint32_t)ps.maxTotalThreadsPerThreadgroup, (uint32_t)ps.threadExecutionWidth,
                                  name, out);
        if (st != MK_OK) return st;
        (*out)->impl = (__bridge_retained void *)ps;
        record_min_bytes(*out, refl);
        return MK_OK;
    });
}

void mk_metal_pipeline_free(mk_pipeline *p) {
    mk_objc_release(p->impl, "mk_pipeline_free");
    mk_shim_pipeline_free(p);
}

/* ---------------------------------------------------------------- dispatch */

// The encoder mk_shim_encode drives (ctx: the compute command encoder).
typedef struct encoding { __unsafe_unretained id<MTLComputeCommandEncoder> enc; __unsafe_unretained id<MTLDevice> dev; } encoding;
static void enc_pipeline(void *ctx, const mk_pipeline *p) {
    [((encoding *)ctx)->enc setComputePipelineState:(__bridge id<MTLComputePipelineState>)p->impl];
}
static void enc_buffer(void *ctx, uint32_t j, mk_buffer *b, uint64_t offset) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    [((encoding *)ctx)->enc setBuffer:mb.buffer offset:mb.offset + offset atIndex:j];
}
static void enc_bytes(void *ctx, uint32_t j, const void *bytes, uint32_t n) {
    [((encoding *)ctx)->enc setBytes:bytes length:n atIndex:j];
}
static int enc_temp(void *ctx, uint32_t j, const void *bytes, uint32_t n) {
    id<MTLBuffer> tmp = [((encoding *)ctx)->dev newBufferWithBytes:bytes length:n options:MTLResourceStorageModeShared];
    [((encoding *)ctx)->enc setBuffer:tmp offset:0 atIndex:j];   // the encoder retains it
    return tmp ? 0 : -1;
}
static void enc_tg_memory(void *ctx, uint32_t k, uint32_t length) {
    [((encoding *)ctx)->enc setThreadgroupMemoryLength:length atIndex:k];
}
static void enc_dispatch(void *ctx, const uint32_t *grid, const uint32_t *tg, int grid_units) {
    MTLSize g = MTLSizeMake(grid[0], grid[1], grid[2]), t = MTLSizeMake(tg[0], tg[1], tg[2]);
    if (grid_units == MK_GRID_THREADS)
        [((encoding *)ctx)->enc dispatchThreads:g threadsPerThreadgroup:t];
    else
        [((encoding *)ctx)->enc dispatchThreadgroups:g threadsPerThreadgroup:t];
}
static uint64_t static_tg(void *ctx, const mk_pipeline *p) {
    return [(__bridge id<MTLComputePipelineState>)p->impl staticThreadgroupMemoryLength];
}

mk_status mk_metal_run(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *t) {
    return mk_objc_guard("mk_run", ^mk_status {
        MKMetalDevice *md = mk_metal_device(d);
        mk_status st = mk_shim_check_dispatches(d, list, n, static_tg, NULL, md.device.maxThreadgroupMemoryLength);
        if (st != MK_OK) return st;
        mk_shim_each_bound_buffer(list, n, mk_metal_upload);
        id<MTLCommandBuffer> cb = [md.queue commandBuffer];
        id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];   // serial: dispatches run in order
        encoding ctx = {enc, md.device};
        mk_shim_encoder e = {&ctx, enc_pipeline, enc_buffer, enc_bytes, enc_temp, enc_tg_memory, enc_dispatch};
        st = mk_shim_encode(list, n, &e);
        [enc endEncoding];
        if (st != MK_OK) return st;
        double t0 = mk_shim_now_ms();
        [cb commit];
        [cb waitUntilCompleted];
        mk_cb_errors errs;
        mk_cb_errors_init(&errs);
        mk_metal_add_command_buffer(&errs, cb);
        if ((st = mk_cb_errors_finish(&errs, "mk_run", t0, t)) != MK_OK) return st;
        mk_shim_each_bound_buffer(list, n, mk_metal_download);
        return MK_OK;
    });
}
