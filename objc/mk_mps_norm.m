// mk_mps_norm.m: layer_norm, rms_norm, group_norm and batch_norm on MPSGraph (meanOfTensor,
// varianceOfTensor, normalizationWithTensor). Statistics are computed in float32 (float16
// input is cast in the graph); weights, biases and running stats are float32 as in the ABI.
// batch_norm in training normalises with the batch's biased variance and, with running
// stats, updates them like torch: r = (1 - momentum) * r + momentum * stat, with the
// unbiased variance. The updated stats are graph results written back to the running-stat
// buffers (through scratch buffers, since the graph also reads them).
#import "mk_mps.h"

// Runs a graph whose inputs are x, then the weight and the bias where present (the order the
// layer/rms and group norm graphs add their placeholders in).
static mk_status run_affine(mk_device *d, MKGraph *g, mk_buffer *x, mk_buffer *weight,
                            mk_buffer *bias, mk_buffer *y, mk_timing *t, const char *op) {
    mk_buffer *in[3] = {x}, *out[1] = {y};
    int k = 1;
    if (weight) in[k++] = weight;
    if (bias) in[k++] = bias;
    return mk_mps_graph_run(d, g, in, out, t, op);
}


/* ---------------------------------------------------------------- layer / rms */

mk_status mk_mps_rownorm(mk_device *d, const mk_rownorm_args *a, int dtype, mk_buffer *x,
                         mk_buffer *weight, mk_buffer *bias, mk_buffer *y, mk_timing *t) {
    @autoreleasepool {
        const char *op = "mk_mps_rownorm";
        mk_status st = mk_mps_check(d, dtype, op);
        if (st != MK_OK) return st;
        if (!a) return mk_set_error(MK_ERR_INVALID, "%s: args is NULL", op);
        if (a->kind != MK_NORM_LAYER && a->kind != MK_NORM_RMS)
            return mk_set_error(MK_ERR_INVALID, "%s: kind %d is neither layer (%d) nor rms (%d)", op, a->kind,
                                MK_NORM_LAYER, MK_NORM_RMS);
        if ((a->has_weight && !weight) || (a->has_bias && !bias))
            return mk_set_error(MK_ERR_INVALID, "%s: has_weight/has_bias set without the buffer", op);
        if ((int64_t)a->rows * a->n == 0) return mk_mps_nothing(t);
        NSString *key = [NSString stringWithFormat:@"rownorm:%d:%d,%d:%d:%d,%d:%a", dtype, a->rows, a->n, a->kind,
                         a->has_weight, a->has_bias, (double)a->eps];
        MKGraph *g = mk_mps_graph_get(d, key, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->rows, a->n) dataType:dt name:@"x"];
            NSMutableArray *ins = [NSMutableArray arrayWithObject:tx];
            MPSGraphTensor *tw = nil, *tb = nil;
            if (a->has_weight) [ins addObject:(tw = [G placeholderWithShape:MK_SHAPE(1, a->n) dataType:MPSDataTypeFloat32 name:@"w"])];
            if (a->has_bias) [ins addObject:(tb = [G placeholderWithShape:MK_SHAPE(1, a->n) dataType:MPSDataTypeFloat32 name:@"b"])];
            MPSGraphTensor *v = mk_mps_to32(G, tx);
            if (a->kind == MK_NORM_LAYER) {
                MPSGraphTensor *mean = [G meanOfTensor:v axes:@[@1] name:@"mean"];
                MPSGraphTensor *var = [G varianceOfTensor:v meanTensor:mean axes:@[@1] name:@"var"];
                v = [G normalizationWithTensor:v meanTensor:mean varianceTensor:var gammaTensor:tw betaTensor:tb
                                       epsilon:a->eps name:@"layer_norm"];
            } else {
                MPSGraphTensor *ms = [G meanOfTensor:[G squareWithTensor:v name:nil] axes:@[@1] name:@"meansq"];
                MPSGraphTensor *eps = [G constantWithScalar:a->eps dataType:MPSDataTypeFloat32];
                MPSGraphTensor *inv = [G reverseSquareRootWithTensor:[G additionWithPrimaryTensor:ms secondaryTensor:eps name:nil]
                                                                name:@"rstd"];
                v = [G multiplicationWithPrimaryTensor:v secondaryTensor:inv name:@"rms_norm"];
                if (tw) v = [G multiplicationWithPrimaryTensor:v secondaryTensor:tw name:nil];
                if (tb) v = [G additionWithPrimaryTensor:v secondaryTensor:tb name:nil];
            }
            return mk_mps_graph_of(G, ins, @[mk_mps_from32(G, v, dt)]);
        });
        if (!g) return MK_ERR_UNSUPPORTED;
        return run_affine(d, g, x, a->has_weight ? weight : NULL, a->has_bias ? bias : NULL, y, t, op);
    }
}

/* ---------------------------------------------------------------- group norm */

mk_status mk_mps_group_norm(mk_device *d, const mk_group_norm_args *a, int dtype,
                            mk_buffer *x, mk_buffer *weight, mk_buffer *bias, mk_buffer *y,
                            mk_timing *t) {
    @autoreleasepool {
        const char *op = "mk_mps_group_norm";
        mk_status st = mk_mps_check(d, dtype, op);
        if (st != MK_OK) return st;
        if (!a) return mk_set_error(MK_ERR_INVALID, "%s: args is NULL", op);
        if (a->groups < 1 || a->C % a->groups)
            return mk_set_error(MK_ERR_INVALID, "%s: %d groups do not divide %d channels", op, a->groups, a->C);
        if ((a->has_weight && !weight) || (a->has_bias && !bias))
            return mk_set_error(MK_ERR_INVALID, "%s: has_weight/has_bias set without the buffer", op);
        if ((int64_t)a->N * a->C * a->HW == 0) return mk_mps_nothing(t);
        NSString *key = [NSString stringWithFormat:@"group_norm:%d:%d,%d,%d:%d:%d,%d:%a", dtype, a->N, a->C, a->HW,
                         a->groups, a->has_weight, a->has_bias, (double)a->eps];
        MKGraph *g = mk_mps_graph_get(d, key, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->HW) dataType:dt name:@"x"];
            NSMutableArray *ins = [NSMutableArray arrayWithObject:tx];
            MPSGraphTensor *tw = nil, *tb = nil;
            if (a->has_weight) [ins addObject:(tw = [G placeholderWithShape:MK_SHAPE(1, a->C, 1) dataType:MPSDataTypeFloat32 name:@"w"])];
            if (a->has_bias) [ins addObject:(tb = [G placeholderWithShape:MK_SHAPE(1, a->C, 1) dataType:MPSDataTypeFloat32 name:@"b"])];
            MPSGraphTensor *v = [G reshapeTensor:mk_mps_to32(G, tx)
                                       withShape:MK_SHAPE(a->N, a->groups, (int64_t)(a->C / a->groups) * a->HW) name:nil];
            MPSGraphTensor *mean = [G meanOfTensor:v axes:@[@2] name:@"mean"];
            MPSGraphTensor *var = [G varianceOfTensor:v meanTensor:mean axes:@[@2] name:@"var"];
            v = [G normalizationWithTensor:v meanTensor:mean varianceTensor:var gammaTensor:nil betaTensor:nil
                                   epsilon:a->eps name:@"group_norm"];
            v = [G reshapeTensor:v withShape:MK_SHAPE(a->N, a->C, a->HW) name:nil];
            if (tw) v = [G multiplicationWithPrimaryTensor:v secondaryTensor:tw name:nil];
            if (tb) v = [G additionWithPrimaryTensor:v secondaryTensor:tb name:nil];
            return mk_mps_graph_of(G, ins, @[mk_mps_from32(G, v, dt)]);
        });
        if (!g) return MK_ERR_UNSUPPORTED;
        return run_affine(d, g, x, a->has_weight ? weight : NULL, a->has_bias ? bias : NULL, y, t, op);
    }
}

/* ---------------------------------------------------------------- batch norm */

mk_status mk_mps_batch_norm(mk_device *d, const mk_batch_norm_args *a, int dtype,
                            mk_buffer *x, mk_buffer *running_mean, mk_buffer *running_var,
                            mk_buffer *weight, mk_buffer *bias, mk_buffer *y, mk_timing *t) {
    @autoreleasepool {
        const char *op = "mk_mps_batch_norm";
        mk_status st = mk_mps_check(d, dtype, op);
        if (st != MK_OK) return st;
        if (!a) return mk_set_error(MK_ERR_INVALID, "%s: args is NULL", op);
        if (!a->training && !a->has_running)
            return mk_set_error(MK_ERR_INVALID, "%s: inference needs running_mean and running_var", op);
        if ((a->has_running && (!running_mean || !running_var)) || (a->has_weight && !weight) ||
            (a->has_bias && !bias))
            return mk_set_error(MK_ERR_INVALID, "%s: a has_* flag is set without its buffer", op);
        int64_t count = (int64_t)a->N * a->HW;
        if (a->training && count <= 1 && a->C > 0)
            return mk_set_error(MK_ERR_INVALID, "%s: training needs more than 1 value per channel (N*H*W = %lld)",
                                op, (long long)count);
        if ((int64_t)a->N * a->C * a->HW == 0) return mk_mps_nothing(t);
        BOOL update = a->training && a->has_running;
        NSString *key = [NSString stringWithFormat:@"batch_norm:%d:%d,%d,%d:%d,%d,%d,%d:%a,%a", dtype, a->N, a->C, a->HW,
                         a->training, a->has_running, a->has_weight, a->has_bias, (double)a->eps, (double)a->momentum];
        MKGraph *g = mk_mps_graph_get(d, key, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSShape *cshape = MK_SHAPE(1, a->C, 1);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->HW) dataType:dt name:@"x"];
            NSMutableArray *ins = [NSMutableArray arrayWithObject:tx];
            MPSGraphTensor *trm = nil, *trv = nil, *tw = nil, *tb = nil;
            if (a->has_running) {
                [ins addObject:(trm = [G placeholderWithShape:MK_SHAPE(a->C) dataType:MPSDataTypeFloat32 name:@"rm"])];
                [ins addObject:(trv = [G placeholderWithShape:MK_SHAPE(a->C) dataType:MPSDataTypeFloat32 name:@"rv"])];
            }
            if (a->has_weight) [ins addObject:(tw = [G placeholderWithShape:cshape dataType:MPSDataTypeFloat32 name:@"w"])];
            if (a->has_bias) [ins addObject:(tb = [G placeholderWithShape:cshape dataType:MPSDataTypeFloat32 name:@"b"])];
            MPSGraphTensor *v = mk_mps_to32(G, tx), *mean, *var;
            if (a->training) {
                mean = [G meanOfTensor:v axes:@[@0, @2] name:@"mean"];                       // (1, C, 1)
                var = [G varianceOfTensor:v meanTensor:mean axes:@[@0, @2] name:@"var"];     // biased
            } else {
                if (!trm || !trv) { mk_set_error(MK_ERR_INVALID, "%s: inference needs running stats", op); return nil; }
                mean = [G reshapeTensor:trm withShape:cshape name:nil];
                var = [G reshapeTensor:trv withShape:cshape name:nil];
            }
            v = [G normalizationWithTensor:v meanTensor:mean varianceTensor:var gammaTensor:tw betaTensor:tb
                                   epsilon:a->eps name:@"batch_norm"];
            NSMutableArray *outs = [NSMutableArray arrayWithObject:mk_mps_from32(G, v, dt)];
            if (update && trm && trv) {
                MPSGraphTensor *m = [G constantWithScalar:a->momentum dataType:MPSDataTypeFloat32];
                MPSGraphTensor *keep = [G constantWithScalar:1.0 - (double)a->momentum dataType:MPSDataTypeFloat32];
                MPSGraphTensor *unbias = [G constantWithScalar:(double)count / (double)(count - 1)
                                                      dataType:MPSDataTypeFloat32];
                MPSGraphTensor *bm = [G reshapeTensor:mean withShape:MK_SHAPE(a->C) name:nil];
                MPSGraphTensor *bv = [G multiplicationWithPrimaryTensor:[G reshapeTensor:var withShape:MK_SHAPE(a->C) name:nil]
                                                        secondaryTensor:unbias name:nil];
                [outs addObject:[G additionWithPrimaryTensor:[G multiplicationWithPrimaryTensor:trm secondaryTensor:keep name:nil]
                                             secondaryTensor:[G multiplicationWithPrimaryTensor:bm secondaryTensor:m name:nil]
                                                        name:@"new_rm"]];
                [outs addObject:[G additionWithPrimaryTensor:[G multiplicationWithPrimaryTensor:trv secondaryTensor:keep name:nil]
                                             secondaryTensor:[G multiplicationWithPrimaryTensor:bv secondaryTensor:m name:nil]
                                                        name:@"new_rv"]];
            }
            return mk_mps_graph_of(G, ins, outs);
        });
        if (!g) return MK_ERR_UNSUPPORTED;
        mk_buffer *in[5] = {x}, *out[3] = {y, running_mean, running_var};
        int k = 1;
        if (a->has_running) { in[k++] = running_mean; in[k++] = running_var; }
        if (a->has_weight) in[k++] = weight;
        if (a->has_bias) in[k++] = bias;
        return mk_mps_graph_run(d, g, in, out, t, op);
    }
}
