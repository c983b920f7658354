// mk_mps_conv.m: conv2d on MPSGraph (convolution2DWithSourceTensor:weightsTensor:...),
// NCHW input, OIHW weights, groups (depthwise included), float32 bias and the fused activation
// (mk_mps_activation) applied in float32 in the same graph.
//
// Output size: our P/Q come from the Python layer (torch's rules, "same" with an even
// kernel pads more at the bottom/right). MPSGraph with explicit padding yields
// floor((H + top + bottom - span) / stride) + 1 rows, so bottom/right padding is chosen to
// make that P exactly; when P needs less than no padding (floor mode drops rows), the extra
// rows are sliced off (mk_mps_window_plan_make). C == 0 is done on the host.
#import "mk_mps.h"

#define OP "mk_mps_conv2d"

mk_status mk_mps_conv2d(mk_device *d, const mk_conv2d_args *a, int dtype, mk_buffer *x,
                        mk_buffer *w, mk_buffer *bias, mk_buffer *y, mk_timing *t) {
    return mk_mps_op(OP, d, dtype, t, ^mk_status(int *empty) {
        return mk_mps_conv2d_check(a, bias, empty);
    }, ^mk_status {
        mk_status st;
        // C == 0, an empty sum: the output is the bias (or 0); MPSGraph has no empty convolution
        if (mk_mps_conv2d_host(d, a, dtype, bias, y, &st)) return mk_mps_done(st, t);
        mk_mps_window_plan wp;
        if ((st = mk_mps_conv2d_plan(a, &wp)) != MK_OK) return st;
        MKGraph *g = mk_mps_graph_get(d, OP, dtype, a, sizeof *a, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->H, a->W) dataType:dt name:@"x"];
            MPSGraphTensor *tw = [G placeholderWithShape:MK_SHAPE(a->K, a->C / a->groups, a->R, a->S)
                                                dataType:dt name:@"w"];
            MPSGraphConvolution2DOpDescriptor *desc = [MPSGraphConvolution2DOpDescriptor
                descriptorWithStrideInX:(NSUInteger)a->stride_w strideInY:(NSUInteger)a->stride_h
                        dilationRateInX:(NSUInteger)a->dil_w dilationRateInY:(NSUInteger)a->dil_h
                                 groups:(NSUInteger)a->groups
                            paddingLeft:(NSUInteger)a->pad_w paddingRight:(NSUInteger)wp.pr
                             paddingTop:(NSUInteger)a->pad_h paddingBottom:(NSUInteger)wp.pb
                           paddingStyle:MPSGraphPaddingStyleExplicit
                             dataLayout:MPSGraphTensorNamedDataLayoutNCHW
                          weightsLayout:MPSGraphTensorNamedDataLayoutOIHW];
            if (!desc) { mk_set_error(MK_ERR_UNSUPPORTED, OP ": MPSGraph rejected the convolution descriptor"); return nil; }
            MPSGraphTensor *ty = [G convolution2DWithSourceTensor:tx weightsTensor:tw descriptor:desc name:@"conv"];
            if (wp.gp > a->P) ty = [G sliceTensor:ty dimension:2 start:0 length:a->P name:nil];
            if (wp.gq > a->Q) ty = [G sliceTensor:ty dimension:3 start:0 length:a->Q name:nil];
            NSMutableArray *ins = [NSMutableArray arrayWithObjects:tx, tw, nil];
            if (a->has_bias || a->activation) {   // bias, then the fused activation, in float32
                MPSGraphTensor *y32 = mk_mps_to32(G, ty);
                if (a->has_bias) {
                    MPSGraphTensor *tb = [G placeholderWithShape:MK_SHAPE(a->K) dataType:MPSDataTypeFloat32
                                                            name:@"bias"];
                    [ins addObject:tb];
                    y32 = [G additionWithPrimaryTensor:y32
                                       secondaryTensor:[G reshapeTensor:tb withShape:MK_SHAPE(1, a->K, 1, 1) name:nil]
                                                  name:@"biased"];
                }
                ty = mk_mps_from32(G, mk_mps_activation(G, y32, a->activation), dt);
            }
            return mk_mps_graph_of(G, ins, @[ty]);
        });
        if (!g) return MK_ERR_UNSUPPORTED;
        mk_buffer *in[3] = {x, w, bias}, *out[1] = {y};
        return mk_mps_graph_run(d, g, in, out, t, OP);
    });
}
