// mk_mps_gemm.m: gemm / matmul on MPSMatrixMultiplication:
//   out[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]
// MPS updates its result matrix in place (result = alpha*AB + beta*result), so out is first
// set to C when C is a different buffer, or to zero when there is no C (mk_mps_gemm_prefill):
// MPS documents no "beta == 0 ignores the result" rule, and numpy's empty() may hold NaNs.
// Uniform batches are one batched encode; broadcast operands (batch stride 0) or strides
// MPS cannot express are encoded matrix by matrix, all in one command buffer
// (mk_mps_gemm_plan_make). K == 0 is done on the host (mk_mps_gemm_k0). With a fused
// activation MPSMatrixMultiplication has no epilogue, so the whole gemm is one MPSGraph
// (matmul, alpha, beta*C and the activation; mk_mps_gemm_graph_check says which layouts).
#import "mk_mps.h"

#define OP "mk_mps_gemm"

// Matrix `index` of an operand stack (all `count` of them from there when count > 1).
static MPSMatrix *matrix(mk_buffer *buf, const mk_mps_matrix *m, int index, int count, int dtype) {
    size_t es = mk_mps_esize_of(dtype);
    MKMetalBuffer *mb = mk_metal_buffer(buf);
    NSUInteger row_bytes = (NSUInteger)m->ld * es;
    MPSMatrixDescriptor *desc =
        [MPSMatrixDescriptor matrixDescriptorWithRows:(NSUInteger)m->rows columns:(NSUInteger)m->cols
                                             matrices:(NSUInteger)count rowBytes:row_bytes
                                          matrixBytes:(count > 1 ? (NSUInteger)m->stride * es : (NSUInteger)m->rows * row_bytes)
                                             dataType:mk_mps_dtype(dtype)];
    return [[MPSMatrix alloc] initWithBuffer:mb.buffer offset:mb.offset + (size_t)index * m->stride * es
                                  descriptor:desc];
}

static void *contents(mk_buffer *b) {
    if (!b) return NULL;
    MKMetalBuffer *mb = mk_metal_buffer(b);
    return (char *)mb.buffer.contents + mb.offset;
}

static int same_metal_buffer(mk_buffer *a, mk_buffer *b) {
    return a && b && mk_metal_buffer(a).buffer == mk_metal_buffer(b).buffer;
}

// activation(alpha * op(A) @ op(B) + beta * C) as one graph (checked dense operands; a batch
// stride of 0 is a batch of 1 that broadcasts), in float32 inside the graph.
static mk_status gemm_graph(mk_device *d, const mk_gemm_args *a, int dtype, mk_buffer *A, mk_buffer *B,
                            mk_buffer *C, mk_buffer *out, mk_timing *t) {
    mk_status st = mk_mps_gemm_graph_check(a);
    if (st != MK_OK) return st;
    int ra = a->trans_a ? a->K : a->M, ca = a->trans_a ? a->M : a->K;
    int rb = a->trans_b ? a->N : a->K, cb = a->trans_b ? a->K : a->N;
    int has_c = a->has_c && a->beta != 0.0f;
    MKGraph *g = mk_mps_graph_get(d, OP, dtype, a, sizeof *a, ^MKGraph *{
        MPSGraph *G = [MPSGraph new];
        MPSDataType dt = mk_mps_dtype(dtype), f32 = MPSDataTypeFloat32;
        MPSGraphTensor *ta = [G placeholderWithShape:MK_SHAPE(a->stride_a ? a->batch : 1, ra, ca) dataType:dt name:@"A"];
        MPSGraphTensor *tb = [G placeholderWithShape:MK_SHAPE(a->stride_b ? a->batch : 1, rb, cb) dataType:dt name:@"B"];
        NSMutableArray *ins = [NSMutableArray arrayWithObjects:ta, tb, nil];
        MPSGraphTensor *x = mk_mps_to32(G, ta), *y = mk_mps_to32(G, tb);
        if (a->trans_a) x = [G transposeTensor:x dimension:1 withDimension:2 name:nil];
        if (a->trans_b) y = [G transposeTensor:y dimension:1 withDimension:2 name:nil];
        MPSGraphTensor *r = [G matrixMultiplicationWithPrimaryTensor:x secondaryTensor:y name:nil];
        r = [G multiplicationWithPrimaryTensor:r secondaryTensor:[G constantWithScalar:a->alpha dataType:f32]
                                          name:@"alpha_ab"];
        if (has_c) {
            MPSGraphTensor *tc = [G placeholderWithShape:MK_SHAPE(a->stride_c ? a->batch : 1, a->M, a->N)
                                                dataType:dt name:@"C"];
            [ins addObject:tc];
            MPSGraphTensor *bc = [G multiplicationWithPrimaryTensor:mk_mps_to32(G, tc)
                                                    secondaryTensor:[G constantWithScalar:a->beta dataType:f32] name:nil];
            r = [G additionWithPrimaryTensor:r secondaryTensor:bc name:@"plus_beta_c"];
        }
        r = mk_mps_activation(G, r, a->activation);
        if (r.shape.count && r.shape[0].longLongValue != a->batch)
            r = [G broadcastTensor:r toShape:MK_SHAPE(a->batch, a->M, a->N) name:nil];
        return mk_mps_graph_of(G, ins, @[mk_mps_from32(G, r, dt)]);
    });
    if (!g) return MK_ERR_UNSUPPORTED;
    mk_buffer *in[3] = {A, B, C}, *res[1] = {out};
    return mk_mps_graph_run(d, g, in, res, t, OP);
}

mk_status mk_mps_gemm(mk_device *d, const mk_gemm_args *a, int dtype, mk_buffer *A,
                      mk_buffer *B, mk_buffer *C, mk_buffer *out, mk_timing *t) {
    @autoreleasepool {
        @try {
            mk_status st;
            // checks, empty outputs and K == 0 on the host (mk_mps_host.c)
            if (mk_mps_gemm_host(d, a, dtype, A, B, C, out, same_metal_buffer(out, A), same_metal_buffer(out, B), &st))
                return mk_mps_done(st, t);
            if (a->activation) return gemm_graph(d, a, dtype, A, B, C, out, t);
            MKMetalDevice *md = mk_metal_device(d);
            mk_buffer *operands[4] = {A, B, C, out};   // (an unused C is mirrored for nothing)
            mk_shim_each(operands, 4, mk_metal_upload);

            // out <- C, or out <- 0, before MPS accumulates into it. On the CPU (unified memory):
            // blits would need 4-byte multiples on macOS, and float16 rows need not be.
            double t0 = mk_shim_now_ms();
            mk_mps_gemm_prefill_buffers(a, dtype, C, out, contents(C), contents(out));
            id<MTLCommandBuffer> cmd = [md.queue commandBuffer];
            mk_mps_gemm_plan plan;
            mk_mps_gemm_plan_make(a, &plan);
            MPSMatrixMultiplication *mm =
                [[MPSMatrixMultiplication alloc] initWithDevice:md.device transposeLeft:a->trans_a != 0
                                                 transposeRight:a->trans_b != 0 resultRows:(NSUInteger)a->M
                                                  resultColumns:(NSUInteger)a->N interiorColumns:(NSUInteger)a->K
                                                          alpha:a->alpha beta:plan.beta];
            int encodes, per;
            mk_mps_gemm_encodes(&plan, a, &encodes, &per);
            mm.batchStart = 0;
            mm.batchSize = (NSUInteger)per;
            for (NSUInteger b = 0; b < (NSUInteger)encodes; b++)
                [mm encodeToCommandBuffer:cmd leftMatrix:matrix(A, &plan.a, (int)b, per, dtype)
                              rightMatrix:matrix(B, &plan.b, (int)b, per, dtype)
                             resultMatrix:matrix(out, &plan.out, (int)b, per, dtype)];
            [cmd commit];
            [cmd waitUntilCompleted];
            mk_cb_errors errs;
            mk_cb_errors_init(&errs);
            mk_metal_add_command_buffer(&errs, cmd);
            if ((st = mk_cb_errors_finish(&errs, OP, t0, t)) != MK_OK) return st;
            mk_metal_download(out);
            return MK_OK;
        } @catch (NSException *e) {
            return mk_objc_exception(OP, e);
        }
    }
}
