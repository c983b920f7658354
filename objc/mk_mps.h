// mk_mps.h: what the MPS primitives (objc/mk_mps*.m) share: dtype mapping, the MPSGraph
// cache (graphs are built once per shape key and reused), and the runner that binds our
// buffers to a graph's placeholders and results inside one MPSCommandBuffer.
#ifndef MK_MPS_H
#define MK_MPS_H

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>
#import "mk_metal.h"
#include "mk_mps_host.h"

// A built graph: placeholders fed from input buffers and tensors written to output
// buffers, both in the order the op passes its buffers to mk_mps_graph_run.
@interface MKGraph : NSObject
@property (nonatomic, strong) MPSGraph *graph;
@property (nonatomic, strong) NSArray<MPSGraphTensor *> *inputs;
@property (nonatomic, strong) NSArray<MPSGraphTensor *> *outputs;
@end

static inline MPSDataType mk_mps_dtype(int dtype) {
    return dtype == MK_F16 ? MPSDataTypeFloat16 : MPSDataTypeFloat32;
}

// The graph cached on this device for (op, dtype, every byte of the argument struct
// `args`), built by `build` on first use (nil from `build` means it failed and left an
// error; so does nil from here).
MKGraph *mk_mps_graph_get(mk_device *d, const char *op, int dtype, const void *args, size_t nbytes,
                          MKGraph * (^build)(void));

// Runs `g` once: in[i] feeds g.inputs[i], g.outputs[j] lands in out[j] (at most 8 each).
// Checks every buffer against its tensor's size, stages buffers whose data does not start
// at offset 0 of their MTLBuffer and outputs that alias inputs through scratch buffers
// (mk_shim_graph_staging), mirrors copy-mode buffers, collects the errors of every command
// buffer and fills *t. Graphs are not re-entrant: one run at a time per graph.
mk_status mk_mps_graph_run(mk_device *d, MKGraph *g, mk_buffer *const *in, mk_buffer *const *out,
                           mk_timing *t, const char *op);

// The frame of an MPSGraph op: an autorelease pool and an exception guard (mk_objc_exception
// naming `op`) around the device/dtype check (mk_mps_check), the op's own argument check
// (`check` sets *empty for a problem with no output), then `body`. An empty problem is done
// (*t zeroed) without a graph.
mk_status mk_mps_op(const char *op, mk_device *d, int dtype, mk_timing *t,
                    mk_status (^check)(int *empty), mk_status (^body)(void));

// The fused activation MK_ACT_* of gemm / conv2d on a float32 tensor, in the same graph
// (torch's formulas: relu keeps NaN, gelu with erf, gelu_tanh as x * sigmoid(2u), silu).
MPSGraphTensor *mk_mps_activation(MPSGraph *G, MPSGraphTensor *x, int act);

// The pool2d variants mk_mps_pool2d routes to (objc/mk_mps_pool_windows.m; arguments
// checked, nothing empty): MK_POOL_ADAPTIVE_AVG, and max with int64 indices.
mk_status mk_mps_adaptive_avg_pool2d(mk_device *d, const mk_pool2d_args *a, int dtype, mk_buffer *x,
                                     mk_buffer *y, mk_timing *t);
mk_status mk_mps_max_pool2d_indices(mk_device *d, const mk_pool2d_args *a, int dtype, mk_buffer *x,
                                    mk_buffer *y, mk_buffer *indices, mk_timing *t);
// The shape as an MPSShape.
MPSShape *mk_mps_shape(int n, const int64_t *dims);
#define MK_SHAPE(...) mk_mps_shape((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                                   (int64_t[]){__VA_ARGS__})

// An MKGraph of G with its input placeholders and output tensors (in mk_mps_graph_run's order).
static inline MKGraph *mk_mps_graph_of(MPSGraph *G, NSArray *ins, NSArray *outs) {
    MKGraph *r = [MKGraph new];
    r.graph = G;
    r.inputs = ins;
    r.outputs = outs;
    return r;
}

// Casts into and out of float32, where the graph computes (no-ops for float32 tensors).
static inline MPSGraphTensor *mk_mps_to32(MPSGraph *G, MPSGraphTensor *v) {
    return v.dataType == MPSDataTypeFloat32 ? v : [G castTensor:v toType:MPSDataTypeFloat32 name:@"f32"];
}
static inline MPSGraphTensor *mk_mps_from32(MPSGraph *G, MPSGraphTensor *v, MPSDataType dt) {
    return dt == MPSDataTypeFloat32 ? v : [G castTensor:v toType:dt name:@"out"];
}

#endif
