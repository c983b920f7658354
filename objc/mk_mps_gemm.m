// mk_mps_gemm.m: gemm / matmul on MPSMatrixMultiplication:
//   out[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]
// MPS updates its result matrix in place (result = alpha*AB + beta*result), so out is first
// set to C when C is a different buffer, or to zero when there is no C: MPS
// documents no "beta == 0 ignores the result" rule, and numpy's empty() may hold NaNs.
// Uniform batches are one batched encode; broadcast operands (batch stride 0) or strides
// MPS cannot express are encoded matrix by matrix, all in one command buffer.
#import "mk_mps.h"
#include "mk_mps_math.h"

#include <string.h>

#define OP "mk_mps_gemm"

// Elements a strided batch of row-major matrices spans (0 if empty).
static size_t span(int batch, int stride, int rows, int cols, int ld) {
    if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

static int same_place(mk_buffer *a, mk_buffer *b) {
    return a && b && (a == b || (a->host && a->host == b->host));
}

// K == 0: the product is empty, out = beta * C (or 0). Done on the host memory directly.
static void gemm_k0(const mk_gemm_args *a, int dtype, mk_buffer *C, mk_buffer *out) {
    for (int b = 0; b < a->batch; b++)
        for (int i = 0; i < a->M; i++)
            for (int j = 0; j < a->N; j++) {
                size_t o = (size_t)b * a->stride_out + (size_t)i * a->ldc + j;
                size_t c = (size_t)b * a->stride_c + (size_t)i * a->ldc + j;
                if (dtype == MK_F16) {
                    float v = a->has_c ? a->beta * (float)((const _Float16 *)C->host)[c] : 0.0f;
                    ((_Float16 *)out->host)[o] = (_Float16)v;
                } else {
                    float v = a->has_c ? a->beta * ((const float *)C->host)[c] : 0.0f;
                    ((float *)out->host)[o] = v;
                }
            }
}

// Matrix `index` of an operand stack (all `count` of them from there when count > 1).
static MPSMatrix *matrix(mk_buffer *buf, const mk_mps_matrix *m, int index, int count, int dtype) {
    size_t es = mk_mps_esize(dtype);
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

mk_status mk_mps_gemm(mk_device *d, const mk_gemm_args *a, int dtype, mk_buffer *A,
                      mk_buffer *B, mk_buffer *C, mk_buffer *out, mk_timing *t) {
    @autoreleasepool {
        mk_status st = mk_mps_check(d, dtype, OP);
        if (st != MK_OK) return st;
        if (!a) return mk_set_error(MK_ERR_INVALID, OP ": args is NULL");
        if (a->batch < 0 || a->M < 0 || a->N < 0 || a->K < 0)
            return mk_set_error(MK_ERR_INVALID, OP ": negative size (batch %d, M %d, N %d, K %d)",
                                a->batch, a->M, a->N, a->K);
        int ra = a->trans_a ? a->K : a->M, ca = a->trans_a ? a->M : a->K;
        int rb = a->trans_b ? a->N : a->K, cb_ = a->trans_b ? a->K : a->N;
        if (a->lda < ca || a->ldb < cb_ || a->ldc < a->N)
            return mk_set_error(MK_ERR_INVALID, OP ": leading dimensions lda %d, ldb %d, ldc %d are "
                                "smaller than the rows they hold (%d, %d, %d)", a->lda, a->ldb, a->ldc, ca, cb_, a->N);
        size_t es = mk_mps_esize(dtype);
        if ((st = mk_metal_check_buffer(d, out, span(a->batch, a->stride_out, a->M, a->N, a->ldc) * es, OP, "out")) != MK_OK)
            return st;
        if (a->has_c &&
            (st = mk_metal_check_buffer(d, C, span(a->batch, a->stride_c, a->M, a->N, a->ldc) * es, OP, "C")) != MK_OK)
            return st;
        if (!out || (a->has_c && !C)) return MK_ERR_INVALID;   // (reported by the checks above)
        if (a->batch == 0 || a->M == 0 || a->N == 0) return mk_mps_nothing(t);
        if (a->K == 0) {
            gemm_k0(a, dtype, C, out);
            return mk_mps_nothing(t);
        }
        if ((st = mk_metal_check_buffer(d, A, span(a->batch, a->stride_a, ra, ca, a->lda) * es, OP, "A")) != MK_OK ||
            (st = mk_metal_check_buffer(d, B, span(a->batch, a->stride_b, rb, cb_, a->ldb) * es, OP, "B")) != MK_OK)
            return st;
        if (!A || !B) return MK_ERR_INVALID;   // (reported by the checks above)
        if (mk_metal_overlap(out, A) || mk_metal_overlap(out, B))
            return mk_set_error(MK_ERR_INVALID, OP ": out overlaps A or B; MPS writes the result while "
                                "reading them (pass a separate output array)");
        MKMetalDevice *md = mk_metal_device(d);
        mk_buffer *ins[3] = {A, B, a->has_c ? C : NULL};
        for (int i = 0; i < 3; i++) if (ins[i]) mk_metal_upload(ins[i]);
        mk_metal_upload(out);

        // out <- C, or out <- 0, before MPS accumulates into it. On the CPU (unified memory):
        // blits would need 4-byte multiples on macOS, and float16 rows need not be.
        double t0 = mk_metal_now_ms();
        MKMetalBuffer *mo = mk_metal_buffer(out);
        size_t row = (size_t)a->N * es;   // row by row: the gaps of ldc > N belong to someone else
        BOOL in_place = a->has_c && same_place(C, out) && a->stride_c == a->stride_out;
        for (int b = 0; b < a->batch && !in_place; b++)
            for (int i = 0; i < a->M; i++) {
                char *dst = (char *)mo.buffer.contents + mo.offset + ((size_t)b * a->stride_out + (size_t)i * a->ldc) * es;
                if (a->has_c) {
                    MKMetalBuffer *mc = mk_metal_buffer(C);
                    memmove(dst, (const char *)mc.buffer.contents + mc.offset +
                                     ((size_t)b * a->stride_c + (size_t)i * a->ldc) * es, row);
                } else {
                    memset(dst, 0, row);
                }
            }
        id<MTLCommandBuffer> cmd = [md.queue commandBuffer];
        mk_mps_gemm_plan plan;
        mk_mps_gemm_plan_make(a, &plan);
        MPSMatrixMultiplication *mm =
            [[MPSMatrixMultiplication alloc] initWithDevice:md.device transposeLeft:a->trans_a != 0
                                             transposeRight:a->trans_b != 0 resultRows:(NSUInteger)a->M
                                              resultColumns:(NSUInteger)a->N interiorColumns:(NSUInteger)a->K
                                                      alpha:a->alpha beta:plan.beta];
        if (plan.batched) {
            mm.batchStart = 0;
            mm.batchSize = (NSUInteger)a->batch;
            [mm encodeToCommandBuffer:cmd leftMatrix:matrix(A, &plan.a, 0, a->batch, dtype)
                          rightMatrix:matrix(B, &plan.b, 0, a->batch, dtype)
                         resultMatrix:matrix(out, &plan.out, 0, a->batch, dtype)];
        } else {
            for (int b = 0; b < a->batch; b++)
                [mm encodeToCommandBuffer:cmd leftMatrix:matrix(A, &plan.a, b, 1, dtype)
                              rightMatrix:matrix(B, &plan.b, b, 1, dtype)
                             resultMatrix:matrix(out, &plan.out, b, 1, dtype)];
        }
        mk_timing dummy;
        [cmd commit];
        [cmd waitUntilCompleted];
        if ((st = mk_metal_finish(cmd, cmd, t0, t ? t : &dummy, OP)) != MK_OK) return st;
        mk_metal_download(out);
        return MK_OK;
    }
}
