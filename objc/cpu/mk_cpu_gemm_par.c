// mk_cpu_gemm_par.c: one GEMM cut into a grid of tiles (rows of A and C by columns of B and
// C), each tile a single-threaded BLAS call (mk_cpu_blas.c) on a thread of our pool.
// Every tile packs its own copy of the operands it reads (the BLAS is a black box), so
// the grid trades packing (A is packed once per tile column, B once per tile row) against
// balance and tile size; gemm_grid() chooses it by a cost model. Row panels alone (the
// previous rule) left 16 threads starved on 512^2: 8 panels of 64 rows (0.66x numpy), where
// a 4 x 4 grid ran 0.91x.
#include "mk_cpu.h"

#include <math.h>

#define MIN_PAR_FLOPS 4e6   // below this one call beats waking the pool
#define ALIGN_M 8           // tile rows: whole register blocks of the BLAS kernels
#define ALIGN_N 16          // tile columns: whole 16-float vectors
#define MAX_PARTS 64        // per dimension (the search below is over pm x pn <= 2 threads)

/* Cost model of a pm x pn grid, in seconds. Constants fitted (least squares on log time)
   to 24 shapes x 6-16 grids measured at 8 and 16 threads on a 16-core Xeon (Sapphire
   Rapids) VM, square 128-4096 and transformer/conv shapes; the chosen grid was within 3%
   of the best measured one on average (docs/cpu-kernels.md). */
#define TILE_FLOPS 9.6e10   // one thread's sgemm rate on a tile (FLOP/s)
#define TILE_PACK 3.9e-10   // per float a tile packs: its rows of A and its columns of B, x K
#define PER_THREAD 1.2e-6   // per thread taking part
#define SKEW 1.6e-5         // per doubling of the threads: the latest thread's late start

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, pm, pn;
    float alpha, beta;
    const float *A, *B;
    float *C;
    mk_tile_fn ep;          // the caller's epilogue per tile (NULL: none)
    void *ep_ctx;
} tile_ctx;

// start of part i when `len` is cut into `parts` of whole `align` units, as even as they
// can be (the last may be shorter); i = parts gives len
static int cut(int i, int parts, int len, int align) {
    long units = (len + align - 1) / align;
    long lo = units * i / parts * align;
    return lo < len ? (int)lo : len;
}

static void tile_range(void *vc, long b, long e) {
    const tile_ctx *t = vc;
    for (long p = b; p < e; p++) {
        int i = (int)(p / t->pn), j = (int)(p % t->pn);
        int m0 = cut(i, t->pm, t->M, ALIGN_M), m1 = cut(i + 1, t->pm, t->M, ALIGN_M);
        int n0 = cut(j, t->pn, t->N, ALIGN_N), n1 = cut(j + 1, t->pn, t->N, ALIGN_N);
        if (m1 <= m0 || n1 <= n0) continue;
        const float *a = t->ta ? t->A + m0 : t->A + (long)m0 * t->lda;
        const float *bb = t->tb ? t->B + (long)n0 * t->ldb : t->B + n0;
        float *c = t->C + (long)m0 * t->ldc + n0;
        mk_sgemm(t->ta, t->tb, m1 - m0, n1 - n0, t->K, t->alpha, a, t->lda, bb, t->ldb,
                 t->beta, c, t->ldc);
        if (t->ep) t->ep(t->ep_ctx, c, t->ldc, m1 - m0, n1 - n0);
    }
}

static double grid_cost(int M, int N, int K, int threads, int pm, int pn) {
    long um = (M + ALIGN_M - 1) / ALIGN_M, un = (N + ALIGN_N - 1) / ALIGN_N;
    double m = (double)((um + pm - 1) / pm * ALIGN_M), n = (double)((un + pn - 1) / pn * ALIGN_N);
    int tiles = pm * pn, used = tiles < threads ? tiles : threads;
    int rounds = (tiles + threads - 1) / threads;
    double tile = 2.0 * m * n * K / TILE_FLOPS + TILE_PACK * (m + n) * K;
    double skew = SKEW * log2((double)used);
    return rounds * tile + PER_THREAD * used + (skew < tile ? skew : tile);
}

// The grid for this GEMM on `threads` threads: *pm row parts by *pn column parts, at most
// 2 x threads tiles (more tiles than threads let early threads take the late ones' share).
// Ties go to more row parts: on 2 threads row panels ran 0-3% faster than column panels.
static void gemm_grid(int M, int N, int K, int threads, int *pm, int *pn) {
    long um = (M + ALIGN_M - 1) / ALIGN_M, un = (N + ALIGN_N - 1) / ALIGN_N;
    int max_tiles = 2 * threads;
    double best = -1.0;
    for (int i = MAX_PARTS; i >= 1; i--) {
        if (i > um || i > max_tiles) continue;
        for (int j = 1; j <= MAX_PARTS && j <= un && i * j <= max_tiles; j++) {
            double c = grid_cost(M, N, K, threads, i, j);
            if (best < 0.0 || c < best) { best = c; *pm = i; *pn = j; }
        }
    }
}

void mk_sgemm_par_ep(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc, mk_tile_fn ep, void *ep_ctx) {
    int threads = mk_cpu_threads();
    int pm = 1, pn = 1;
    if (threads > 1 && 2.0 * M * N * K >= MIN_PAR_FLOPS) gemm_grid(M, N, K, threads, &pm, &pn);
    if (pm * pn <= 1) {
        mk_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (ep) ep(ep_ctx, C, ldc, M, N);
        return;
    }
    tile_ctx t = {trans_a, trans_b, M, N, K, lda, ldb, ldc, pm, pn, alpha, beta, A, B, C,
                  ep, ep_ctx};
    mk_parallel_for((long)pm * pn, 1, tile_range, &t);
}

void mk_sgemm_par(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    mk_sgemm_par_ep(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}
