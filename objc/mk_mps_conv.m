// mk_mps_conv.m: conv2d on MPSGraph (convolution2DWithSourceTensor:weightsTensor:...),
// NCHW input, OIHW weights, groups (depthwise included), float32 bias added in float32.
//
// Output size: our P/Q come from the Python layer (torch's rules, "same" with an even
// kernel pads more at the bottom/right). MPSGraph with explicit padding yields
// floor((H + top + bottom - span) / stride) + 1 rows, so bottom/right padding is chosen to
// make that P exactly; when P needs less than no padding (floor mode drops rows), the extra
// rows are sliced off.
#import "mk_mps.h"
#include "mk_mps_math.h"

#define OP "mk_mps_conv2d"

mk_status mk_mps_conv2d(mk_device *d, const mk_conv2d_args *a, int dtype, mk_buffer *x,
                        mk_buffer *w, mk_buffer *bias, mk_buffer *y, mk_timing *t) {
    @autoreleasepool {
        mk_status st = mk_mps_check(d, dtype, OP);
        if (st != MK_OK) return st;
        if (!a) return mk_set_error(MK_ERR_INVALID, OP ": args is NULL");
        if (a->groups < 1 || a->C % a->groups || a->K % a->groups || a->stride_h < 1 || a->stride_w < 1 ||
            a->dil_h < 1 || a->dil_w < 1 || a->pad_h < 0 || a->pad_w < 0)
            return mk_set_error(MK_ERR_INVALID, OP ": invalid arguments (C %d, K %d, groups %d, stride %dx%d, "
                                "dilation %dx%d, padding %dx%d)", a->C, a->K, a->groups, a->stride_h, a->stride_w,
                                a->dil_h, a->dil_w, a->pad_h, a->pad_w);
        if ((int64_t)a->N * a->K * a->P * a->Q == 0) return mk_mps_nothing(t);
        if (a->C == 0) {   // an empty sum: the output is the bias (or 0); MPSGraph has no empty convolution
            if ((st = mk_metal_check_buffer(d, y, (size_t)a->N * a->K * a->P * a->Q * mk_mps_esize(dtype), OP, "y")) != MK_OK ||
                (a->has_bias && (st = mk_metal_check_buffer(d, bias, (size_t)a->K * 4, OP, "bias")) != MK_OK))
                return st;
            size_t plane = (size_t)a->P * a->Q;
            for (size_t i = 0; i < (size_t)a->N * a->K * plane; i++) {
                float v = a->has_bias ? ((const float *)bias->host)[(i / plane) % (size_t)a->K] : 0.0f;
                if (dtype == MK_F16) ((_Float16 *)y->host)[i] = (_Float16)v;
                else ((float *)y->host)[i] = v;
            }
            return mk_mps_nothing(t);
        }
        int64_t pb = mk_mps_end_pad(a->H, a->pad_h, a->P, a->stride_h, a->dil_h, a->R);
        int64_t pr = mk_mps_end_pad(a->W, a->pad_w, a->Q, a->stride_w, a->dil_w, a->S);
        int64_t gp = mk_mps_floor_windows((int64_t)a->H + a->pad_h + pb, a->stride_h, a->dil_h, a->R);
        int64_t gq = mk_mps_floor_windows((int64_t)a->W + a->pad_w + pr, a->stride_w, a->dil_w, a->S);
        if (gp < a->P || gq < a->Q)
            return mk_set_error(MK_ERR_INVALID, OP ": output %dx%d cannot come from input %dx%d with these "
                                "kernel, stride, dilation and padding", a->P, a->Q, a->H, a->W);
        NSString *key = [NSString stringWithFormat:@"conv2d:%d:%d,%d,%d,%d:%d,%d,%d:%d,%d:%d,%d,%d,%d,%d,%d:%d:%d",
                         dtype, a->N, a->C, a->H, a->W, a->K, a->R, a->S, a->P, a->Q, a->stride_h, a->stride_w,
                         a->pad_h, a->pad_w, a->dil_h, a->dil_w, a->groups, a->has_bias];
        MKGraph *g = mk_mps_graph_get(d, key, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->H, a->W) dataType:dt name:@"x"];
            MPSGraphTensor *tw = [G placeholderWithShape:MK_SHAPE(a->K, a->C / a->groups, a->R, a->S)
                                                dataType:dt name:@"w"];
            MPSGraphConvolution2DOpDescriptor *desc = [MPSGraphConvolution2DOpDescriptor
                descriptorWithStrideInX:(NSUInteger)a->stride_w strideInY:(NSUInteger)a->stride_h
                        dilationRateInX:(NSUInteger)a->dil_w dilationRateInY:(NSUInteger)a->dil_h
                                 groups:(NSUInteger)a->groups
                            paddingLeft:(NSUInteger)a->pad_w paddingRight:(NSUInteger)pr
                             paddingTop:(NSUInteger)a->pad_h paddingBottom:(NSUInteger)pb
                           paddingStyle:MPSGraphPaddingStyleExplicit
                             dataLayout:MPSGraphTensorNamedDataLayoutNCHW
                          weightsLayout:MPSGraphTensorNamedDataLayoutOIHW];
            if (!desc) { mk_set_error(MK_ERR_UNSUPPORTED, OP ": MPSGraph rejected the convolution descriptor"); return nil; }
            MPSGraphTensor *ty = [G convolution2DWithSourceTensor:tx weightsTensor:tw descriptor:desc name:@"conv"];
            if (gp > a->P) ty = [G sliceTensor:ty dimension:2 start:0 length:a->P name:nil];
            if (gq > a->Q) ty = [G sliceTensor:ty dimension:3 start:0 length:a->Q name:nil];
            NSMutableArray *ins = [NSMutableArray arrayWithObjects:tx, tw, nil];
            if (a->has_bias) {
                MPSGraphTensor *tb = [G placeholderWithShape:MK_SHAPE(a->K) dataType:MPSDataTypeFloat32 name:@"bias"];
                [ins addObject:tb];
                MPSGraphTensor *y32 = [G additionWithPrimaryTensor:mk_mps_to32(G, ty)
                                   secondaryTensor:[G reshapeTensor:tb withShape:MK_SHAPE(1, a->K, 1, 1) name:nil]
                                              name:@"biased"];
                ty = mk_mps_from32(G, y32, dt);
            }
            return mk_mps_graph_of(G, ins, @[ty]);
        });
        if (!g) return MK_ERR_UNSUPPORTED;
        mk_buffer *in[3] = {x, w, bias};
        if (a->has_bias && !bias) return mk_set_error(MK_ERR_INVALID, OP ": has_bias is set but bias is NULL");
        mk_buffer *out[1] = {y};
        return mk_mps_graph_run(d, g, in, out, t, OP);
    }
}
