// mk_mps_pool.m: max / avg pool2d on MPSGraph with torch's semantics in every case.
//
// MPSGraph's own padding and ceilMode disagree with torch for avg pooling when ceil_mode
// and count_include_pad meet (windows running past the padded edge), and it has no
// divisor_override. So the padding is never left to MPSGraph: the input is padded
// explicitly (-inf for max, 0 for avg) far enough that an unpadded floor-mode pooling
// yields exactly our P x Q windows (extra rows from floor mode are sliced off;
// mk_mps_window_plan_make). Max pooling is then exact. Avg pooling is computed as a window
// sum (MPSGraph's average over the full kh*kw window, times kh*kw, in float32) divided by
// torch's divisor for each output position, which the host computes once per shape
// (mk_mps_avg_divisors: count_include_pad clips the window to H + pad_h_end,
// count_include_pad=False to the input, divisor_override replaces both).
#import "mk_mps.h"

#include <math.h>

#define OP "mk_mps_pool2d"

mk_status mk_mps_pool2d(mk_device *d, const mk_pool2d_args *a, int dtype, mk_buffer *x,
                        mk_buffer *y, mk_buffer *indices, mk_timing *t) {
    return mk_mps_op(OP, d, dtype, t, ^mk_status(int *empty) {
        if (indices && a && a->mode != MK_POOL_MAX)
            return mk_set_error(MK_ERR_INVALID, OP ": indices are for max pooling only (mode %d)", a->mode);
        return mk_mps_pool2d_check(a, empty);
    }, ^mk_status {
        if (a->mode == MK_POOL_ADAPTIVE_AVG) return mk_mps_adaptive_avg_pool2d(d, a, dtype, x, y, t);
        if (indices) return mk_mps_max_pool2d_indices(d, a, dtype, x, y, indices, t);
        mk_status st;
        mk_mps_window_plan wp;
        if ((st = mk_mps_pool2d_plan(a, &wp)) != MK_OK) return st;
        const BOOL avg = mk_mps_pool2d_is_avg(a);
        MKGraph *g = mk_mps_graph_get(d, OP, dtype, a, sizeof *a, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->H, a->W) dataType:dt name:@"x"];
            MPSGraphTensor *v = tx;
            if (avg) v = mk_mps_to32(G, v);
            if (a->pad_h || a->pad_w || wp.pb || wp.pr)
                v = [G padTensor:v withPaddingMode:MPSGraphPaddingModeConstant
                     leftPadding:MK_SHAPE(0, 0, a->pad_h, a->pad_w) rightPadding:MK_SHAPE(0, 0, wp.pb, wp.pr)
                   constantValue:(avg ? 0.0 : -INFINITY) name:@"padded"];
            MPSGraphPooling2DOpDescriptor *desc = [MPSGraphPooling2DOpDescriptor
                descriptorWithKernelWidth:(NSUInteger)a->kw kernelHeight:(NSUInteger)a->kh
                                strideInX:(NSUInteger)a->stride_w strideInY:(NSUInteger)a->stride_h
                          dilationRateInX:(NSUInteger)a->dil_w dilationRateInY:(NSUInteger)a->dil_h
                              paddingLeft:0 paddingRight:0 paddingTop:0 paddingBottom:0
                             paddingStyle:MPSGraphPaddingStyleExplicit
                               dataLayout:MPSGraphTensorNamedDataLayoutNCHW];
            if (!desc) { mk_set_error(MK_ERR_UNSUPPORTED, OP ": MPSGraph rejected the pooling descriptor"); return nil; }
            if (avg) {
                desc.includeZeroPadToAverage = YES;   // no padding is left to it; stated for clarity
                v = [G avgPooling2DWithSourceTensor:v descriptor:desc name:@"avg"];
            } else {
                // MPSGraph's max reductions need not propagate NaN (torch's max_pool2d does):
                // pool a NaN indicator alongside; a window that held a NaN gives NaN
                MPSGraphTensor *nan = [G castTensor:[G isNaNWithTensor:tx name:nil] toType:MPSDataTypeFloat32
                                               name:@"is_nan"];
                if (a->pad_h || a->pad_w || wp.pb || wp.pr)
                    nan = [G padTensor:nan withPaddingMode:MPSGraphPaddingModeConstant
                           leftPadding:MK_SHAPE(0, 0, a->pad_h, a->pad_w) rightPadding:MK_SHAPE(0, 0, wp.pb, wp.pr)
                         constantValue:0.0 name:nil];
                MPSGraphTensor *hit = [G maxPooling2DWithSourceTensor:nan descriptor:desc name:@"nan_window"];
                MPSGraphTensor *zero = [G constantWithScalar:0.0 dataType:MPSDataTypeFloat32];
                v = [G maxPooling2DWithSourceTensor:v descriptor:desc name:@"max"];
                v = [G selectWithPredicateTensor:[G greaterThanWithPrimaryTensor:hit secondaryTensor:zero name:nil]
                             truePredicateTensor:[G constantWithScalar:NAN dataType:v.dataType]
                            falsePredicateTensor:v name:@"max_nan"];
            }
            if (wp.gp > a->P) v = [G sliceTensor:v dimension:2 start:0 length:a->P name:nil];
            if (wp.gq > a->Q) v = [G sliceTensor:v dimension:3 start:0 length:a->Q name:nil];
            if (avg) {
                MPSGraphTensor *window = [G constantWithScalar:(double)a->kh * a->kw dataType:MPSDataTypeFloat32];
                NSMutableData *divisors = [NSMutableData dataWithLength:(NSUInteger)a->P * a->Q * sizeof(float)];
                mk_mps_avg_divisors(a, divisors.mutableBytes);
                MPSGraphTensor *div = [G constantWithData:divisors shape:MK_SHAPE(1, 1, a->P, a->Q)
                                                 dataType:MPSDataTypeFloat32];
                v = [G multiplicationWithPrimaryTensor:v secondaryTensor:window name:@"sum"];
                v = [G divisionWithPrimaryTensor:v secondaryTensor:div name:@"mean"];
                v = mk_mps_from32(G, v, dt);
            }
            return mk_mps_graph_of(G, @[tx], @[v]);
        });
        if (!g) return MK_ERR_UNSUPPORTED;
        mk_buffer *in[1] = {x}, *out[1] = {y};
        return mk_mps_graph_run(d, g, in, out, t, OP);
    });
}
