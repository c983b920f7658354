// mk_mps_graph.m: the MPSGraph cache and runner shared by the graph-based MPS ops
// (conv2d, pooling, softmax, normalization).
//
// MPSGraphTensorData wraps a whole MTLBuffer from offset 0 (no offset argument before
// macOS 15). A zero-copy wrap of memory that is not page-aligned sits at an offset inside
// its page-rounded MTLBuffer, so such buffers are copied (by the CPU: unified memory, and
// blits would need 4-byte multiples) into and out of scratch buffers around the run.
// Page-aligned arrays (mpskern.empty) take the direct path.
#import "mk_mps.h"

#include <string.h>

@implementation MKGraph
@end

// Bounded: a long-running process feeding ever-new shapes must not grow without limit.
#define MK_GRAPH_CACHE_MAX 256

mk_status mk_mps_check(mk_device *d, int dtype, const char *op) {
    mk_status st = mk_metal_check_device(d, op);
    if (st != MK_OK) return st;
    if (dtype != MK_F32 && dtype != MK_F16)
        return mk_set_error(MK_ERR_INVALID, "%s: dtype %d is neither float32 (%d) nor float16 (%d)",
                            op, dtype, MK_F32, MK_F16);
    return MK_OK;
}

MPSShape *mk_mps_shape(int n, const int64_t *dims) {
    NSMutableArray<NSNumber *> *s = [NSMutableArray arrayWithCapacity:(NSUInteger)n];
    for (int i = 0; i < n; i++) [s addObject:@(dims[i])];
    return s;
}

MKGraph *mk_mps_graph_get(mk_device *d, NSString *key, MKGraph * (^build)(void)) {
    MKMetalDevice *md = mk_metal_device(d);
    @synchronized(md.graphs) {
        MKGraph *g = md.graphs[key];
        if (g) return g;
        g = build();
        if (!g) return nil;
        if (md.graphs.count >= MK_GRAPH_CACHE_MAX) [md.graphs removeAllObjects];
        md.graphs[key] = g;
        return g;
    }
}

static size_t tensor_bytes(MPSGraphTensor *x) {
    size_t n = ((size_t)x.dataType & 0xFFFF) / 8;   // MPSDataType's low bits: bits per element
    for (NSNumber *v in x.shape) n *= (size_t)v.longLongValue;
    return n;
}

static BOOL overlaps_any(mk_buffer *a, mk_buffer *const *list, NSUInteger n) {
    for (NSUInteger i = 0; i < n; i++)
        if (mk_metal_overlap(a, list[i])) return YES;
    return NO;
}

mk_status mk_mps_graph_run(mk_device *d, MKGraph *g, mk_buffer *const *in, mk_buffer *const *out,
                           mk_timing *t, const char *op) {
    MKMetalDevice *md = mk_metal_device(d);
    NSUInteger nin = g.inputs.count, nout = g.outputs.count;
    for (NSUInteger i = 0; i < nin; i++) {
        mk_status st = mk_metal_check_buffer(d, in[i], tensor_bytes(g.inputs[i]), op,
                                             [NSString stringWithFormat:@"input %lu", (unsigned long)i].UTF8String);
        if (st != MK_OK) return st;
    }
    for (NSUInteger j = 0; j < nout; j++) {
        mk_status st = mk_metal_check_buffer(d, out[j], tensor_bytes(g.outputs[j]), op,
                                             [NSString stringWithFormat:@"output %lu", (unsigned long)j].UTF8String);
        if (st != MK_OK) return st;
    }
    @synchronized(g) {
        for (NSUInteger i = 0; i < nin; i++) mk_metal_upload(in[i]);
        for (NSUInteger j = 0; j < nout; j++) mk_metal_upload(out[j]);

        // Wall time covers the scratch copies too; GPU time spans the first underlying command
        // buffer to the last (MPSGraph may commit parts while encoding: commitAndContinue).
        double t0 = mk_metal_now_ms();
        NSMutableDictionary<MPSGraphTensor *, MPSGraphTensorData *> *feeds = [NSMutableDictionary dictionary];
        NSMutableDictionary<MPSGraphTensor *, MPSGraphTensorData *> *results = [NSMutableDictionary dictionary];
        NSMutableArray *scratch_out = [NSMutableArray array];   // per output: a scratch buffer or NSNull
        for (NSUInteger i = 0; i < nin; i++) {
            MPSGraphTensor *x = g.inputs[i];
            MKMetalBuffer *mb = mk_metal_buffer(in[i]);
            id<MTLBuffer> src = mb.buffer;
            if (mb.offset != 0) {   // a CPU copy: blits need 4-byte multiples on macOS, float16 data may not be
                size_t n = tensor_bytes(x);
                src = [md.device newBufferWithBytes:(const char *)mb.buffer.contents + mb.offset length:(n ? n : 16)
                                            options:MTLResourceStorageModeShared];
                if (!src) return mk_set_error(MK_ERR_NOMEM, "%s: scratch buffer of %zu bytes", op, n);
            }
            feeds[x] = [[MPSGraphTensorData alloc] initWithMTLBuffer:src shape:x.shape dataType:x.dataType];
        }
        for (NSUInteger j = 0; j < nout; j++) {
            MPSGraphTensor *y = g.outputs[j];
            MKMetalBuffer *mb = mk_metal_buffer(out[j]);
            id<MTLBuffer> dst = mb.buffer;
            // a result written over memory the graph still reads (e.g. running stats) is not safe
            if (mb.offset != 0 || overlaps_any(out[j], in, nin)) {
                size_t n = tensor_bytes(y);
                dst = [md.device newBufferWithLength:(n ? n : 16) options:MTLResourceStorageModeShared];
                if (!dst) return mk_set_error(MK_ERR_NOMEM, "%s: scratch buffer of %zu bytes", op, n);
                [scratch_out addObject:dst];
            } else {
                [scratch_out addObject:[NSNull null]];
            }
            results[y] = [[MPSGraphTensorData alloc] initWithMTLBuffer:dst shape:y.shape dataType:y.dataType];
        }
        MPSCommandBuffer *cb = [MPSCommandBuffer commandBufferFromCommandQueue:md.queue];
        id<MTLCommandBuffer> first = cb.rootCommandBuffer;
        [g.graph encodeToCommandBuffer:cb feeds:feeds targetOperations:nil resultsDictionary:results
                   executionDescriptor:nil];
        id<MTLCommandBuffer> last = cb.rootCommandBuffer;   // the live one after any commitAndContinue
        [cb commit];
        [last waitUntilCompleted];
        [first waitUntilCompleted];
        mk_timing dummy;
        mk_status st = mk_metal_finish(first, last, t0, t ? t : &dummy, op);
        if (st != MK_OK) return st;
        for (NSUInteger j = 0; j < nout; j++) {
            if (scratch_out[j] == [NSNull null]) continue;
            MKMetalBuffer *mb = mk_metal_buffer(out[j]);
            id<MTLBuffer> scratch = scratch_out[j];
            memcpy((char *)mb.buffer.contents + mb.offset, scratch.contents, tensor_bytes(g.outputs[j]));
        }
        for (NSUInteger j = 0; j < nout; j++) mk_metal_download(out[j]);
        if (t) t->wall_ms = mk_metal_now_ms() - t0;
        return MK_OK;
    }
}
