// mk_mps_pool_windows.m: adaptive_avg_pool2d and max_pool2d with indices on MPSGraph,
// built from slices so that torch's rules hold exactly: MPSGraph has no adaptive pooling,
// and its pooling-with-indices leaves ties and NaN to the implementation.
//
// adaptive avg: the rows of each output row p, [p*H/P, ceil((p+1)*H/P)) (mk_mps_adaptive_window),
// are summed by one slice and reduction each, the P sums concatenated; likewise the columns;
// then divided by the window sizes (a P x Q constant). P + Q slices: the usual heads are
// 1x1 to 7x7. float32 sums for both dtypes.
// max with indices: the input padded with -inf as mk_mps_pool.m pads it (mk_mps_pool2d_plan),
// and beside it a plane of input indices h*W + w (int32, -1 in the padding) padded alike.
// For each tap (i, j) of the window, in row-major order, one strided slice of both gives
// that tap's value and index for every output; it replaces the running (max, index) when
// greater or NaN (torch's rule: ties keep the first, the last NaN wins), from -inf at the
// window's first tap inside the input (mk_mps_first_taps). kh*kw slices; indices int64.
#import "mk_mps.h"

#include <math.h>

#define OP "mk_mps_pool2d"

mk_status mk_mps_adaptive_avg_pool2d(mk_device *d, const mk_pool2d_args *a, int dtype, mk_buffer *x,
                                     mk_buffer *y, mk_timing *t) {
    MKGraph *g = mk_mps_graph_get(d, OP "_adaptive", dtype, a, sizeof *a, ^MKGraph *{
        MPSGraph *G = [MPSGraph new];
        MPSDataType dt = mk_mps_dtype(dtype);
        MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->H, a->W) dataType:dt name:@"x"];
        MPSGraphTensor *v = mk_mps_to32(G, tx);
        NSMutableArray<MPSGraphTensor *> *rows = [NSMutableArray arrayWithCapacity:(NSUInteger)a->P];
        for (int p = 0; p < a->P; p++) {
            int64_t lo, hi;
            mk_mps_adaptive_window(p, a->P, a->H, &lo, &hi);
            MPSGraphTensor *s = [G sliceTensor:v dimension:2 start:(NSInteger)lo length:(NSInteger)(hi - lo) name:nil];
            [rows addObject:[G reductionSumWithTensor:s axis:2 name:nil]];
        }
        v = a->P == 1 ? rows[0] : [G concatTensors:rows dimension:2 name:@"row_sums"];
        NSMutableArray<MPSGraphTensor *> *cols = [NSMutableArray arrayWithCapacity:(NSUInteger)a->Q];
        NSMutableData *counts = [NSMutableData dataWithLength:(NSUInteger)a->P * a->Q * sizeof(float)];
        float *n = counts.mutableBytes;
        for (int q = 0; q < a->Q; q++) {
            int64_t lo, hi;
            mk_mps_adaptive_window(q, a->Q, a->W, &lo, &hi);
            MPSGraphTensor *s = [G sliceTensor:v dimension:3 start:(NSInteger)lo length:(NSInteger)(hi - lo) name:nil];
            [cols addObject:[G reductionSumWithTensor:s axis:3 name:nil]];
            for (int p = 0; p < a->P; p++) {
                int64_t h0, h1;
                mk_mps_adaptive_window(p, a->P, a->H, &h0, &h1);
                n[(int64_t)p * a->Q + q] = (float)((h1 - h0) * (hi - lo));
            }
        }
        v = a->Q == 1 ? cols[0] : [G concatTensors:cols dimension:3 name:@"sums"];
        MPSGraphTensor *div = [G constantWithData:counts shape:MK_SHAPE(1, 1, a->P, a->Q)
                                         dataType:MPSDataTypeFloat32];
        v = [G divisionWithPrimaryTensor:v secondaryTensor:div name:@"mean"];
        return mk_mps_graph_of(G, @[tx], @[mk_mps_from32(G, v, dt)]);
    });
    if (!g) return MK_ERR_UNSUPPORTED;
    mk_buffer *in[1] = {x}, *out[1] = {y};
    return mk_mps_graph_run(d, g, in, out, t, OP);
}

mk_status mk_mps_max_pool2d_indices(mk_device *d, const mk_pool2d_args *a, int dtype, mk_buffer *x,
                                    mk_buffer *y, mk_buffer *indices, mk_timing *t) {
    mk_mps_window_plan wp;
    mk_status st = mk_mps_pool2d_plan(a, &wp);
    if (st != MK_OK) return st;
    if ((int64_t)a->H * a->W >= INT32_MAX)
        return mk_set_error(MK_ERR_UNSUPPORTED, OP ": a plane of %d x %d has indices past int32", a->H, a->W);
    MKGraph *g = mk_mps_graph_get(d, OP "_indices", dtype, a, sizeof *a, ^MKGraph *{
        MPSGraph *G = [MPSGraph new];
        MPSDataType dt = mk_mps_dtype(dtype);
        MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->H, a->W) dataType:dt name:@"x"];
        NSMutableData *plane = [NSMutableData dataWithLength:(NSUInteger)a->H * a->W * sizeof(int32_t)];
        int32_t *pi = plane.mutableBytes;
        for (int64_t i = 0; i < (int64_t)a->H * a->W; i++) pi[i] = (int32_t)i;
        MPSGraphTensor *xi = [G constantWithData:plane shape:MK_SHAPE(1, 1, a->H, a->W) dataType:MPSDataTypeInt32];
        MPSGraphTensor *xv = mk_mps_to32(G, tx);
        if (a->pad_h || a->pad_w || wp.pb || wp.pr) {
            xv = [G padTensor:xv withPaddingMode:MPSGraphPaddingModeConstant
                  leftPadding:MK_SHAPE(0, 0, a->pad_h, a->pad_w) rightPadding:MK_SHAPE(0, 0, wp.pb, wp.pr)
                constantValue:-INFINITY name:@"padded"];
            xi = [G padTensor:xi withPaddingMode:MPSGraphPaddingModeConstant
                  leftPadding:MK_SHAPE(0, 0, a->pad_h, a->pad_w) rightPadding:MK_SHAPE(0, 0, wp.pb, wp.pr)
                constantValue:-1.0 name:@"padded_index"];
        }
        NSMutableData *first = [NSMutableData dataWithLength:(NSUInteger)a->P * a->Q * sizeof(int32_t)];
        mk_mps_first_taps(a, first.mutableBytes);
        MPSGraphTensor *at = [G constantWithData:first shape:MK_SHAPE(1, 1, a->P, a->Q) dataType:MPSDataTypeInt32];
        MPSGraphTensor *m = [G constantWithScalar:-INFINITY shape:MK_SHAPE(a->N, a->C, a->P, a->Q)
                                         dataType:MPSDataTypeFloat32];
        at = [G broadcastTensor:at toShape:MK_SHAPE(a->N, a->C, a->P, a->Q) name:nil];
        for (int i = 0; i < a->kh; i++)
            for (int j = 0; j < a->kw; j++) {
                // tap (i, j) of window (p, q) sits at (p*stride_h + i*dil_h, q*stride_w + j*dil_w)
                // of the padded plane (windows start at p*stride - pad)
                NSArray<NSNumber *> *starts = @[@0, @0, @((NSInteger)i * a->dil_h), @((NSInteger)j * a->dil_w)];
                NSArray<NSNumber *> *ends = @[@(a->N), @(a->C),
                    @((NSInteger)i * a->dil_h + (NSInteger)(a->P - 1) * a->stride_h + 1),
                    @((NSInteger)j * a->dil_w + (NSInteger)(a->Q - 1) * a->stride_w + 1)];
                NSArray<NSNumber *> *strides = @[@1, @1, @(a->stride_h), @(a->stride_w)];
                MPSGraphTensor *v = [G sliceTensor:xv starts:starts ends:ends strides:strides name:nil];
                NSArray<NSNumber *> *ends1 = @[@1, @1, ends[2], ends[3]];
                MPSGraphTensor *vi = [G sliceTensor:xi starts:starts ends:ends1 strides:strides name:nil];
                MPSGraphTensor *win = [G logicalORWithPrimaryTensor:[G greaterThanWithPrimaryTensor:v secondaryTensor:m name:nil]
                                                    secondaryTensor:[G isNaNWithTensor:v name:nil] name:nil];
                m = [G selectWithPredicateTensor:win truePredicateTensor:v falsePredicateTensor:m name:nil];
                at = [G selectWithPredicateTensor:win truePredicateTensor:vi falsePredicateTensor:at name:nil];
            }
        MPSGraphTensor *outs[2] = {mk_mps_from32(G, m, dt), [G castTensor:at toType:MPSDataTypeInt64 name:@"indices"]};
        return mk_mps_graph_of(G, @[tx], @[outs[0], outs[1]]);
    });
    if (!g) return MK_ERR_UNSUPPORTED;
    mk_buffer *in[1] = {x}, *out[2] = {y, indices};
    return mk_mps_graph_run(d, g, in, out, t, OP);
}
