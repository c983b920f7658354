// mk_metal.h: what the Metal device (objc/mk_metal*.m) and Apple's primitives
// (objc/mk_mps*.m) share. Objective-C only; compiled with -fobjc-arc on macOS.
//
// Handles own their Objective-C object through `impl` (a retained bridge): a device holds
// an MKMetalDevice, a buffer an MKMetalBuffer, a library an id<MTLLibrary>, a pipeline an
// id<MTLComputePipelineState>.
#ifndef MK_METAL_H
#define MK_METAL_H

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include "mk_internal.h"
#include "mk_shim_host.h"

@interface MKMetalDevice : NSObject
@property (nonatomic, strong) id<MTLDevice> device;
@property (nonatomic, strong) id<MTLCommandQueue> queue;
@property (nonatomic) NSUInteger pageSize;
@property (nonatomic) int family;                       // 7..10, 0 if older
@property (nonatomic, strong) NSMutableDictionary *graphs;   // MPSGraph cache (mk_mps_graph.m)
@end

@interface MKMetalBuffer : NSObject
@property (nonatomic, strong) id<MTLBuffer> buffer;
@property (nonatomic) NSUInteger offset;   // where the host data starts inside `buffer`
@property (nonatomic) BOOL copied;         // not zero-copy: host <-> buffer copies around each run
@end

static inline MKMetalDevice *mk_metal_device(mk_device *d) { return (__bridge MKMetalDevice *)d->impl; }
static inline MKMetalBuffer *mk_metal_buffer(mk_buffer *b) { return (__bridge MKMetalBuffer *)b->impl; }

// Every exported shim function catches Objective-C exceptions (none may cross the C ABI):
// MK_ERR_RUNTIME naming `op` and the exception's name and reason.
mk_status mk_objc_exception(const char *op, NSException *e);

// Runs `body` in an autorelease pool with that guard: what every exported function returning
// a status is made of.
mk_status mk_objc_guard(const char *op, mk_status (^body)(void));

// A handle's free function: releases the object its `impl` owns (a retained bridge) in an
// autorelease pool; an exception is recorded as `op`'s error (nothing to return it to).
void mk_objc_release(void *impl, const char *op);

// 1 if the two buffers' memory overlaps (same MTLBuffer, or intersecting host ranges).
int mk_metal_overlap(mk_buffer *a, mk_buffer *b);

// Copy-mode buffers (zero_copy == 0) mirror their host memory around each run
// (mk_shim_upload/download), so a copied buffer behaves like a zero-copy one, only slower.
void mk_metal_upload(mk_buffer *b);
void mk_metal_download(mk_buffer *b);

// After waitUntilCompleted: the command buffer's status, error and GPU timestamps.
void mk_metal_add_command_buffer(mk_cb_errors *e, id<MTLCommandBuffer> cb);

// The device-ops table's entries, by file: mk_metal_buffer.m, mk_metal_run.m.
mk_status mk_metal_buffer_wrap(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out);
mk_status mk_metal_buffer_alloc(mk_device *d, size_t nbytes, mk_buffer **out);
mk_status mk_metal_buffer_sync(mk_buffer *b);
void mk_metal_buffer_free(mk_buffer *b);
mk_status mk_metal_library_create(mk_device *d, const char *source, const char *const *macros,
                                  mk_library **out);
mk_status mk_metal_library_load(mk_device *d, const char *path, mk_library **out);
void mk_metal_library_free(mk_library *l);
mk_status mk_metal_pipeline_create(mk_device *d, mk_library *l, const char *name, mk_pipeline **out);
void mk_metal_pipeline_free(mk_pipeline *p);
mk_status mk_metal_run(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *t);

#endif
