// mk_cpu_blas.c: the GEMM core. Accelerate on macOS; scipy-openblas32 (symbols prefixed
// scipy_) elsewhere. That OpenBLAS is loaded for mpskern alone, so its thread count is ours
// to set: it follows mk_cpu_set_num_threads / MPSKERN_NUM_THREADS.
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
#ifndef __APPLE__
    scipy_openblas_set_num_threads(n);
#else
    (void)n;   // Accelerate schedules its own work
#endif
}
