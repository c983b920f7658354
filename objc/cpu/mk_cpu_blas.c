// mk_cpu_blas.c: the BLAS binding, nothing else. Accelerate on macOS; scipy-openblas32
// (symbols prefixed scipy_) elsewhere. That OpenBLAS is loaded for mpskern alone. It runs
// single-threaded (mk_cpu_gemm_par.c cuts GEMMs into tiles on our own pool) except in
// mk_sgemm_threads, and its threaded calls run their jobs on OUR pool too (OpenBLAS's
// threads callback): one set of threads, none of OpenBLAS's spinning for ~0.1 s after a
// call while our workers (im2col, conversions) want the same cores.
#include "mk_cpu.h"
#include <pthread.h>
#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#define MK_SGEMM cblas_sgemm
#else
#include <cblas.h>
#include <stdlib.h>
#define MK_SGEMM scipy_cblas_sgemm

typedef struct { openblas_dojob_callback dojob; char *jobs; size_t size; int data; } jobs_ctx;

static void run_job(void *vc, long b, long e) {
    const jobs_ctx *j = vc;
    for (long i = b; i < e; i++) j->dojob((int)i, j->jobs + i * j->size, j->data);
}

typedef struct { jobs_ctx *j; long i; } one_job;

static void *job_thread(void *v) {
    one_job *o = v;
    run_job(o->j, o->i, o->i + 1);
    return NULL;
}

static __thread int tl_holds_pool;   // this thread is in mk_sgemm_threads, holding the pool

// OpenBLAS's threaded jobs wait for each other (they share packed panels), so they need a
// thread each: our pool's gang when mk_sgemm_threads holds it, or threads of their own (a
// call from another application thread while that count > 1 is set: rare, slow, correct).
static void blas_jobs(int sync, openblas_dojob_callback dojob, int numjobs, size_t size,
                      void *jobs, int data) {
    (void)sync;   // always run to completion (OpenBLAS passes 1)
    jobs_ctx j = {dojob, jobs, size, data};
    if (tl_holds_pool && mk_pool_gang(numjobs, run_job, &j) == 0) return;
    one_job o[numjobs];
    pthread_t t[numjobs];
    for (int i = 1; i < numjobs; i++) {
        o[i] = (one_job){&j, i};
        if (pthread_create(&t[i], NULL, job_thread, &o[i]) != 0) abort();   // cannot run serially
    }
    run_job(&j, 0, 1);
    for (int i = 1; i < numjobs; i++) pthread_join(t[i], NULL);
}

// once, at load (OpenBLAS, a dependency, is initialised before us); the count is global
__attribute__((constructor)) static void blas_single_threaded(void) {
    scipy_openblas_set_threads_callback_function(blas_jobs);
    scipy_openblas_set_num_threads(1);
}
#endif

void mk_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    MK_SGEMM(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
             trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mk_sgemm_threads(int threads, int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc) {
#ifdef __APPLE__
    (void)threads;   // Accelerate threads its calls itself
    mk_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;   // one threaded call at a time
    if (threads <= 1 || !mk_pool_hold()) {   // nested in a pool job, or another caller's
        mk_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    pthread_mutex_lock(&count_mu);
    tl_holds_pool = 1;
    scipy_openblas_set_num_threads(threads);
    mk_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    scipy_openblas_set_num_threads(1);
    tl_holds_pool = 0;
    pthread_mutex_unlock(&count_mu);
    mk_pool_release();
#endif
}
