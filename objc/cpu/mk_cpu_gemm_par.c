// mk_cpu_gemm_par.c: one GEMM cut into a grid of tiles (rows of A and C by columns of B and
// C), each tile a single-threaded BLAS call (mk_cpu_blas.c) on a thread of our pool.
// Every tile packs its own copy of the operands it reads (the BLAS is a black box), so
// the grid trades packing (A is packed once per tile column, B once per tile row) against
// balance and tile size; gemm_grid() chooses it by a cost model. Row panels alone (the
// previous rule) left 16 threads starved on 512^2: 8 panels of 64 rows (0.66x numpy), where
// a 4 x 4 grid ran 0.91x. A batch of GEMMs is one grid over all items' tiles (one hand-off
// to the pool, not one per item), and C, when it is not the output itself, is copied into
// each tile by the thread that computes it (was a single-threaded copy before the GEMM).
// Large square-ish GEMMs on up to 8 threads go to BLAS as ONE threaded call instead
// (whole_call_wins): its threads share one packed B where our tiles pack their own; its
// jobs run on our pool (mk_cpu_blas.c). On AVX-512 CPUs our own kernel
// (mk_cpu_sgemm_avx512.c: one packed B for all threads, the activation in its store) takes
// the GEMMs own_wins() names.
#define _GNU_SOURCE   // sched_getaffinity
#include "mk_cpu.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define MIN_PAR_FLOPS 4e6   // below this one call beats waking the pool...
#define MIN_PAR_OUT (1L << 17)  // ...unless it writes this many floats (small K: memory-bound)
#define ALIGN_M 8           // tile rows: whole register blocks of the BLAS kernels
#define ALIGN_N 16          // tile columns: whole 16-float vectors
#define MAX_PARTS 64        // per dimension (the search is over pm x pn <= 2 x threads)

/* Cost model of a pm x pn grid, in seconds. Constants fitted (least squares on log time)
   to 24 shapes x 6-16 grids measured at 8 and 16 threads on a 16-core Xeon (Sapphire
   Rapids) VM, square 128-4096 and transformer/conv shapes. A refit to a later sweep (S 1.1
   ms, up to 3 tiles a thread: smaller tiles) lost in a same-build A/B on that VM: GPT-2
   small 1.34x, ResNet-50 1.14x slower at 16 threads, 512^2 1.11-1.26x (docs/cpu-kernels.md). */
#define TILE_FLOPS 9.6e10   // one thread's sgemm rate on a tile (FLOP/s)
#define TILE_PACK 3.9e-10   // per float a tile packs: its rows of A and its columns of B, x K
#define PER_THREAD 1.2e-6   // per thread taking part
#define SKEW 1.6e-5         // per doubling of the threads: the latest thread's late start
#define TILE_OUT 5e-10      // per float a tile writes (and reads, with C): what a K = 1..64
                            // GEMM (a bias or residual update, a 1x1 conv) is bound by
#define TILES_PER_THREAD 2  // at most (more tiles than threads let early threads take the
                            // late ones' share)

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, pm, pn;
    long sa, sb, sc, so;    // batch strides (elements) of A, B, C and the output
    float alpha, beta;
    const float *A, *B, *Cin;   // Cin: C to copy into each tile first (NULL: the output is C)
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
    long per_item = (long)t->pm * t->pn;
    for (long p = b; p < e; p++) {
        long item = p / per_item, q = p % per_item;
        int i = (int)(q / t->pn), j = (int)(q % t->pn);
        int m0 = cut(i, t->pm, t->M, ALIGN_M), m1 = cut(i + 1, t->pm, t->M, ALIGN_M);
        int n0 = cut(j, t->pn, t->N, ALIGN_N), n1 = cut(j + 1, t->pn, t->N, ALIGN_N);
        if (m1 <= m0 || n1 <= n0) continue;
        const float *A = t->A + item * t->sa, *B = t->B + item * t->sb;
        const float *a = t->ta ? A + m0 : A + (long)m0 * t->lda;
        const float *bb = t->tb ? B + (long)n0 * t->ldb : B + n0;
        float *c = t->C + item * t->so + (long)m0 * t->ldc + n0;
        if (t->Cin) {
            const float *ci = t->Cin + item * t->sc + (long)m0 * t->ldc + n0;
            for (int r = 0; r < m1 - m0; r++)
                memmove(c + (long)r * t->ldc, ci + (long)r * t->ldc, (size_t)(n1 - n0) * 4);
        }
        mk_sgemm(t->ta, t->tb, m1 - m0, n1 - n0, t->K, t->alpha, a, t->lda, bb, t->ldb,
                 t->beta, c, t->ldc);
        if (t->ep) t->ep(t->ep_ctx, c, t->ldc, m1 - m0, n1 - n0);
    }
}

typedef struct { float *C; const float *Cin; int ldc, N; mk_tile_fn ep; void *ep_ctx; } rows_ctx;

static void copy_rows(void *vc, long b, long e) {
    const rows_ctx *r = vc;
    for (long i = b; i < e; i++)
        memmove(r->C + i * r->ldc, r->Cin + i * r->ldc, (size_t)r->N * 4);
}

static void ep_rows(void *vc, long b, long e) {
    const rows_ctx *r = vc;
    r->ep(r->ep_ctx, r->C + b * r->ldc, r->ldc, (int)(e - b), r->N);
}

// one GEMM as one threaded BLAS call; C copied in and the epilogue applied over the pool
// (one pass over C each: on these sizes a few percent of the product)
static void whole_call(const tile_ctx *t, int threads) {
    rows_ctx r = {t->C, t->Cin, t->ldc, t->N, t->ep, t->ep_ctx};
    long grain = 1 + (1L << 15) / t->N;
    if (t->Cin) mk_parallel_for(t->M, grain, copy_rows, &r);
    mk_sgemm_threads(threads, t->ta, t->tb, t->M, t->N, t->K, t->alpha, t->A, t->lda, t->B,
                     t->ldb, t->beta, t->C, t->ldc);
    if (t->ep) mk_parallel_for(t->M, grain, ep_rows, &r);
}

// whether each of `threads` can have a core of this process's affinity set (paths whose
// threads wait for each other lose badly when they share cores)
static int threads_fit_cores(int threads) {
#ifdef __APPLE__
    (void)threads;
    return 0;
#else
    cpu_set_t cs;
    return sched_getaffinity(0, sizeof cs, &cs) == 0 && threads <= CPU_COUNT(&cs);
#endif
}

// The GEMMs one threaded BLAS call runs faster than our grid. Device A/B (16-core Xeon VM,
// one build, interleaved, results/cpu-threads-xeon16/session8/): whole call / grid time at
// 2 and 8 threads: 1024^2 0.78 / 0.76, 2048^2 1.03 / 0.75, 4096^2 - / 1.04; at 16 threads
// 1024-4096^2 0.97-1.07 (even: the grid stays); 512^2 1.01-1.04 at 2-16 threads, GPT-2's
// linears (256 rows) 0.88-1.04 at 2 threads and 1.09-2.3 at 8-16: there the grid stays.
// So: up to 1024^2-sized products at 2-3 threads, 2048^2 at 4-8 (session 8's final tables
// read 4096^2 at 2 threads 0.92 and 0.89 x numpy by the whole call, session 7's grid 1.01
// and 1.00). Not on more threads than cores (its jobs wait for each other) nor on macOS
// (Accelerate threads itself: not measured).
static int whole_call_wins(int M, int N, int K, int threads) {
#ifdef __APPLE__
    (void)M; (void)N; (void)K; (void)threads;
    return 0;
#else
    if (threads > 8 || M < 1024 || N < 1024 || K < 1024) return 0;
    if ((double)M * N * K > (threads >= 4 ? 2048.0 * 2048 * 2048 : 2.0 * 1024 * 1024 * 1024))
        return 0;
    return threads_fit_cores(threads);
#endif
}

// MPSKERN_CPU_GEMM, read per call (tests and same-build A/B benchmarks): auto (the rules
// here), own (our AVX-512 kernel wherever it can run: an AVX-512 CPU, no epilogue but the
// activation), grid (BLAS tiles only), whole (one threaded BLAS call wherever it can run)
int mk_gemm_path(void) {
    const char *e = getenv("MPSKERN_CPU_GEMM");
    if (!e || !*e || !strcmp(e, "auto")) return MK_GEMM_AUTO;
    if (!strcmp(e, "own")) return MK_GEMM_OWN;
    if (!strcmp(e, "grid")) return MK_GEMM_GRID;
    if (!strcmp(e, "whole")) return MK_GEMM_WHOLE;
    return -1;
}

// The GEMMs our own kernel takes by default. Device A/B (16-core Xeon VM, one build, arms per
// call, interleaved medians of 5, session 10, results/cpu-threads-xeon16/session10/own_ab_*),
// own / the path auto took before: at 8 threads 512^2 0.88, 1024^2 0.79, 2048^2 0.81 (4096^2
// not measured), at 16 threads 512-4096^2 0.99-1.01 against session 9's own (session 9: own
// 0.80-0.93 of the grid); GPT-2's 256-row linears (trans_b) at 16 threads 256x768 -> 3072
// 0.76, LM head -> 50257 0.86 (-> 2304 0.98, -> 768 1.00, 3072 -> 768 1.09: these stay), at
// 8 threads the LM head 0.87 (-> 3072 0.99, -> 768 0.88 but 1.00 at 16: within noise,
// stay). At 2 threads own loses unfused (1.04-1.25), but with an activation on 4096^2 x
// K 64 / 256 it beats BLAS + the activation's pass over C: relu 0.90 / 1.00, gelu 0.91 /
// 0.90, silu 0.84 / 0.90 (the pass re-reads a C beyond the caches; own's is in registers).
// One run: the rules take only what it measured, each with a core per thread.
static int own_wins(int batch, int M, int N, int K, int threads, int act) {
    if (batch != 1 || !threads_fit_cores(threads)) return 0;
    if (threads >= 8 && M >= 512 && N >= 512 && K >= 512)
        return threads > 8 || (double)M * N * K <= 2048.0 * 2048 * 2048;
    if (threads >= 8 && M >= 256 && K >= 512 && N >= (threads > 8 ? 4 : 16) * K && N >= 3072)
        return 1;
    return act != MK_ACT_NONE && threads == 2 && K >= 64 && K <= 256 &&
           (long)M * N >= (4L << 20);
}

static double grid_cost(int batch, int M, int N, int K, int threads, int pm, int pn) {
    long um = (M + ALIGN_M - 1) / ALIGN_M, un = (N + ALIGN_N - 1) / ALIGN_N;
    double m = (double)((um + pm - 1) / pm * ALIGN_M), n = (double)((un + pn - 1) / pn * ALIGN_N);
    long tiles = (long)batch * pm * pn, used = tiles < threads ? tiles : threads;
    long rounds = (tiles + threads - 1) / threads;
    double tile = 2.0 * m * n * K / TILE_FLOPS + TILE_PACK * (m + n) * K + TILE_OUT * m * n;
    double skew = SKEW * log2((double)used);
    return rounds * tile + PER_THREAD * used + (skew < tile ? skew : tile);
}

// The grid for each of `batch` equal GEMMs on `threads` threads: *pm row parts by *pn column
// parts, at most TILES_PER_THREAD x threads tiles in all, or one per item when the batch
// alone has that many.
// Ties go to more row parts: on 2 threads row panels ran 0-3% faster than column panels.
static void gemm_grid(int batch, int M, int N, int K, int threads, int *pm, int *pn) {
    long um = (M + ALIGN_M - 1) / ALIGN_M, un = (N + ALIGN_N - 1) / ALIGN_N;
    long max_tiles = (long)TILES_PER_THREAD * threads;
    double best = -1.0;
    *pm = *pn = 1;
    for (int i = MAX_PARTS; i >= 1; i--) {
        if (i > um || (long)batch * i > max_tiles) continue;
        for (int j = 1; j <= MAX_PARTS && j <= un && (long)batch * i * j <= max_tiles; j++) {
            double c = grid_cost(batch, M, N, K, threads, i, j);
            if (best < 0.0 || c < best) { best = c; *pm = i; *pn = j; }
        }
    }
}

void mk_sgemm_batch_par_ep(int trans_a, int trans_b, int batch, int M, int N, int K,
                           float alpha, const float *A, int lda, long stride_a, const float *B,
                           int ldb, long stride_b, float beta, const float *Cin, long stride_c,
                           float *C, int ldc, long stride_out, mk_tile_fn ep, void *ep_ctx) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    int threads = mk_cpu_threads(), path = mk_gemm_path();
    int pm = 1, pn = 1;
    if (Cin == C && stride_c == stride_out) Cin = NULL;      // C is the output: nothing to copy
    if (beta == 0.0f) Cin = NULL;
    int act = ep == mk_activate_tile ? *(const int *)ep_ctx : MK_ACT_NONE;   // else not an int
    if ((ep == NULL || ep == mk_activate_tile) &&
        (path == MK_GEMM_OWN || (path == MK_GEMM_AUTO && own_wins(batch, M, N, K, threads, act))) &&
        mk_own_sgemm_batch(trans_a, trans_b, batch, M, N, K, alpha, A, lda, stride_a, B, ldb,
                           stride_b, beta, Cin, stride_c, C, ldc, stride_out, act))
        return;
    int par = threads > 1 && (2.0 * M * N * K * batch >= MIN_PAR_FLOPS ||
                              (long)M * N * batch >= MIN_PAR_OUT);
    if (par) gemm_grid(batch, M, N, K, threads, &pm, &pn);
    tile_ctx t = {trans_a, trans_b, M, N, K, lda, ldb, ldc, pm, pn, stride_a, stride_b,
                  stride_c, stride_out, alpha, beta, A, B, Cin, C, ep, ep_ctx};
    if (par && batch == 1 && path != MK_GEMM_GRID &&
        (path == MK_GEMM_WHOLE || whole_call_wins(M, N, K, threads))) {
        whole_call(&t, threads);
        return;
    }
    long tiles = (long)batch * pm * pn;
    if (!par || tiles == 1) tile_range(&t, 0, tiles);
    else mk_parallel_for(tiles, 1, tile_range, &t);
}

void mk_sgemm_par_ep(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc, mk_tile_fn ep, void *ep_ctx) {
    mk_sgemm_batch_par_ep(trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, NULL,
                          0, C, ldc, 0, ep, ep_ctx);
}

void mk_sgemm_par(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    mk_sgemm_par_ep(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}
