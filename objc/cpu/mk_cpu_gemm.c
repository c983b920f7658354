// mk_cpu_gemm.c: batched C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] through BLAS.
// float16 operands are converted to float32 one batch item at a time (float32 accumulation).
// The fused activation (a->activation) is applied by the pass that writes the output: to each
// tile right after its BLAS call (mk_sgemm_par_ep), or to each row before float16 conversion.
#include "mk_cpu.h"
#include <stdlib.h>
#include <string.h>

// copy an r x c block with leading dims lds/ldd, converting as needed
static void copy_block_f32(const float *s, int lds, float *d, int ldd, int r, int c) {
    for (int i = 0; i < r; i++) memcpy(d + (long)i * ldd, s + (long)i * lds, (size_t)c * 4);
}

typedef struct { const mk_half *hs; float *fs; int lds; float *fd; mk_half *hd; int ldd, c, act; } blk_ctx;

static void h2f_rows(void *vc, long b, long e) {
    const blk_ctx *t = vc;
    for (long i = b; i < e; i++) mk_h2f(t->hs + i * t->lds, t->fd + i * t->ldd, t->c);
}

static void f2h_rows(void *vc, long b, long e) {
    const blk_ctx *t = vc;
    for (long i = b; i < e; i++) {
        mk_activate(t->fs + i * t->lds, t->c, t->act);   // the row is in L1 for the conversion
        mk_f2h(t->fs + i * t->lds, t->hd + i * t->ldd, t->c);
    }
}

// r x c float16 block (leading dim lds) -> packed float32, rows over the pool
static void h2f_block(const mk_half *s, int lds, float *d, int r, int c) {
    blk_ctx t = {s, NULL, lds, d, NULL, c, c, MK_ACT_NONE};
    mk_parallel_for(r, 1 + (1 << 15) / (c + 1), h2f_rows, &t);
}

// packed r x c float32 -> float16 block with leading dim ldd, activated first (in place)
static void f2h_block(float *s, mk_half *d, int ldd, int r, int c, int act) {
    blk_ctx t = {NULL, s, c, NULL, d, ldd, c, act};
    mk_parallel_for(r, 1 + (1 << 15) / (c + 1), f2h_rows, &t);
}

// out = beta * out (beta == 0 clears, even NaN, as BLAS does)
static void scale_block(float *o, int ldo, int r, int c, float beta) {
    for (int i = 0; i < r; i++) {
        float *row = o + (long)i * ldo;
        if (beta == 0.0f) memset(row, 0, (size_t)c * 4);
        else for (int j = 0; j < c; j++) row[j] *= beta;
    }
}

typedef struct {
    const mk_gemm_args *a;
    const void *A, *B, *C;
    void *out;
    float beta;
} gemm_ctx;

// batch item b in float32 with K == 0 (no product: out = activation(beta * C))
static void gemm_empty_f32(const gemm_ctx *t, long b) {
    const mk_gemm_args *a = t->a;
    float *o = (float *)t->out + b * a->stride_out;
    int act = a->activation;
    if (a->has_c && t->beta != 0.0f) {
        const float *c = (const float *)t->C + b * a->stride_c;
        if (c != o) copy_block_f32(c, a->ldc, o, a->ldc, a->M, a->N);
    }
    scale_block(o, a->ldc, a->M, a->N, t->beta);
    mk_activate_tile(&act, o, a->ldc, a->M, a->N);
}

static mk_status check_args(const mk_gemm_args *a) {
    MK_CHECK_NONNEG(a->batch); MK_CHECK_NONNEG(a->M); MK_CHECK_NONNEG(a->N); MK_CHECK_NONNEG(a->K);
    int ra = a->trans_a ? a->M : a->K;   // row length of A as stored
    int rb = a->trans_b ? a->K : a->N;
    if (a->lda < ra || a->ldb < rb || a->ldc < a->N)   // BLAS only sees calls with M, N, K >= 1
        return mk_set_error(MK_ERR_INVALID,
            "mk_cpu_gemm: leading dims lda=%d ldb=%d ldc=%d too small for M=%d N=%d K=%d "
            "trans_a=%d trans_b=%d", a->lda, a->ldb, a->ldc, a->M, a->N, a->K, a->trans_a, a->trans_b);
    if (a->stride_a < 0 || a->stride_b < 0 || a->stride_c < 0 || a->stride_out < 0)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_gemm: negative batch stride");
    if (mk_gemm_path() < 0)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_gemm: MPSKERN_CPU_GEMM=%s: expected auto, "
                            "own, grid or whole", getenv("MPSKERN_CPU_GEMM"));
    if (a->activation < MK_ACT_NONE || a->activation > MK_ACT_SILU)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_gemm: activation %d is not MK_ACT_*", a->activation);
    return MK_OK;
}

mk_status mk_cpu_gemm(const mk_gemm_args *a, int dtype, const void *A, const void *B,
                      const void *C, void *out) {
    MK_CHECK_ENTRY(a, dtype, check_args);
    int M = a->M, N = a->N, K = a->K;
    if (a->batch == 0 || M == 0 || N == 0) return MK_OK;
    MK_CHECK_PTR(out);
    if (K > 0) { MK_CHECK_PTR(A); MK_CHECK_PTR(B); }
    if (a->has_c) MK_CHECK_PTR(C);
    float beta = a->has_c ? a->beta : 0.0f;
    int ra = a->trans_a ? K : M, ca = a->trans_a ? M : K;   // A as stored: ra x ca
    int rb = a->trans_b ? N : K, cb = a->trans_b ? K : N;

    if (dtype == MK_F32) {
        if (K == 0) {
            gemm_ctx t = {a, A, B, C, out, beta};
            for (int b = 0; b < a->batch; b++) gemm_empty_f32(&t, b);
            return MK_OK;
        }
        // every item's tiles in one grid; C is copied into each tile by its thread
        int act = a->activation;
        mk_sgemm_batch_par_ep(a->trans_a, a->trans_b, a->batch, M, N, K, a->alpha, A, a->lda,
                              a->stride_a, B, a->ldb, a->stride_b, beta,
                              a->has_c ? C : NULL, a->stride_c, out, a->ldc, a->stride_out,
                              act ? mk_activate_tile : NULL, &act);
        return MK_OK;
    }

    // float16: per batch item, A, B (and C) to packed float32, sgemm, back to float16
    float *fa = mk_alloc((size_t)ra * ca * 4 + 4), *fb = mk_alloc((size_t)rb * cb * 4 + 4);
    float *fo = mk_alloc((size_t)M * N * 4);
    if (!fa || !fb || !fo) {
        mk_free(fa); mk_free(fb); mk_free(fo);
        return mk_set_error(MK_ERR_NOMEM, "mk_cpu_gemm: out of memory for float16 staging");
    }
    const mk_half *pa_prev = NULL, *pb_prev = NULL;
    for (int b = 0; b < a->batch; b++) {
        const mk_half *pa = (const mk_half *)A + (long)b * a->stride_a;
        const mk_half *pb = (const mk_half *)B + (long)b * a->stride_b;
        mk_half *o = (mk_half *)out + (long)b * a->stride_out;
        if (K > 0 && pa != pa_prev) { h2f_block(pa, a->lda, fa, ra, ca); pa_prev = pa; }
        if (K > 0 && pb != pb_prev) { h2f_block(pb, a->ldb, fb, rb, cb); pb_prev = pb; }
        if (a->has_c && beta != 0.0f)
            h2f_block((const mk_half *)C + (long)b * a->stride_c, a->ldc, fo, M, N);
        if (K == 0) scale_block(fo, N, M, N, beta);
        else mk_sgemm_par(a->trans_a, a->trans_b, M, N, K, a->alpha, fa, ca, fb, cb, beta, fo, N);
        f2h_block(fo, o, a->ldc, M, N, a->activation);
    }
    mk_free(fa); mk_free(fb); mk_free(fo);
    return MK_OK;
}
