// mk_mps_attention.m: scaled_dot_product_attention on MPSGraph (mk_attention_args).
//
// Two graphs, both computing in float32 (float16 operands are cast in the graph):
//   fused       MPSGraph's own scaledDotProductAttentionWithQueryTensor:keyTensor:valueTensor:
//               maskTensor:scale:name: (macOS 15; the macOS 12 SDK this builds against does not
//               declare it, so it is found with respondsToSelector: and called through a typed
//               objc_msgSend). Used only where its result cannot differ from torch's: no user
//               mask (causal is an additive mask that always leaves key 0 visible, so no row is
//               empty), one head count, one batch, E = Ev. Apple documents no rule for rows
//               whose scores are all -inf, which torch defines as 0 @ v.
//   composition matmul, mask, softmax, matmul: scores = scale * q k^T (+ mask, + -inf where a
//               bool mask is false or causal hides the key), a safe softmax (a row whose
//               maximum is -inf gets weights 0, as torch), then weights @ v. Grouped-query
//               heads through 5-D shapes: q (B, Hk, Hq/Hk, L, E) against k (B, Hk, 1, S, E),
//               so matmul's broadcasting pairs each query head with its key head.
// Operands follow metal/mk_args.h's layout contract as the Python layer produces it: each is
// a C-contiguous array whose batch / head dimension is either full or 1 (stride 0), and the
// mask is a C-contiguous (b|1, h|1, L|1, S|1) array. Other strides are refused.
// None of this can run off macOS; objc/check_shim.py compiles and links it against the SDK.
#import "mk_mps.h"
#include "mps_host/attention.c"     // its host half: checks, shapes (plain C, tested off macOS)
#import <objc/message.h>

#define OP "mk_mps_attention"

// The macOS 15 fused op, or nil where the OS lacks it.
typedef MPSGraphTensor *(*mk_sdpa_fn)(id, SEL, MPSGraphTensor *, MPSGraphTensor *, MPSGraphTensor *,
                                      MPSGraphTensor *, float, NSString *);
static SEL sdpa_selector(void) {
    return NSSelectorFromString(@"scaledDotProductAttentionWithQueryTensor:keyTensor:valueTensor:maskTensor:scale:name:");
}

static BOOL fused_applies(MPSGraph *G, const mk_attention_args *a) {
    return mk_mps_attention_fusable(a) && [G respondsToSelector:sdpa_selector()];
}

// (L, S) float32: 0 where key j is visible to query i (j <= i), -inf elsewhere; built on the GPU
// from two index vectors, never an L x S constant.
static MPSGraphTensor *causal_bias(MPSGraph *G, int L, int S) {
    NSMutableData *ri = [NSMutableData dataWithLength:(NSUInteger)L * 4];
    NSMutableData *cj = [NSMutableData dataWithLength:(NSUInteger)S * 4];
    mk_shim_iota(ri.mutableBytes, L);
    mk_shim_iota(cj.mutableBytes, S);
    MPSGraphTensor *rows = [G constantWithData:ri shape:MK_SHAPE(L, 1) dataType:MPSDataTypeInt32];
    MPSGraphTensor *cols = [G constantWithData:cj shape:MK_SHAPE(1, S) dataType:MPSDataTypeInt32];
    MPSGraphTensor *seen = [G lessThanOrEqualToWithPrimaryTensor:cols secondaryTensor:rows name:@"causal"];
    return [G selectWithPredicateTensor:seen
                    truePredicateTensor:[G constantWithScalar:0.0 dataType:MPSDataTypeFloat32]
                   falsePredicateTensor:[G constantWithScalar:-INFINITY dataType:MPSDataTypeFloat32]
                                   name:@"causal_bias"];
}

static MKGraph *build(const mk_attention_args *a, int dtype) {
    MPSGraph *G = [MPSGraph new];
    MPSDataType dt = mk_mps_dtype(dtype);
    mk_mps_attention_shapes sh;
    mk_mps_attention_shapes_of(a, &sh);
    const int64_t bq = sh.bq, bk = sh.bk, bv = sh.bv, gk = sh.gk, gv = sh.gv;
    MPSGraphTensor *tq = [G placeholderWithShape:MK_SHAPE(bq, a->Hq, a->L, a->E) dataType:dt name:@"q"];
    MPSGraphTensor *tk = [G placeholderWithShape:MK_SHAPE(bk, a->Hk, a->S, a->E) dataType:dt name:@"k"];
    MPSGraphTensor *tv = [G placeholderWithShape:MK_SHAPE(bv, a->Hv, a->S, a->Ev) dataType:dt name:@"v"];
    NSMutableArray *ins = [NSMutableArray arrayWithObjects:tq, tk, tv, nil];
    MPSGraphTensor *tm = nil;
    const int64_t mb = sh.mb, mh = sh.mh, ml = sh.ml, ms = sh.ms;
    if (a->mask != MK_ATTN_MASK_NONE) {
        tm = [G placeholderWithShape:MK_SHAPE(mb, mh, ml, ms)
                            dataType:a->mask == MK_ATTN_MASK_BOOL ? MPSDataTypeUInt8 : dt name:@"mask"];
        [ins addObject:tm];
    }
    MPSGraphTensor *q = mk_mps_to32(G, tq), *k = mk_mps_to32(G, tk), *v = mk_mps_to32(G, tv);
    MPSGraphTensor *o;
    if (fused_applies(G, a)) {
        MPSGraphTensor *bias = a->causal ? causal_bias(G, a->L, a->S) : nil;
        o = ((mk_sdpa_fn)objc_msgSend)(G, sdpa_selector(), q, k, v, bias, a->scale, @"sdpa");
    } else {
        const int64_t B = sh.batch;
        MPSGraphTensor *s;   // scores, (B, Hk, gk, L, S)
        if (a->E > 0) {
            MPSGraphTensor *q5 = [G reshapeTensor:q withShape:MK_SHAPE(bq, a->Hk, gk, a->L, a->E) name:nil];
            MPSGraphTensor *k5 = [G reshapeTensor:k withShape:MK_SHAPE(bk, a->Hk, 1, a->S, a->E) name:nil];
            s = [G matrixMultiplicationWithPrimaryTensor:q5
                                         secondaryTensor:[G transposeTensor:k5 dimension:3 withDimension:4 name:nil]
                                                    name:@"qk"];
            s = [G multiplicationWithPrimaryTensor:s
                                   secondaryTensor:[G constantWithScalar:a->scale dataType:MPSDataTypeFloat32]
                                              name:@"scaled"];
        } else {   // empty products: scores 0 whatever the scale (torch)
            s = [G constantWithScalar:0.0 shape:MK_SHAPE(B, a->Hk, gk, a->L, a->S) dataType:MPSDataTypeFloat32];
        }
        if (a->causal) s = [G additionWithPrimaryTensor:s secondaryTensor:causal_bias(G, a->L, a->S) name:nil];
        if (tm) {
            // (mb, mh, ml, ms) -> 5-D like the scores: the head dimension splits as h = hk*gk + g
            MPSShape *m5 = mh == 1 ? MK_SHAPE(mb, 1, 1, ml, ms) : MK_SHAPE(mb, a->Hk, gk, ml, ms);
            MPSGraphTensor *m = [G reshapeTensor:tm withShape:m5 name:nil];
            if (a->mask == MK_ATTN_MASK_BOOL)
                m = [G selectWithPredicateTensor:[G notEqualWithPrimaryTensor:m
                                                              secondaryTensor:[G constantWithScalar:0 dataType:MPSDataTypeUInt8]
                                                                         name:nil]
                             truePredicateTensor:[G constantWithScalar:0.0 dataType:MPSDataTypeFloat32]
                            falsePredicateTensor:[G constantWithScalar:-INFINITY dataType:MPSDataTypeFloat32]
                                            name:@"mask_bias"];
            else
                m = mk_mps_to32(G, m);
            s = [G additionWithPrimaryTensor:s secondaryTensor:m name:@"masked"];
        }
        // safe softmax along the keys (axis 4): rows whose maximum is -inf get weights 0
        MPSGraphTensor *top = [G reductionMaximumWithTensor:s axis:4 name:@"row_max"];
        MPSGraphTensor *ninf = [G constantWithScalar:-INFINITY dataType:MPSDataTypeFloat32];
        MPSGraphTensor *zero = [G constantWithScalar:0.0 dataType:MPSDataTypeFloat32];
        MPSGraphTensor *empty = [G equalWithPrimaryTensor:top secondaryTensor:ninf name:@"empty_row"];
        top = [G selectWithPredicateTensor:empty truePredicateTensor:zero falsePredicateTensor:top name:nil];
        MPSGraphTensor *e = [G exponentWithTensor:[G subtractionWithPrimaryTensor:s secondaryTensor:top name:nil]
                                             name:nil];
        MPSGraphTensor *w = [G divisionWithPrimaryTensor:e
                                         secondaryTensor:[G reductionSumWithTensor:e axis:4 name:@"row_sum"]
                                                    name:nil];
        w = [G selectWithPredicateTensor:empty truePredicateTensor:zero falsePredicateTensor:w name:@"weights"];
        const int64_t Bw = sh.bw;   // a mask may carry the batch alone
        MPSGraphTensor *w5 = [G reshapeTensor:w withShape:MK_SHAPE(Bw, a->Hv, gv, a->L, a->S) name:nil];
        MPSGraphTensor *v5 = [G reshapeTensor:v withShape:MK_SHAPE(bv, a->Hv, 1, a->S, a->Ev) name:nil];
        o = [G matrixMultiplicationWithPrimaryTensor:w5 secondaryTensor:v5 name:@"wv"];
        const int64_t Bo = sh.bo;
        o = [G reshapeTensor:o withShape:MK_SHAPE(Bo, a->Hq, a->L, a->Ev) name:nil];
    }
    if (o.shape.count && o.shape[0].longLongValue != a->B)
        o = [G broadcastTensor:o toShape:MK_SHAPE(a->B, a->Hq, a->L, a->Ev) name:@"batch"];
    return mk_mps_graph_of(G, ins, @[mk_mps_from32(G, o, dt)]);
}

mk_status mk_mps_attention(mk_device *d, const mk_attention_args *a, int dtype, mk_buffer *q,
                           mk_buffer *k, mk_buffer *v, mk_buffer *mask, mk_buffer *out,
                           mk_timing *t) {
    return mk_mps_op(OP, d, dtype, t, ^mk_status(int *empty) {
        return mk_mps_attention_check(a, mask, empty);
    }, ^mk_status {
        mk_status st;
        if (mk_mps_attention_host(d, a, dtype, out, &st)) return mk_mps_done(st, t);   // no keys: zeros
        MKGraph *g = mk_mps_graph_get(d, OP, dtype, a, sizeof *a, ^MKGraph *{ return build(a, dtype); });
        if (!g) return MK_ERR_UNSUPPORTED;
        mk_buffer *in[4] = {q, k, v, mask}, *res[1] = {out};
        return mk_mps_graph_run(d, g, in, res, t, OP);
    });
}
