// mk_cpu_gemm_par.c: one GEMM cut into a grid of tiles (rows of A and C by columns of B and
// C), each tile a single-threaded BLAS call (mk_cpu_blas.c) on a thread of our pool.
// Every tile packs its own copy of the operands it reads (the BLAS is a black box), so
// the grid trades packing (A is packed once per tile column, B once per tile row) against
// balance and tile size; gemm_grid() chooses it.
#include "mk_cpu.h"

#define MIN_PAR_FLOPS 4e6   // below this one call beats waking the pool

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, pm, pn;
    float alpha, beta;
    const float *A, *B;
    float *C;
} tile_ctx;

// start of part i of `len` cut into `parts`, on a multiple of `align` (the last ends at len)
static int cut(int i, int parts, int len, int align) {
    if (i >= parts) return len;
    long lo = (long)len * i / parts;
    return (int)(lo - lo % align);
}

static void tile_range(void *vc, long b, long e) {
    const tile_ctx *t = vc;
    for (long p = b; p < e; p++) {
        int i = (int)(p / t->pn), j = (int)(p % t->pn);
        int m0 = cut(i, t->pm, t->M, 8), m1 = cut(i + 1, t->pm, t->M, 8);
        int n0 = cut(j, t->pn, t->N, 16), n1 = cut(j + 1, t->pn, t->N, 16);
        if (m1 <= m0 || n1 <= n0) continue;
        const float *a = t->ta ? t->A + m0 : t->A + (long)m0 * t->lda;
        const float *bb = t->tb ? t->B + (long)n0 * t->ldb : t->B + n0;
        mk_sgemm(t->ta, t->tb, m1 - m0, n1 - n0, t->K, t->alpha, a, t->lda, bb, t->ldb,
                 t->beta, t->C + (long)m0 * t->ldc + n0, t->ldc);
    }
}

// The grid for this GEMM on `threads` threads: *pm row parts by *pn column parts.
static void gemm_grid(int M, int N, int K, int threads, int *pm, int *pn) {
    (void)K;
    int by_cols = M / threads < 64 && N > M;
    int side = by_cols ? N : M;
    int parts = threads;                            // panels >= 64 wide
    if (side / parts < 64) parts = side / 64 > 0 ? side / 64 : 1;
    *pm = by_cols ? 1 : parts;
    *pn = by_cols ? parts : 1;
}

void mk_sgemm_par(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    int threads = mk_cpu_threads();
    int pm = 1, pn = 1;
    if (threads > 1 && 2.0 * M * N * K >= MIN_PAR_FLOPS) gemm_grid(M, N, K, threads, &pm, &pn);
    if (pm * pn <= 1) {
        mk_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    tile_ctx t = {trans_a, trans_b, M, N, K, lda, ldb, ldc, pm, pn, alpha, beta, A, B, C};
    mk_parallel_for((long)pm * pn, 1, tile_range, &t);
}
