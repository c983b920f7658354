// mk_mps_graph.m: the MPSGraph cache and runner shared by the graph-based MPS ops
// (conv2d, pooling, softmax, normalization).
//
// MPSGraphTensorData wraps a whole MTLBuffer from offset 0 (no offset argument before
// macOS 15). A zero-copy wrap of memory that is not page-aligned sits at an offset inside
// its page-rounded MTLBuffer, so such buffers are copied (by the CPU: unified memory, and
// blits would need 4-byte multiples) into and out of scratch buffers around the run, as
// are outputs that overlap an input (mk_shim_graph_staging). Page-aligned arrays
// (mpskern.empty) take the direct path.
#import "mk_mps.h"

#include <string.h>

@implementation MKGraph
@end

// Bounded: a long-running process feeding ever-new shapes must not grow without limit.
#define MK_GRAPH_CACHE_MAX 256

MPSShape *mk_mps_shape(int n, const int64_t *dims) {
    NSMutableArray<NSNumber *> *s = [NSMutableArray arrayWithCapacity:(NSUInteger)n];
    for (int i = 0; i < n; i++) [s addObject:@(dims[i])];
    return s;
}

MKGraph *mk_mps_graph_get(mk_device *d, const char *op, int dtype, const void *args, size_t nbytes,
                          MKGraph * (^build)(void)) {
    char ckey[MK_GRAPH_KEY_MAX];
    if (mk_shim_graph_key(ckey, sizeof ckey, op, dtype, args, nbytes) != MK_OK) return nil;
    NSString *key = [NSString stringWithUTF8String:ckey];
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

MPSGraphTensor *mk_mps_activation(MPSGraph *G, MPSGraphTensor *x, int act) {
    MPSDataType f = MPSDataTypeFloat32;
    switch (act) {
    case MK_ACT_RELU:       // select, not reLU: NaN stays NaN as in torch
        return [G selectWithPredicateTensor:[G lessThanWithPrimaryTensor:x
                                                          secondaryTensor:[G constantWithScalar:0 dataType:f] name:nil]
                        truePredicateTensor:[G constantWithScalar:0 dataType:f] falsePredicateTensor:x name:@"relu"];
    case MK_ACT_GELU: {     // 0.5 x (1 + erf(x / sqrt 2))
        MPSGraphTensor *e = [G erfWithTensor:[G multiplicationWithPrimaryTensor:x
                                                                secondaryTensor:[G constantWithScalar:0.7071067811865476 dataType:f]
                                                                           name:nil] name:nil];
        MPSGraphTensor *h = [G multiplicationWithPrimaryTensor:x secondaryTensor:[G constantWithScalar:0.5 dataType:f] name:nil];
        return [G multiplicationWithPrimaryTensor:h
                                  secondaryTensor:[G additionWithPrimaryTensor:e secondaryTensor:[G constantWithScalar:1 dataType:f] name:nil]
                                             name:@"gelu"];
    }
    case MK_ACT_GELU_TANH: {   // x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        MPSGraphTensor *x3 = [G multiplicationWithPrimaryTensor:[G multiplicationWithPrimaryTensor:x secondaryTensor:x name:nil]
                                                secondaryTensor:x name:nil];
        MPSGraphTensor *in = [G additionWithPrimaryTensor:x
                                          secondaryTensor:[G multiplicationWithPrimaryTensor:x3
                                                                             secondaryTensor:[G constantWithScalar:0.044715 dataType:f]
                                                                                        name:nil] name:nil];
        MPSGraphTensor *u2 = [G multiplicationWithPrimaryTensor:in secondaryTensor:[G constantWithScalar:1.5957691216057308 dataType:f]
                                                           name:nil];
        return [G multiplicationWithPrimaryTensor:x secondaryTensor:[G sigmoidWithTensor:u2 name:nil] name:@"gelu_tanh"];
    }
    case MK_ACT_SILU:
        return [G multiplicationWithPrimaryTensor:x secondaryTensor:[G sigmoidWithTensor:x name:nil] name:@"silu"];
    default:
        return x;
    }
}

static size_t tensor_bytes(MPSGraphTensor *x) {
    int64_t dims[16];
    NSUInteger n = 0;
    for (NSNumber *v in [x.shape subarrayWithRange:NSMakeRange(0, MIN(x.shape.count, 16u))])
        dims[n++] = v.longLongValue;
    return x.shape.count > 16 ? SIZE_MAX : mk_shim_tensor_bytes((int)n, dims, ((size_t)x.dataType & 0xFFFF) / 8);   // MPSDataType's low bits: bits per element
}

static mk_graph_io io_of(mk_buffer *b) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    mk_graph_io io = {b, mb.offset, (__bridge const void *)mb.buffer};
    return io;
}

static void *view(mk_buffer *b) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    return (char *)mb.buffer.contents + mb.offset;
}

// The data of `b` as MPSGraphTensorData of tensor `x`: its own MTLBuffer, or a scratch copy.
static MPSGraphTensorData *feed(MKMetalDevice *md, mk_buffer *b, MPSGraphTensor *x, int scratch) {
    MKMetalBuffer *mb = mk_metal_buffer(b);
    id<MTLBuffer> src = mb.buffer;
    if (scratch) {
        src = [md.device newBufferWithBytes:(const char *)mb.buffer.contents + mb.offset
                                     length:mk_shim_alloc_length(tensor_bytes(x)) options:MTLResourceStorageModeShared];
        if (!src) return nil;
    }
    return [[MPSGraphTensorData alloc] initWithMTLBuffer:src shape:x.shape dataType:x.dataType];
}

mk_status mk_mps_graph_run(mk_device *d, MKGraph *g, mk_buffer *const *in, mk_buffer *const *out,
                           mk_timing *t, const char *op) {
    MKMetalDevice *md = mk_metal_device(d);
    mk_graph_io ins[MK_GRAPH_IO_MAX], outs[MK_GRAPH_IO_MAX];
    size_t in_bytes[MK_GRAPH_IO_MAX], out_bytes[MK_GRAPH_IO_MAX];
    int in_scratch[MK_GRAPH_IO_MAX], out_scratch[MK_GRAPH_IO_MAX];
    NSArray<MPSGraphTensor *> *inputs = [g.inputs subarrayWithRange:NSMakeRange(0, MIN(g.inputs.count, MK_GRAPH_IO_MAX))];
    NSArray<MPSGraphTensor *> *outputs = [g.outputs subarrayWithRange:NSMakeRange(0, MIN(g.outputs.count, MK_GRAPH_IO_MAX))];
    NSUInteger nin = inputs.count, nout = outputs.count;
    for (MPSGraphTensor *x in inputs) {
        NSUInteger i = [inputs indexOfObject:x];
        ins[i] = io_of(in[i]);
        in_bytes[i] = tensor_bytes(x);
    }
    for (MPSGraphTensor *y in outputs) {
        NSUInteger j = [outputs indexOfObject:y];
        outs[j] = io_of(out[j]);
        out_bytes[j] = tensor_bytes(y);
    }
    mk_status st = mk_shim_graph_prepare(d, ins, in_bytes, (int)g.inputs.count, outs, out_bytes, (int)g.outputs.count,
                                         in_scratch, out_scratch, op);
    if (st != MK_OK) return st;
    @synchronized(g) {
        mk_shim_each(in, (int)nin, mk_metal_upload);
        mk_shim_each(out, (int)nout, mk_metal_upload);

        // Wall time covers the scratch copies too; GPU time spans the first underlying command
        // buffer to the last (MPSGraph may commit parts while encoding: commitAndContinue).
        double t0 = mk_shim_now_ms();
        NSMutableDictionary<MPSGraphTensor *, MPSGraphTensorData *> *feeds = [NSMutableDictionary dictionary];
        NSMutableDictionary<MPSGraphTensor *, MPSGraphTensorData *> *results = [NSMutableDictionary dictionary];
        void *dst[MK_GRAPH_IO_MAX] = {0}, *scratch_view[MK_GRAPH_IO_MAX] = {0};
        NSMutableArray<id<MTLBuffer>> *scratch = [NSMutableArray array];    // keeps the staging buffers alive
        for (MPSGraphTensor *x in inputs) {
            NSUInteger i = [inputs indexOfObject:x];
            MPSGraphTensorData *td = feed(md, in[i], x, in_scratch[i]);
            if (!td) return mk_set_error(MK_ERR_NOMEM, "%s: scratch buffer for input %lu", op, (unsigned long)i);
            feeds[x] = td;
        }
        for (MPSGraphTensor *y in outputs) {
            NSUInteger j = [outputs indexOfObject:y];
            id<MTLBuffer> buf = out_scratch[j] ? [md.device newBufferWithLength:mk_shim_alloc_length(out_bytes[j])
                                                                       options:MTLResourceStorageModeShared]
                                               : mk_metal_buffer(out[j]).buffer;
            if (!buf) return mk_set_error(MK_ERR_NOMEM, "%s: scratch buffer of %zu bytes", op, out_bytes[j]);
            [scratch addObject:buf];
            dst[j] = view(out[j]);
            scratch_view[j] = buf.contents;
            results[y] = [[MPSGraphTensorData alloc] initWithMTLBuffer:buf shape:y.shape dataType:y.dataType];
        }
        // every command buffer's errors: the first and the last root command buffers (MPSGraph
        // may commit others between), and the execution's own error for any of them
        __block NSString *exec_error = nil;
        dispatch_semaphore_t done = dispatch_semaphore_create(0);
        MPSGraphExecutionDescriptor *exec = [MPSGraphExecutionDescriptor new];
        exec.completionHandler = ^(MPSGraphTensorDataDictionary *r, NSError *error) {
            exec_error = error.localizedDescription;
            dispatch_semaphore_signal(done);
        };
        MPSCommandBuffer *cb = [MPSCommandBuffer commandBufferFromCommandQueue:md.queue];
        id<MTLCommandBuffer> first = cb.rootCommandBuffer;
        [g.graph encodeToCommandBuffer:cb feeds:feeds targetOperations:nil resultsDictionary:results
                   executionDescriptor:exec];
        id<MTLCommandBuffer> last = cb.rootCommandBuffer;   // the live one after any commitAndContinue
        [cb commit];
        [last waitUntilCompleted];
        [first waitUntilCompleted];
        // the handler follows completion; a second is plenty (none: no error reported by it)
        dispatch_semaphore_wait(done, dispatch_time(DISPATCH_TIME_NOW, NSEC_PER_SEC));
        mk_cb_errors errs;
        mk_cb_errors_init(&errs);
        mk_metal_add_command_buffer(&errs, first);
        if (last != first) mk_metal_add_command_buffer(&errs, last);
        if (exec_error) mk_cb_errors_add(&errs, 1, exec_error.UTF8String, 0, 0);
        if ((st = mk_cb_errors_finish(&errs, op, t0, t)) != MK_OK) return st;
        mk_shim_graph_copy_back(dst, (const void *const *)scratch_view, out_bytes, out_scratch, (int)nout);
        mk_shim_each(out, (int)nout, mk_metal_download);
        mk_shim_set_wall(t, t0);
        return MK_OK;
    }
}

mk_status mk_mps_op(const char *op, mk_device *d, int dtype, mk_timing *t,
                    mk_status (^check)(int *empty), mk_status (^body)(void)) {
    return mk_objc_guard(op, ^mk_status {
        int empty = 0;
        mk_status st = mk_mps_check(d, dtype, op);
        if (st != MK_OK || (st = check(&empty)) != MK_OK) return st;
        if (empty) return mk_mps_done(MK_OK, t);
        return body();
    });
}
