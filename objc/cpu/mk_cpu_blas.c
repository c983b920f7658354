// mk_cpu_blas.c: the GEMM core. Accelerate on macOS; scipy-openblas32 (symbols prefixed
// scipy_) elsewhere. That OpenBLAS is loaded for mpskern alone, so we run it single-threaded
// and parallelise around it with our own pool: one set of threads, no OpenBLAS threads
// spinning while our workers (im2col, conversions) want the same cores.
#include "mk_cpu.h"
#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#define MK_SGEMM cblas_sgemm
#else
#include <cblas.h>
#define MK_SGEMM scipy_cblas_sgemm
#endif

void mk_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    MK_SGEMM(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
             trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mk_blas_set_threads(int n) {
    (void)n;
#ifndef __APPLE__
    scipy_openblas_set_num_threads(1);
#endif
}

/* ---- parallel GEMM: the output is cut into one panel per thread, each a single-threaded
   BLAS call on one of our threads. Panels are rows of A and C (OpenBLAS, which stores
   row-major C as its transpose, then splits the operand it packs in large blocks), or
   columns of B and C when M is too short to give every thread 64 rows. Against OpenBLAS's
   own 2-thread GEMM (same library, square 512-4096, best of quiet runs) row panels took
   0.97-1.0x its time; column panels and two panels per thread (each re-packs the shared
   operand) 2-4% more than row panels. */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, by_cols, step;
    float alpha, beta;
    const float *A, *B;
    float *C;
} panel_ctx;

static void panel_range(void *vc, long b, long e) {
    const panel_ctx *t = vc;
    for (long p = b; p < e; p++) {
        int lo = (int)p * t->step;
        int hi = t->by_cols ? t->N : t->M;
        int w = hi - lo < t->step ? hi - lo : t->step;
        if (t->by_cols)
            mk_sgemm(t->ta, t->tb, t->M, w, t->K, t->alpha, t->A, t->lda,
                     t->tb ? t->B + (long)lo * t->ldb : t->B + lo, t->ldb, t->beta,
                     t->C + lo, t->ldc);
        else
            mk_sgemm(t->ta, t->tb, w, t->N, t->K, t->alpha,
                     t->ta ? t->A + lo : t->A + (long)lo * t->lda, t->lda, t->B, t->ldb,
                     t->beta, t->C + (long)lo * t->ldc, t->ldc);
    }
}

void mk_sgemm_par(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    int threads = mk_cpu_threads();
    double flops = 2.0 * M * N * K;
    if (threads <= 1 || flops < 4e6) {
        mk_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int by_cols = M / threads < 64 && N > M;
    panel_ctx t = {trans_a, trans_b, M, N, K, lda, ldb, ldc, by_cols, 0, alpha, beta, A, B, C};
    int side = by_cols ? N : M;
    int parts = threads;                            // panels >= 64 wide
    if (side / parts < 64) parts = side / 64 > 0 ? side / 64 : 1;
    int step = (side + parts - 1) / parts;
    step = (step + 15) & ~15;                       // whole vector widths
    t.step = step;
    mk_parallel_for((side + step - 1) / step, 1, panel_range, &t);
}
