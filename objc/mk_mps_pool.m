// mk_mps_pool.m: max / avg pool2d on MPSGraph with torch's semantics in every case.
//
// MPSGraph's own padding and ceilMode disagree with torch for avg pooling when ceil_mode
// and count_include_pad meet (windows running past the padded edge), and it has no
// divisor_override. So the padding is never left to MPSGraph: the input is padded
// explicitly (-inf for max, 0 for avg) far enough that an unpadded floor-mode pooling
// yields exactly our P x Q windows (extra rows from floor mode are sliced off). Max pooling
// is then exact. Avg pooling is computed as a window sum (MPSGraph's average over the
// full kh*kw window, times kh*kw, in float32) divided by torch's divisor for each output
// position, which the host computes once per shape (count_include_pad clips the window to
// H + pad_h_end, count_include_pad=False to the input, divisor_override replaces both).
#import "mk_mps.h"
#include "mk_mps_math.h"

#include <math.h>

#define OP "mk_mps_pool2d"

mk_status mk_mps_pool2d(mk_device *d, const mk_pool2d_args *a, int dtype, mk_buffer *x,
                        mk_buffer *y, mk_timing *t) {
    @autoreleasepool {
        mk_status st = mk_mps_check(d, dtype, OP);
        if (st != MK_OK) return st;
        if (!a) return mk_set_error(MK_ERR_INVALID, OP ": args is NULL");
        if (a->mode != MK_POOL_MAX && a->mode != MK_POOL_AVG)
            return mk_set_error(MK_ERR_INVALID, OP ": mode %d is neither max (%d) nor avg (%d)",
                                a->mode, MK_POOL_MAX, MK_POOL_AVG);
        if (a->kh < 1 || a->kw < 1 || a->stride_h < 1 || a->stride_w < 1 || a->dil_h < 1 || a->dil_w < 1 ||
            a->pad_h < 0 || a->pad_w < 0)
            return mk_set_error(MK_ERR_INVALID, OP ": invalid kernel %dx%d, stride %dx%d, dilation %dx%d or "
                                "padding %dx%d", a->kh, a->kw, a->stride_h, a->stride_w, a->dil_h, a->dil_w,
                                a->pad_h, a->pad_w);
        if ((int64_t)a->N * a->C * a->P * a->Q == 0) return mk_mps_nothing(t);
        int64_t pb = mk_mps_end_pad(a->H, a->pad_h, a->P, a->stride_h, a->dil_h, a->kh);
        int64_t pr = mk_mps_end_pad(a->W, a->pad_w, a->Q, a->stride_w, a->dil_w, a->kw);
        int64_t gp = mk_mps_floor_windows((int64_t)a->H + a->pad_h + pb, a->stride_h, a->dil_h, a->kh);
        int64_t gq = mk_mps_floor_windows((int64_t)a->W + a->pad_w + pr, a->stride_w, a->dil_w, a->kw);
        if (gp < a->P || gq < a->Q)
            return mk_set_error(MK_ERR_INVALID, OP ": output %dx%d cannot come from input %dx%d with these "
                                "kernel, stride, dilation and padding", a->P, a->Q, a->H, a->W);
        BOOL avg = a->mode == MK_POOL_AVG;
        NSString *key = [NSString stringWithFormat:@"pool2d:%d:%d:%d,%d,%d,%d:%d,%d:%d,%d:%d,%d:%d,%d:%d,%d:%d,%d,%d:%d,%d",
                         dtype, a->mode, a->N, a->C, a->H, a->W, a->P, a->Q, a->kh, a->kw, a->stride_h, a->stride_w,
                         a->pad_h, a->pad_w, a->dil_h, a->dil_w, a->count_include_pad, a->divisor, avg,
                         a->pad_h_end, a->pad_w_end];
        MKGraph *g = mk_mps_graph_get(d, key, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->H, a->W) dataType:dt name:@"x"];
            MPSGraphTensor *v = tx;
            if (avg) v = mk_mps_to32(G, v);
            if (a->pad_h || a->pad_w || pb || pr)
                v = [G padTensor:v withPaddingMode:MPSGraphPaddingModeConstant
                     leftPadding:MK_SHAPE(0, 0, a->pad_h, a->pad_w) rightPadding:MK_SHAPE(0, 0, pb, pr)
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
                v = [G maxPooling2DWithSourceTensor:v descriptor:desc name:@"max"];
            }
            if (gp > a->P) v = [G sliceTensor:v dimension:2 start:0 length:a->P name:nil];
            if (gq > a->Q) v = [G sliceTensor:v dimension:3 start:0 length:a->Q name:nil];
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
    }
}
