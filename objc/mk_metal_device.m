// mk_metal_device.m: the Metal device provider: discovery (Apple silicon GPUs only),
// device info (GPU family, architecture, limits), and the helpers the other shim files share.
#import "mk_metal.h"

// NSArray, NSDictionary and @"..." literals live in CoreFoundation, which Foundation's
// link stub does not re-export in every SDK; ask the linker for it from the object file
// itself (an LC_LINKER_OPTION, as module autolinking would emit), so any link line works.
__asm__(".linker_option \"-framework\", \"CoreFoundation\"");

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

@implementation MKMetalDevice
@end

@implementation MKMetalBuffer
@end

// The newest family first: Apple10 (M5) .. Apple7 (M1). The macOS 12 headers name only
// Apple7, so newer families are their raw MTLGPUFamily values; supportsFamily: answers NO
// for values an older OS does not know.
static int metal_family(id<MTLDevice> dev) {
    for (int f = 10; f >= 7; f--)
        if ([dev supportsFamily:(MTLGPUFamily)(1000 + f)]) return f;
    return 0;
}

// Apple silicon GPUs (Apple7 or newer): what mpskern's kernels are written for
// (simdgroup_matrix, 32 KiB threadgroup memory, unified memory).
static NSArray<id<MTLDevice>> *metal_devices(NSArray<id<MTLDevice>> **all_out) {
    NSArray<id<MTLDevice>> *all = MTLCopyAllDevices();
    NSMutableArray<id<MTLDevice>> *ok = [NSMutableArray array];
    for (id<MTLDevice> dev in all)
        if (metal_family(dev) >= 7) [ok addObject:dev];
    if (all_out) *all_out = all;
    return ok;
}

static int metal_count(char *why, size_t why_len) {
    @autoreleasepool {
        NSArray<id<MTLDevice>> *all = nil;
        NSArray<id<MTLDevice>> *ok = metal_devices(&all);
        if (ok.count == 0 && why && why_len) {
            if (all.count == 0) {
                snprintf(why, why_len, "no Metal device found (metal needs macOS on Apple silicon)");
            } else {
                NSMutableArray<NSString *> *names = [NSMutableArray array];
                for (id<MTLDevice> dev in all) [names addObject:dev.name];
                snprintf(why, why_len,
                         "metal needs an Apple silicon GPU (family Apple7, M1, or newer); this Mac has: %s",
                         [[names componentsJoinedByString:@", "] UTF8String]);
            }
        }
        return (int)ok.count;
    }
}

static void metal_device_free(mk_device *d) {
    @autoreleasepool {
        if (d->impl) (void)(__bridge_transfer MKMetalDevice *)d->impl;
        free(d);
    }
}

static mk_status metal_get_info(mk_device *d, mk_device_info *out) {
    @autoreleasepool {
        MKMetalDevice *md = mk_metal_device(d);
        id<MTLDevice> dev = md.device;
        snprintf(out->name, sizeof out->name, "%s", dev.name.UTF8String);
        // MTLDevice.architecture (macOS 14+) is not in the macOS 12 SDK: ask at run time.
        if ([(id)dev respondsToSelector:NSSelectorFromString(@"architecture")]) {
            id arch = [(id)dev valueForKey:@"architecture"];
            id name = [arch respondsToSelector:NSSelectorFromString(@"name")] ? [arch valueForKey:@"name"] : nil;
            if ([name isKindOfClass:[NSString class]])
                snprintf(out->architecture, sizeof out->architecture, "%s", [name UTF8String]);
        }
        out->family = md.family;
        out->is_simulator = 0;
        out->simd_width = 32;
        out->max_threads_per_threadgroup = (uint32_t)dev.maxThreadsPerThreadgroup.width;
        out->max_threadgroup_memory = (uint32_t)dev.maxThreadgroupMemoryLength;
        out->recommended_working_set = dev.recommendedMaxWorkingSetSize;
        out->unified_memory = dev.hasUnifiedMemory ? 1 : 0;
        out->page_size = (uint32_t)md.pageSize;
        return MK_OK;
    }
}

static const mk_device_ops metal_ops = {
    .kind = MK_DEVICE_METAL,
    .device_free = metal_device_free,
    .get_info = metal_get_info,
    .buffer_wrap = mk_metal_buffer_wrap,
    .buffer_alloc = mk_metal_buffer_alloc,
    .buffer_sync = mk_metal_buffer_sync,
    .buffer_free = mk_metal_buffer_free,
    .library_create = mk_metal_library_create,
    .library_load = mk_metal_library_load,
    .library_free = mk_metal_library_free,
    .pipeline_create = mk_metal_pipeline_create,
    .pipeline_free = mk_metal_pipeline_free,
    .run = mk_metal_run,
    .sim_set_options = NULL,
};

static mk_status metal_create(int index, mk_device **out) {
    @autoreleasepool {
        NSArray<id<MTLDevice>> *ok = metal_devices(NULL);
        if (index < 0 || (NSUInteger)index >= ok.count)
            return mk_set_error(MK_ERR_UNAVAILABLE, "no Metal device %d (%lu found)", index,
                                (unsigned long)ok.count);
        MKMetalDevice *md = [MKMetalDevice new];
        md.device = ok[(NSUInteger)index];
        md.queue = [md.device newCommandQueue];
        if (!md.queue) return mk_set_error(MK_ERR_RUNTIME, "Metal: newCommandQueue failed");
        md.pageSize = (NSUInteger)getpagesize();   // 16 KiB on Apple silicon
        md.family = metal_family(md.device);
        md.graphs = [NSMutableDictionary dictionary];
        mk_device *d = calloc(1, sizeof *d);
        if (!d) return mk_set_error(MK_ERR_NOMEM, "mk_device_create: out of memory");
        d->ops = &metal_ops;
        d->impl = (__bridge_retained void *)md;
        *out = d;
        return MK_OK;
    }
}

static const mk_device_provider metal_provider = {.count = metal_count, .create = metal_create};

__attribute__((constructor)) static void mk_metal_register(void) {
    mk_register_provider(MK_DEVICE_METAL, &metal_provider);
}

/* ---------------------------------------------------------------- shared helpers */

mk_status mk_metal_check_device(mk_device *d, const char *op) {
    if (!d) return mk_set_error(MK_ERR_INVALID, "%s: device is NULL", op);
    if (d->ops->kind != MK_DEVICE_METAL)
        return mk_set_error(MK_ERR_INVALID, "%s: Apple's MPS primitives need a Metal device, not a simulated one", op);
    return MK_OK;
}

mk_status mk_metal_check_buffer(mk_device *d, mk_buffer *b, size_t need, const char *op,
                                const char *what) {
    if (!b) return mk_set_error(MK_ERR_INVALID, "%s: buffer %s is NULL", op, what);
    if (b->device != d)
        return mk_set_error(MK_ERR_INVALID, "%s: buffer %s belongs to another device", op, what);
    if (b->nbytes < need)
        return mk_set_error(MK_ERR_INVALID, "%s: buffer %s holds %zu bytes, the arguments need %zu",
                            op, what, b->nbytes, need);
    return MK_OK;
}

int mk_metal_overlap(mk_buffer *a, mk_buffer *b) {
    if (!a || !b) return 0;
    if (a == b || mk_metal_buffer(a).buffer == mk_metal_buffer(b).buffer) return 1;
    if (!a->host || !b->host || !a->nbytes || !b->nbytes) return 0;
    uintptr_t a0 = (uintptr_t)a->host, b0 = (uintptr_t)b->host;
    return a0 < b0 + b->nbytes && b0 < a0 + a->nbytes;
}

void mk_metal_upload(mk_buffer *b) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    if (mb.copied && b->host && b->nbytes && (b->flags & MK_BUFFER_READ))
        memcpy((char *)mb.buffer.contents + mb.offset, b->host, b->nbytes);
}

void mk_metal_download(mk_buffer *b) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    if (mb.copied && b->host && b->nbytes && (b->flags & MK_BUFFER_WRITE))
        memcpy(b->host, (const char *)mb.buffer.contents + mb.offset, b->nbytes);
}

double mk_metal_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

mk_status mk_metal_finish(id<MTLCommandBuffer> first, id<MTLCommandBuffer> last, double t0_ms,
                          mk_timing *t, const char *op) {
    t->wall_ms = mk_metal_now_ms() - t0_ms;
    for (id<MTLCommandBuffer> cb in @[first, last]) {
        if (cb.status == MTLCommandBufferStatusError || cb.error)
            return mk_set_error(MK_ERR_RUNTIME, "%s: Metal command buffer failed: %s", op,
                                cb.error ? cb.error.localizedDescription.UTF8String : "(no message)");
    }
    t->gpu_ms = (last.GPUEndTime - first.GPUStartTime) * 1e3;
    return MK_OK;
}
