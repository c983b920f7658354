// mk_cpu_blas.c: the BLAS binding, nothing else. Accelerate on macOS; scipy-openblas32
// (symbols prefixed scipy_) elsewhere. That OpenBLAS is loaded for mpskern alone, so it runs
// single-threaded and mk_cpu_gemm_par.c parallelises around it with our own pool: one set
// of threads, no OpenBLAS threads spinning while our workers (im2col, conversions) want
// the same cores. Depends on no other CPU file.
#include "mk_cpu.h"
#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#define MK_SGEMM cblas_sgemm
#else
#include <cblas.h>
#define MK_SGEMM scipy_cblas_sgemm
// once, at load (OpenBLAS, a dependency, is initialised before us); the count is global
__attribute__((constructor)) static void blas_single_threaded(void) {
    scipy_openblas_set_num_threads(1);
}
#endif

void mk_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    MK_SGEMM(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
             trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
