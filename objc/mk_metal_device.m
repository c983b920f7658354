// mk_metal_device.m: the Metal device provider: discovery (Apple silicon GPUs only),
// device info (GPU family, architecture, limits), and the helpers the other shim files share.
#import "mk_metal.h"

// NSArray, NSDictionary and @"..." literals live in CoreFoundation, which Foundation's
// link stub does not re-export in every SDK; ask the linker for it from the object file
// itself (an LC_LINKER_OPTION, as module autolinking would emit), so any link line works.
__asm__(".linker_option \"-framework\", \"CoreFoundation\"");

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

@implementation MKMetalDevice
@end

@implementation MKMetalBuffer
@end

// The newest family first: Apple10 (M5) .. Apple7 (M1). The macOS 12 headers name only
// Apple7, so newer families are their raw MTLGPUFamily values; supportsFamily: answers NO
// for values an older OS does not know.
static int supports_family(void *dev, int f) {
    return [(__bridge id<MTLDevice>)dev supportsFamily:(MTLGPUFamily)(1000 + f)] ? 1 : 0;
}
static int metal_family(id<MTLDevice> dev) {
    return mk_shim_newest_family(supports_family, (__bridge void *)dev, mk_shim_min_family());
}

// Apple silicon GPUs (Apple7 or newer): what mpskern's kernels are written for
// (simdgroup_matrix, 32 KiB threadgroup memory, unified memory); older families only with
// MPSKERN_METAL_MIN_FAMILY (mk_shim_min_family).
static NSArray<id<MTLDevice>> *metal_devices(NSArray<id<MTLDevice>> **all_out) {
    NSArray<id<MTLDevice>> *all = MTLCopyAllDevices();
    NSMutableArray<id<MTLDevice>> *ok = [NSMutableArray array];
    for (id<MTLDevice> dev in all)
        if (metal_family(dev)) [ok addObject:dev];
    if (all_out) *all_out = all;
    return ok;
}

static int metal_count(char *why, size_t why_len) {
    @autoreleasepool {
        @try {
            NSArray<id<MTLDevice>> *all = nil;
            NSArray<id<MTLDevice>> *ok = metal_devices(&all);
            const char *names[16];
            NSUInteger n = 0;
            for (id<MTLDevice> dev in [all subarrayWithRange:NSMakeRange(0, MIN(all.count, 16u))])
                names[n++] = dev.name.UTF8String;
            if (!ok.count) mk_shim_no_device_why(why, why_len, (int)n, names);
            return (int)ok.count;
        } @catch (NSException *e) {
            if (why && why_len)
                snprintf(why, why_len, "Metal device discovery raised %s: %s", e.name.UTF8String,
                         e.reason.UTF8String ?: "");
            return 0;
        }
    }
}

static void metal_device_free(mk_device *d) {
    mk_objc_release(d->impl, "mk_device_free");
    free(d);
}

// MTLDevice.architecture.name (macOS 14+, not in the macOS 12 SDK), asked at run time. Key-
// value coding on a proxy device (a capture or debugging layer) can raise: then no name.
static void architecture_name(id<MTLDevice> dev, char *out, size_t len) {
    @try {
        if (![(id)dev respondsToSelector:NSSelectorFromString(@"architecture")]) return;
        id arch = [(id)dev valueForKey:@"architecture"];
        id name = [arch respondsToSelector:NSSelectorFromString(@"name")] ? [arch valueForKey:@"name"] : nil;
        if ([name isKindOfClass:[NSString class]]) snprintf(out, len, "%s", [name UTF8String]);
    } @catch (NSException *e) {
        out[0] = 0;
    }
}

static mk_status metal_get_info(mk_device *d, mk_device_info *out) {
    return mk_objc_guard("mk_device_get_info", ^mk_status {
        MKMetalDevice *md = mk_metal_device(d);
        id<MTLDevice> dev = md.device;
        mk_shim_fill_info(out, dev.name.UTF8String, md.family, (uint32_t)dev.maxThreadsPerThreadgroup.width,
                          (uint32_t)dev.maxThreadgroupMemoryLength, dev.recommendedMaxWorkingSetSize,
                          dev.hasUnifiedMemory, (uint32_t)md.pageSize);
        architecture_name(dev, out->architecture, sizeof out->architecture);
        return MK_OK;
    });
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
    return mk_objc_guard("mk_device_create", ^mk_status {
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
        mk_status st = mk_shim_device_new(&metal_ops, out);
        if (st == MK_OK) (*out)->impl = (__bridge_retained void *)md;
        return st;
    });
}

static const mk_device_provider metal_provider = {.count = metal_count, .create = metal_create};

__attribute__((constructor)) static void mk_metal_register(void) {
    mk_register_provider(MK_DEVICE_METAL, &metal_provider);
}

/* ---------------------------------------------------------------- shared helpers */

mk_status mk_objc_exception(const char *op, NSException *e) {
    return mk_set_error(MK_ERR_RUNTIME, "%s: Objective-C exception %s: %s", op,
                        e.name.UTF8String ?: "?", e.reason.UTF8String ?: "(no reason)");
}

mk_status mk_objc_guard(const char *op, mk_status (^body)(void)) {
    @autoreleasepool {
        @try {
            return body();
        } @catch (NSException *e) {
            return mk_objc_exception(op, e);
        }
    }
}

void mk_objc_release(void *impl, const char *op) {
    @autoreleasepool {
        @try {
            (void)(__bridge_transfer id)impl;
        } @catch (NSException *e) {
            (void)mk_objc_exception(op, e);
        }
    }
}

int mk_metal_overlap(mk_buffer *a, mk_buffer *b) {
    return mk_shim_overlap(a, b, a && b && mk_metal_buffer(a).buffer == mk_metal_buffer(b).buffer);
}

void mk_metal_upload(mk_buffer *b) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    mk_shim_upload(b, mb.copied, mb.copied ? (char *)mb.buffer.contents + mb.offset : NULL);
}

void mk_metal_download(mk_buffer *b) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    mk_shim_download(b, mb.copied, mb.copied ? (const char *)mb.buffer.contents + mb.offset : NULL);
}

void mk_metal_add_command_buffer(mk_cb_errors *e, id<MTLCommandBuffer> cb) {
    if (!cb) return;
    BOOL failed = cb.status == MTLCommandBufferStatusError || cb.error != nil;
    mk_cb_errors_add(e, failed, cb.error.localizedDescription.UTF8String, cb.GPUStartTime, cb.GPUEndTime);
}
