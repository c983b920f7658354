// mk_cpu_conv_splitk.c: one image's conv2d GEMM y[K x PQ] = w[K x CRS] @ col[CRS x PQ]
// with the reduction (input channels x taps) cut into chunks, for conv2d's small-images
// path (batch 1, late layers: 49-196 output pixels, 1024-4608 reduction rows).
//
// Cut over output channels and pixels alone, each of 16 threads packs the whole of col
// again for a tile 32 rows tall (512->512 3x3 @7: 4608 x 49, 0.9 MB per tile, 16 times),
// and the packing outweighs the multiply-adds. Cutting the reduction into pk chunks
// divides what each tile packs by pk; the price is pk - 1 partial outputs (K x PQ each)
// added afterwards, with the bias and the activation, in one pass over the pool.
// Chunk 0 writes into y itself. Sums per output are the same multiply-adds in another
// order (float32 throughout), so NaN/Inf propagate as in one GEMM.
#include "mk_cpu.h"
#include <math.h>

#define ALIGN_M 8            // tile rows: whole register blocks of the BLAS kernels
#define ALIGN_N 16           // tile columns: 16-float vectors
#define ALIGN_K 16           // chunk boundaries
// The tile cost model of mk_cpu_gemm_par.c's grid (same fitted constants), plus the
// partials' pass: per float it reads
#define TILE_FLOPS 9.6e10
#define TILE_PACK 3.9e-10
#define PASS_FLOAT 5e-10
#define MAX_PARTIAL_FLOATS (1L << 21)   // the partial outputs' scratch (8 MiB)
#define MIN_GAIN 0.85        // split only when the model's time drops below this share
// at most this many chunks: on the device (16-core Xeon, batch 1, 16 threads) 512->512 3x3
// @7 took 0.43 ms in 4 chunks, 0.58 in 16 (the model's pick without a cap), 0.56 unsplit:
// the model misses what more partials cost (their pass, their scratch pages)
#define MAX_CHUNKS 4

// start of part i when len is cut into parts of whole align units
static long cut(long i, long parts, long len, long align) {
    long units = (len + align - 1) / align, lo = units * i / parts * align;
    return lo < len ? lo : len;
}

// model time of pm x pn tiles per chunk, pk chunks, on `threads` threads
static double cost(int K, int PQ, long CRS, int threads, long pm, long pn, long pk) {
    double m = (double)(((K + ALIGN_M - 1) / ALIGN_M + pm - 1) / pm * ALIGN_M);
    double n = (double)(((PQ + ALIGN_N - 1) / ALIGN_N + pn - 1) / pn * ALIGN_N);
    double k = (double)(((CRS + ALIGN_K - 1) / ALIGN_K + pk - 1) / pk * ALIGN_K);
    long tiles = pm * pn * pk, rounds = (tiles + threads - 1) / threads;
    double tile = 2.0 * m * n * k / TILE_FLOPS + TILE_PACK * (m + n) * k;
    return rounds * tile + (pk > 1 ? PASS_FLOAT * pk * (double)K * PQ / threads : 0.0);
}

int mk_conv_splitk_parts(int K, int PQ, long CRS, int threads, int *pm, int *pn) {
    long um = (K + ALIGN_M - 1) / ALIGN_M, un = (PQ + ALIGN_N - 1) / ALIGN_N;
    double best[2] = {-1.0, -1.0};     // without / with a split
    int best_pk = 1;
    for (long pk = 1; pk <= threads && pk <= MAX_CHUNKS && pk * ALIGN_K <= CRS; pk *= 2) {
        if ((pk - 1) * K * (long)PQ > MAX_PARTIAL_FLOATS) break;
        for (long i = 1; i <= um && pk * i <= threads; i++)
            for (long j = 1; j <= un && pk * i * j <= threads; j++) {
                double c = cost(K, PQ, CRS, threads, i, j, pk);
                int s = pk > 1;
                if (best[s] < 0.0 || c < best[s]) {
                    best[s] = c;
                    if (s) { best_pk = (int)pk; *pm = (int)i; *pn = (int)j; }
                }
            }
    }
    return best[1] >= 0.0 && best[1] < MIN_GAIN * best[0] ? best_pk : 1;
}

typedef struct {
    int K, PQ, pm, pn, pk, act;
    long CRS;
    const float *w, *col, *bias;
    float *y, *part;        // part: chunks 1..pk-1, K x PQ each
} splitk_ctx;

static void chunk_tiles(void *vc, long b, long e) {
    const splitk_ctx *t = vc;
    for (long i = b; i < e; i++) {
        long kc = i % t->pk, tile = i / t->pk, mi = tile / t->pn, nj = tile % t->pn;
        long m0 = cut(mi, t->pm, t->K, ALIGN_M), m1 = cut(mi + 1, t->pm, t->K, ALIGN_M);
        long n0 = cut(nj, t->pn, t->PQ, ALIGN_N), n1 = cut(nj + 1, t->pn, t->PQ, ALIGN_N);
        long k0 = cut(kc, t->pk, t->CRS, ALIGN_K), k1 = cut(kc + 1, t->pk, t->CRS, ALIGN_K);
        if (m1 <= m0 || n1 <= n0 || k1 <= k0) continue;    // (k1 <= k0: its partial is unused)
        float *out = kc ? t->part + (kc - 1) * t->K * (long)t->PQ : t->y;
        mk_sgemm(0, 0, (int)(m1 - m0), (int)(n1 - n0), (int)(k1 - k0), 1.0f,
                 t->w + m0 * t->CRS + k0, (int)t->CRS, t->col + k0 * t->PQ + n0, t->PQ, 0.0f,
                 out + m0 * t->PQ + n0, t->PQ);
    }
}

// y += the partials (of chunks that hold rows), + bias, activation; rows [b, e)
static void add_partials(void *vc, long b, long e) {
    const splitk_ctx *t = vc;
    long PQ = t->PQ, KPQ = (long)t->K * PQ;
    for (long r = b; r < e; r++) {
        float *y = t->y + r * PQ;
        for (int kc = 1; kc < t->pk; kc++) {
            if (cut(kc + 1, t->pk, t->CRS, ALIGN_K) <= cut(kc, t->pk, t->CRS, ALIGN_K)) continue;
            const float *p = t->part + (kc - 1) * KPQ + r * PQ;
            for (long i = 0; i < PQ; i++) y[i] += p[i];
        }
        if (t->bias) {
            float v = t->bias[r];
            for (long i = 0; i < PQ; i++) y[i] += v;
        }
        mk_activate(y, PQ, t->act);
    }
}

mk_status mk_conv_gemm_splitk(int K, int PQ, long CRS, int pm, int pn, int pk,
                              const float *w, const float *col, const float *bias, int act,
                              float *y) {
    float *part = mk_alloc((size_t)(pk - 1) * K * PQ * 4);
    if (!part) return MK_ERR_NOMEM;
    splitk_ctx t = {K, PQ, pm, pn, pk, act, CRS, w, col, bias, y, part};
    mk_parallel_for((long)pm * pn * pk, 1, chunk_tiles, &t);
    mk_parallel_for(K, mk_grain((long)PQ * pk), add_partials, &t);
    mk_free(part);
    return MK_OK;
}
