// mk_mps_norm.m: layer_norm, rms_norm, group_norm and batch_norm on MPSGraph (meanOfTensor,
// varianceOfTensor, normalizationWithTensor). Statistics are computed in float32 (float16
// input is cast in the graph); weights, biases and running stats are float32 as in the ABI.
// batch_norm in training normalises with the batch's biased variance and, with running
// stats, updates them like torch: r = (1 - momentum) * r + momentum * stat, with the
// unbiased variance. The updated stats are graph results written back to the running-stat
// buffers (through scratch buffers, since the graph also reads them).
#import "mk_mps.h"

// An optional float32 input (weight, bias, running statistic): its placeholder, appended to
// `ins` in mk_mps_norm_inputs' order, or nil when the op has none.
static MPSGraphTensor *optional_input(MPSGraph *G, NSMutableArray *ins, int has, MPSShape *shape, NSString *name) {
    if (!has) return nil;
    MPSGraphTensor *p = [G placeholderWithShape:shape dataType:MPSDataTypeFloat32 name:name];
    [ins addObject:p];
    return p;
}

// v * w + b with the weight and bias that are present (after the normalisation).
static MPSGraphTensor *scale_shift(MPSGraph *G, MPSGraphTensor *v, MPSGraphTensor *tw, MPSGraphTensor *tb) {
    if (tw) v = [G multiplicationWithPrimaryTensor:v secondaryTensor:tw name:nil];
    if (tb) v = [G additionWithPrimaryTensor:v secondaryTensor:tb name:nil];
    return v;
}

// Layer/rms/group norm: the graph (cached per args) of x (shape xs) and the weight and bias
// that are present (shape ws, float32) whose output is body(G, x as float32, w, b) in x's
// dtype, run on x, the weight and bias into y. The shapes come as dimensions (rank each):
// MPSShape arrays are made only when the graph is built, not on every call.
typedef MPSGraphTensor *(^affine_body)(MPSGraph *G, MPSGraphTensor *v, MPSGraphTensor *tw,
                                       MPSGraphTensor *tb);
static mk_status run_affine(mk_device *d, const char *op, int dtype, const void *a, size_t nbytes,
                            int rank, const int64_t *xs, const int64_t *ws, int has_weight, int has_bias, affine_body body,
                            mk_buffer *x, mk_buffer *weight, mk_buffer *bias, mk_buffer *y, mk_timing *t) {
    MKGraph *g = mk_mps_graph_get(d, op, dtype, a, nbytes, ^MKGraph *{
        MPSGraph *G = [MPSGraph new];
        MPSDataType dt = mk_mps_dtype(dtype);
        MPSGraphTensor *tx = [G placeholderWithShape:mk_mps_shape(rank, xs) dataType:dt name:@"x"];
        NSMutableArray *ins = [NSMutableArray arrayWithObject:tx];
        MPSShape *wshape = mk_mps_shape(rank, ws);
        MPSGraphTensor *tw = optional_input(G, ins, has_weight, wshape, @"w");
        MPSGraphTensor *tb = optional_input(G, ins, has_bias, wshape, @"b");
        return mk_mps_graph_of(G, ins, @[mk_mps_from32(G, body(G, mk_mps_to32(G, tx), tw, tb), dt)]);
    });
    if (!g) return MK_ERR_UNSUPPORTED;
    mk_buffer *in[3], *out[1] = {y};
    mk_mps_norm_inputs(in, x, 0, NULL, NULL, has_weight, weight, has_bias, bias);
    return mk_mps_graph_run(d, g, in, out, t, op);
}

/* ---------------------------------------------------------------- layer / rms */

mk_status mk_mps_rownorm(mk_device *d, const mk_rownorm_args *a, int dtype, mk_buffer *x,
                         mk_buffer *weight, mk_buffer *bias, mk_buffer *y, mk_timing *t) {
    const char *op = "mk_mps_rownorm";
    return mk_mps_op(op, d, dtype, t, ^mk_status(int *empty) {
        return mk_mps_rownorm_check(a, weight, bias, empty);
    }, ^mk_status {
        return run_affine(d, op, dtype, a, sizeof *a, 2, (int64_t[]){a->rows, a->n}, (int64_t[]){1, a->n},
                          a->has_weight, a->has_bias,
                          ^MPSGraphTensor *(MPSGraph *G, MPSGraphTensor *v, MPSGraphTensor *tw, MPSGraphTensor *tb) {
            if (a->kind == MK_NORM_LAYER) {
                MPSGraphTensor *mean = [G meanOfTensor:v axes:@[@1] name:@"mean"];
                MPSGraphTensor *var = [G varianceOfTensor:v meanTensor:mean axes:@[@1] name:@"var"];
                return [G normalizationWithTensor:v meanTensor:mean varianceTensor:var gammaTensor:tw betaTensor:tb
                                          epsilon:a->eps name:@"layer_norm"];
            }
            MPSGraphTensor *ms = [G meanOfTensor:[G squareWithTensor:v name:nil] axes:@[@1] name:@"meansq"];
            MPSGraphTensor *eps = [G constantWithScalar:a->eps dataType:MPSDataTypeFloat32];
            MPSGraphTensor *inv = [G reverseSquareRootWithTensor:[G additionWithPrimaryTensor:ms secondaryTensor:eps name:nil]
                                                            name:@"rstd"];
            return scale_shift(G, [G multiplicationWithPrimaryTensor:v secondaryTensor:inv name:@"rms_norm"], tw, tb);
        }, x, weight, bias, y, t);
    });
}

/* ---------------------------------------------------------------- group norm */

mk_status mk_mps_group_norm(mk_device *d, const mk_group_norm_args *a, int dtype,
                            mk_buffer *x, mk_buffer *weight, mk_buffer *bias, mk_buffer *y,
                            mk_timing *t) {
    const char *op = "mk_mps_group_norm";
    return mk_mps_op(op, d, dtype, t, ^mk_status(int *empty) {
        return mk_mps_group_norm_check(a, weight, bias, empty);
    }, ^mk_status {
        return run_affine(d, op, dtype, a, sizeof *a, 3, (int64_t[]){a->N, a->C, a->HW}, (int64_t[]){1, a->C, 1},
                          a->has_weight, a->has_bias,
                          ^MPSGraphTensor *(MPSGraph *G, MPSGraphTensor *v, MPSGraphTensor *tw, MPSGraphTensor *tb) {
            v = [G reshapeTensor:v withShape:MK_SHAPE(a->N, a->groups, (int64_t)(a->C / a->groups) * a->HW) name:nil];
            MPSGraphTensor *mean = [G meanOfTensor:v axes:@[@2] name:@"mean"];
            MPSGraphTensor *var = [G varianceOfTensor:v meanTensor:mean axes:@[@2] name:@"var"];
            v = [G normalizationWithTensor:v meanTensor:mean varianceTensor:var gammaTensor:nil betaTensor:nil
                                   epsilon:a->eps name:@"group_norm"];
            return scale_shift(G, [G reshapeTensor:v withShape:MK_SHAPE(a->N, a->C, a->HW) name:nil], tw, tb);
        }, x, weight, bias, y, t);
    });
}

/* ---------------------------------------------------------------- batch norm */

mk_status mk_mps_batch_norm(mk_device *d, const mk_batch_norm_args *a, int dtype,
                            mk_buffer *x, mk_buffer *running_mean, mk_buffer *running_var,
                            mk_buffer *weight, mk_buffer *bias, mk_buffer *y, mk_timing *t) {
    const char *op = "mk_mps_batch_norm";
    return mk_mps_op(op, d, dtype, t, ^mk_status(int *empty) {
        return mk_mps_batch_norm_check(a, running_mean, running_var, weight, bias, empty);
    }, ^mk_status {
        const BOOL update = mk_mps_batch_norm_updates(a);
        double unbias = mk_mps_unbias(a);
        MKGraph *g = mk_mps_graph_get(d, op, dtype, a, sizeof *a, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSShape *cshape = MK_SHAPE(1, a->C, 1);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->N, a->C, a->HW) dataType:dt name:@"x"];
            NSMutableArray *ins = [NSMutableArray arrayWithObject:tx];
            MPSGraphTensor *trm = optional_input(G, ins, a->has_running, MK_SHAPE(a->C), @"rm");
            MPSGraphTensor *trv = optional_input(G, ins, a->has_running, MK_SHAPE(a->C), @"rv");
            MPSGraphTensor *tw = optional_input(G, ins, a->has_weight, cshape, @"w");
            MPSGraphTensor *tb = optional_input(G, ins, a->has_bias, cshape, @"b");
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
                MPSGraphTensor *ub = [G constantWithScalar:unbias dataType:MPSDataTypeFloat32];
                MPSGraphTensor *bm = [G reshapeTensor:mean withShape:MK_SHAPE(a->C) name:nil];
                MPSGraphTensor *bv = [G multiplicationWithPrimaryTensor:[G reshapeTensor:var withShape:MK_SHAPE(a->C) name:nil]
                                                        secondaryTensor:ub name:nil];
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
        mk_buffer *in[5], *out[3] = {y, running_mean, running_var};
        mk_mps_norm_inputs(in, x, a->has_running, running_mean, running_var, a->has_weight, weight,
                           a->has_bias, bias);
        return mk_mps_graph_run(d, g, in, out, t, op);
    });
}
