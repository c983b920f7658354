// mk_cpu_winograd.c: 3x3 stride-1 dilation-1 conv2d by Winograd minimal filtering,
// F(m x m, 3x3) with m = 4 (the default) or 2. docs/cpu-kernels.md has the derivation,
// the error measurements and why m = 4 with the points {0, 1, -1, 1/2, -2, inf}.
//
// Per output tile of m x m pixels the a x a input tile d (a = m + 2) and each filter g are
// transformed, V = B^T d B and U = G g G^T; the a*a products U.V summed over the input
// channels are, per transform position, one GEMM [K x C] x [C x tiles]; the output tile
// is A^T M A (+ bias). That is a*a*C*K multiplications per m*m outputs instead of 9*m*m*C*K
// (4x fewer at m = 4, 2.25x at m = 2).
//
// Work, per call (nothing is cached across calls: the caller may change the weights in
// place): filter transform, input transform, per transform position a GEMM through
// mk_sgemm (single-threaded BLAS; our pool runs the tasks), output transform + bias
// straight into y. Cut one of two ways (mk_cpu_conv2d_winograd chooses):
//   by tile blocks: U for the whole call first; a task is a block of tile rows whose
//     transformed input and products stay in the core's cache through all of its steps;
//   by output-channel blocks: V for the whole call first; a task is a block of output
//     channels that transforms its own filters (the whole U of 512x512 is 37.7 MB).
// float16 is converted to float32 as rows are read and written; float32 accumulation.
//
// Non-finite and huge values: the transforms mix every value of a tile into every
// transformed value, so one NaN/Inf in an input tile (or filter) would make all m*m
// outputs of the tile non-finite (direct: only those whose window holds it) and values
// near FLT_MAX overflow where the exact result is representable. The transforms check
// what they read (finite, |x| <= X_LIMIT, |w| <= w_limit) and the call is declined at the
// first value that fails: mk_cpu_conv2d then runs it by im2col, whose results are the
// direct method's. Within the limits nothing can overflow: the transforms' gains
// (input 14^2, filter (28/15)^2, output 11.125^2, < 2^17 together) times Cg products of
// at most X_LIMIT * w_limit stay below FLT_MAX.
#include "mk_cpu.h"
#include <math.h>
#include <string.h>

// cache budgets (measured on Zen 4, 1 MiB L2, 32 MiB L3): a tile block's transformed input
// + products (1.5 MiB: wider GEMMs paid more than strict L2 residency), a channel block's
// transformed filters (512 KiB)
#define BLOCK_BYTES (3L << 19)
#define FILTER_BLOCK_BYTES (1L << 19)
#define MIN_KB_PACKED 32         // output channels per channel block, threads permitting
#define WIDE_KB_PACKED 64        // ... at <= WIDE_KB_THREADS threads with >= WIDE_KB_TILES tiles
#define WIDE_KB_THREADS 2
#define WIDE_KB_TILES 64
#define V_LIMIT (6L << 20)
#define U_LIMIT (8L << 20)
#define X_LIMIT 0x1p48f          // inputs beyond (2.8e14) go to im2col; weights: w_limit
#define GAIN_LOG2 17             // log2 of the transforms' combined gain (bound above)

// The transforms, derived in docs/cpu-kernels.md from the interpolation points
// (m = 4: {0, 1, -1, 1/2, -2, inf}; m = 2: {0, 1, -1, inf}). B^T and A^T are written out in
// bt4/at4/bt2/at2 below; rows of B^T were scaled to small integers, the inverse scale
// moved into G (the filter side), written out in g4/g2.

typedef struct {
    const mk_conv2d_args *a;
    int dtype, m, al;            // tile m x m, transform size al = m + 2
    const void *x, *w;
    const float *bias;
    void *y;
    float *U;                    // [group][al*al][Kg][Cg], or NULL: tasks transform their own
    float *V;                    // [group][al*al][Cg][all tiles], or NULL: tasks transform theirs
    int TH, TW, Wb;              // tiles per column / row; row buffer length
    long units;                  // tile rows over the batch: N * TH
    int ub, Kb;                  // tile rows per block, output channels per block
    long nblocks, nkb;
    float w_limit;               // weights beyond go to im2col (see the top)
    int failed, declined;        // declined: a value failed the check; im2col takes the call
} wino_ctx;

// all n values finite and |v| <= lim (NaN fails the comparison); one vectorised pass
static inline __attribute__((always_inline)) int in_limit(const float *v, long n, float lim) {
    int ok = 1;
    for (long i = 0; i < n; i++) ok &= fabsf(v[i]) <= lim;
    return ok;
}
static inline void decline(const wino_ctx *t) {     // (t itself is never const)
    __atomic_store_n((int *)&t->declined, 1, __ATOMIC_RELAXED);
}
static inline int declined(const wino_ctx *t) {
    return __atomic_load_n(&t->declined, __ATOMIC_RELAXED);
}

/* ---- 4x4 transposes in registers (GCC/clang vector extensions: SSE on x86-64, NEON on
   arm64) for m = 4: tile-major pixels <-> the tile-index-contiguous rows the transforms use */
typedef float v4f __attribute__((vector_size(16)));
static inline v4f ld4(const float *p) { v4f v; memcpy(&v, p, 16); return v; }
static inline void st4(float *p, v4f v) { memcpy(p, &v, 16); }
static inline __attribute__((always_inline)) void
transpose4(v4f *a, v4f *b, v4f *c, v4f *d) {
    v4f t0 = __builtin_shufflevector(*a, *b, 0, 4, 1, 5), t1 = __builtin_shufflevector(*a, *b, 2, 6, 3, 7);
    v4f t2 = __builtin_shufflevector(*c, *d, 0, 4, 1, 5), t3 = __builtin_shufflevector(*c, *d, 2, 6, 3, 7);
    *a = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
    *b = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
    *c = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
    *d = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
}

/* ---- the 1D transforms, written out (the 2D ones apply them along columns, then rows):
   o[j*os] = sum_l BT[j][l] d[l*s] and o[j*os] = sum_l AT[j][l] v[l*s] */
static inline __attribute__((always_inline)) void
bt4(const float *d, long s, float *o, long os) {
    float d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
    o[0] = 2 * d0 - 3 * d1 - 4 * d2 + 3 * d3 + 2 * d4;
    o[os] = -2 * d1 + d2 + 5 * d3 + 2 * d4;
    o[2 * os] = -2 * d1 + 5 * d2 - d3 - 2 * d4;
    o[3 * os] = 2 * d1 + d2 - 2 * d3 - d4;
    o[4 * os] = d1 - 2 * d2 - d3 + 2 * d4;
    o[5 * os] = 2 * d1 - 3 * d2 - 4 * d3 + 3 * d4 + 2 * d5;
}
static inline __attribute__((always_inline)) void
at4(const float *v, long s, float *o, long os) {
    float v0 = v[0], v1 = v[s], v2 = v[2 * s], v3 = v[3 * s], v4 = v[4 * s], v5 = v[5 * s];
    float p = v1 + v2, q = v1 - v2;
    o[0] = v0 + p + v3 + v4;
    o[os] = q + 0.5f * v3 - 2 * v4;
    o[2 * os] = p + 0.25f * v3 + 4 * v4;
    o[3 * os] = q + 0.125f * v3 - 8 * v4 + v5;
}
// the filter side: o[i*os] = sum_r G[i][r] g[r*s], each tap times its own coefficient
// (summing the taps first, (g0 + g1 + g2) / 6, measured a larger error on small channel
// counts)
static inline __attribute__((always_inline)) void
g4(const float *g, long s, float *o, long os) {
    float g0 = g[0], g1 = g[s], g2 = g[2 * s];
    const float c6 = 1.0f / 6;
    o[0] = 0.5f * g0;
    o[os] = c6 * g0 + c6 * g1 + c6 * g2;
    o[2 * os] = c6 * g0 - c6 * g1 + c6 * g2;
    o[3 * os] = (16.0f / 15) * g0 + (8.0f / 15) * g1 + (4.0f / 15) * g2;
    o[4 * os] = (1.0f / 30) * g0 - (1.0f / 15) * g1 + (2.0f / 15) * g2;
    o[5 * os] = 0.5f * g2;
}
static inline __attribute__((always_inline)) void
bt2(const float *d, long s, float *o, long os) {
    float d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s];
    o[0] = d0 - d2;
    o[os] = d1 + d2;
    o[2 * os] = d2 - d1;
    o[3 * os] = d3 - d1;
}
static inline __attribute__((always_inline)) void
at2(const float *v, long s, float *o, long os) {
    float v0 = v[0], v1 = v[s], v2 = v[2 * s], v3 = v[3 * s];
    o[0] = v0 + v1 + v2;
    o[os] = v1 - v2 + v3;
}
static inline __attribute__((always_inline)) void
g2(const float *g, long s, float *o, long os) {
    float g0 = g[0], g1 = g[s], g2 = g[2 * s];
    o[0] = g0;
    o[os] = 0.5f * (g0 + g1 + g2);
    o[2 * os] = 0.5f * (g0 - g1 + g2);
    o[3 * os] = g2;
}
#if defined(__clang__)
#define MK_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define MK_IVDEP _Pragma("GCC ivdep")
#else
#define MK_IVDEP
#endif
enum { BT4, AT4, G4, BT2, AT2, G2 };   // which transform (a compile-time constant after inlining)
typedef int tf1d;

// one thread's scratch
typedef struct { float *rows, *D, *E, *V, *M, *orow, *U, *w9, *ftmp; } bufs;

// out[t + j*os] = f(in[t + l*is]) for t < n: the 1D transform applied to n tiles at once
// (the tile index is the contiguous one, so these loops vectorise)
static inline __attribute__((always_inline)) void
tf_tiles(tf1d f, const float *restrict in, long is, float *restrict out, long os, long n) {
    // ivdep: the outputs (one row each) never overlap; without it GCC 12 gives up on the
    // alias checks between bt4's six output rows and leaves the loop scalar
#define MK_TILES(fn) MK_IVDEP for (long t = 0; t < n; t++) fn(in + t, is, out + t, os)
    switch (f) {
    case BT4: MK_TILES(bt4); break;
    case AT4: MK_TILES(at4); break;
    case G4: MK_TILES(g4); break;
    case BT2: MK_TILES(bt2); break;
    case AT2: MK_TILES(at2); break;
    default: MK_TILES(g2); break;
    }
#undef MK_TILES
}

/* ---- filter transform of output channel gk: dst[pos * ldk * Cg + c] = (G g G^T)[pos] of
   input channel c, vectorised over c */
static inline __attribute__((always_inline)) void
filter_k(const wino_ctx *t, int al, tf1d gt, long gk, float *w9, float *tmp,
         float *dst, long ldk) {
    const mk_conv2d_args *a = t->a;
    int Cg = a->C / a->groups;
    // w9[rs][c]: the filter taps of output channel gk, one row per tap (float16 goes
    // through tmp, which is free until the transform below)
    const float *src = (const float *)t->w + gk * Cg * 9;
    if (t->dtype == MK_F16) {
        mk_h2f((const mk_half *)t->w + gk * Cg * 9, tmp, (long)Cg * 9);
        src = tmp;
    }
    if (!in_limit(src, (long)Cg * 9, t->w_limit)) { decline(t); return; }
    int c = 0;
    for (; c + 4 <= Cg; c += 4) {              // 4 channels: a 4x9 block, transposed
        const float *p = src + c * 9;
        v4f a0 = ld4(p), a1 = ld4(p + 9), a2 = ld4(p + 18), a3 = ld4(p + 27);
        v4f b0 = ld4(p + 4), b1 = ld4(p + 13), b2 = ld4(p + 22), b3 = ld4(p + 31);
        transpose4(&a0, &a1, &a2, &a3);
        transpose4(&b0, &b1, &b2, &b3);
        st4(w9 + c, a0); st4(w9 + Cg + c, a1); st4(w9 + 2 * Cg + c, a2); st4(w9 + 3 * Cg + c, a3);
        st4(w9 + 4 * Cg + c, b0); st4(w9 + 5 * Cg + c, b1); st4(w9 + 6 * Cg + c, b2);
        st4(w9 + 7 * Cg + c, b3);
        for (int j = 0; j < 4; j++) w9[8 * Cg + c + j] = p[j * 9 + 8];
    }
    for (; c < Cg; c++)
        for (int rs = 0; rs < 9; rs++) w9[rs * Cg + c] = src[c * 9 + rs];
    // tmp[i][s] = sum_r G[i][r] w9[r][s], then dst[i*al + j] = sum_s G[j][s] tmp[i][s]
    // (float16: src in tmp is dead by now)
    for (int s = 0; s < 3; s++) tf_tiles(gt, w9 + s * Cg, 3L * Cg, tmp + s * Cg, 3L * Cg, Cg);
    for (int i = 0; i < al; i++)
        tf_tiles(gt, tmp + i * 3 * Cg, Cg, dst + (long)i * al * ldk * Cg, ldk * Cg, Cg);
}

MK_MULTIVERSION static void filter_some(const wino_ctx *t, long gk0, long gk1, float *w9,
                                        float *tmp, float *dst, long ldk) {
    int Cg = t->a->C / t->a->groups;
    for (long gk = gk0; gk < gk1 && !declined(t); gk++, dst += Cg) {
        if (t->m == 4) filter_k(t, 6, G4, gk, w9, tmp, dst, ldk);
        else filter_k(t, 4, G2, gk, w9, tmp, dst, ldk);
    }
}

// the whole call's U (filter transform shared by every task)
static void filter_range(void *vc, long b, long e) {
    wino_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    int Cg = a->C / a->groups, Kg = a->K / a->groups;
    float *w9 = mk_alloc((size_t)9 * Cg * 4), *tmp = mk_alloc((size_t)3 * t->al * Cg * 4);
    if (!w9 || !tmp) t->failed = 1;
    else
        for (long gk = b; gk < e; gk++)
            filter_some(t, gk, gk + 1, w9, tmp,
                        t->U + (gk / Kg * t->al * t->al * Kg + gk % Kg) * (long)Cg, Kg);
    mk_free(w9); mk_free(tmp);
}
// d[l * T + tx] = r[tx * m + l] for tx < TW, l < al (r holds TW * m + 2 columns)
static inline __attribute__((always_inline)) void
gather_row(int m, int al, const float *r, float *d, long T, int TW) {
    int tx = 0;
    if (m == 4)
        for (; tx + 4 <= TW; tx += 4) {       // 4 tiles: 16 columns + 2 of the next tile
            const float *p = r + tx * 4;
            v4f a = ld4(p), b = ld4(p + 4), c = ld4(p + 8), e = ld4(p + 12);
            v4f f = ld4(p + 16);               // columns 16..19: 16, 17 in the row, rest padding
            transpose4(&a, &b, &c, &e);        // a: column 0 of the 4 tiles, b: column 1, ...
            st4(d + tx, a); st4(d + T + tx, b); st4(d + 2 * T + tx, c); st4(d + 3 * T + tx, e);
            st4(d + 4 * T + tx, __builtin_shufflevector(a, f, 1, 2, 3, 4));   // column 4 = next tile's 0
            st4(d + 5 * T + tx, __builtin_shufflevector(b, f, 1, 2, 3, 5));
        }
    for (; tx < TW; tx++)
        for (int l = 0; l < al; l++) d[l * T + tx] = r[tx * m + l];
}

// dst[tx * m + j] = o[j * T + tx] + bias for tx < TW, j < m
static inline __attribute__((always_inline)) void
scatter_row(int m, const float *o, long T, int TW, float bias, float *dst) {
    int tx = 0;
    if (m == 4) {
        v4f bv = {bias, bias, bias, bias};
        for (; tx + 4 <= TW; tx += 4) {
            v4f a = ld4(o + tx), b = ld4(o + T + tx), c = ld4(o + 2 * T + tx), e = ld4(o + 3 * T + tx);
            transpose4(&a, &b, &c, &e);        // a: the 4 outputs of tile tx, ...
            float *q = dst + tx * 4;
            st4(q, a + bv); st4(q + 4, b + bv); st4(q + 8, c + bv); st4(q + 12, e + bv);
        }
    }
    for (; tx < TW; tx++)
        for (int j = 0; j < m; j++) dst[tx * m + j] = o[j * T + tx] + bias;
}

/* ---- input transform of tile rows [u0, u1) for channel c:
   V[pos][c][tile] = (B^T d B)[pos] of each tile (tiles numbered from u0's first) */
static inline __attribute__((always_inline)) void
input_block(const wino_ctx *t, int m, int al, tf1d bt, int g, long u0, long u1, int c,
            float *V, long ldv, bufs *bf) {
    const mk_conv2d_args *a = t->a;
    int Cg = a->C / a->groups, Wb = t->Wb, TW = t->TW;
    long T = (u1 - u0) * TW, HW = (long)a->H * a->W;
    float *D = bf->D, *E = bf->E, *r = bf->rows;
    // D[k][l][tile] = input pixel (k, l) of the tile (zero outside the image)
    for (long u = u0; u < u1; u++) {
        long n = u / t->TH, tile0 = (u - u0) * TW;
        int ty = (int)(u % t->TH);
        long xoff = (n * a->C + (long)g * Cg + c) * HW;
        for (int k = 0; k < al; k++) {
            int ih = ty * m - a->pad_h + k;
            if (ih < 0 || ih >= a->H) {
                for (int l = 0; l < al; l++) memset(D + (k * al + l) * T + tile0, 0, (size_t)TW * 4);
                continue;
            }
            int lo = a->pad_w, hi = a->pad_w + a->W;            // columns holding input
            for (int x = 0; x < lo; x++) r[x] = 0.0f;
            if (t->dtype == MK_F32) {       // rows are short: no memcpy call per row
                const float *src = (const float *)t->x + xoff + (long)ih * a->W;
                int x = 0;
                for (; x + 4 <= a->W; x += 4) st4(r + lo + x, ld4(src + x));
                for (; x < a->W; x++) r[lo + x] = src[x];
            } else
                mk_h2f((const mk_half *)t->x + xoff + (long)ih * a->W, r + lo, a->W);
            if (!in_limit(r + lo, a->W, X_LIMIT)) { decline(t); return; }
            for (int x = hi; x < Wb; x++) r[x] = 0.0f;
            gather_row(m, al, r, D + k * al * T + tile0, T, TW);
        }
    }
    // along columns: E[i][l] = sum_k BT[i][k] D[k][l]; along rows: V[i*al + j] = sum_l BT[j][l] E[i][l]
    for (int l = 0; l < al; l++) tf_tiles(bt, D + l * T, al * T, E + l * T, al * T, T);
    for (int i = 0; i < al; i++)
        tf_tiles(bt, E + i * al * T, T, V + (long)i * al * Cg * ldv + (long)c * ldv,
                 (long)Cg * ldv, T);
}

#define ACT_RUN 4096                 // floats activated in one call at most (16 KiB: L1)

/* ---- output transform of tile rows [u0, u1) for output channel k: y = A^T M A + bias,
   where Mk[pos * pstride + tile] holds channel k's products */
static inline __attribute__((always_inline)) void
output_block(const wino_ctx *t, int m, int al, tf1d at, int g, long u0, long u1, int k,
             const float *Mk, long pstride, bufs *bf) {
    const mk_conv2d_args *a = t->a;
    int Kg = a->K / a->groups, TW = t->TW, Q = a->Q;
    long T = (u1 - u0) * TW, PQ = (long)a->P * Q;
    float *E = bf->D, *O = bf->E, *orow = bf->orow;
    // along columns: E[r][l] = sum_i AT[r][i] M[i*al + l]; along rows: O[r][j] = sum_l AT[j][l] E[r][l]
    for (int l = 0; l < al; l++) tf_tiles(at, Mk + l * pstride, al * pstride, E + l * T, al * T, T);
    for (int r = 0; r < m; r++) tf_tiles(at, E + r * al * T, T, O + r * m * T, T, T);
    long kg = (long)g * Kg + k;
    float bias = t->bias ? t->bias[kg] : 0.0f;
    float *run = NULL;                     // rows written in place and not yet activated:
    long run_n = 0;                        // contiguous, activated in one call (rows of Q = 28
    for (long u = u0; u < u1; u++) {       // a call cost 2.6x the long-row price per value)
        long n = u / t->TH, tile0 = (u - u0) * TW;
        int ty = (int)(u % t->TH);
        long yoff = (n * a->K + kg) * PQ;
        for (int r = 0; r < m; r++) {
            int p = ty * m + r;
            if (p >= a->P) break;          // the last tile row's overhang
            // float32 rows without overhang are written in place, others through orow
            int f32 = t->dtype == MK_F32, direct = f32 && TW * m == Q;
            float *yrow = f32 ? (float *)t->y + yoff + (long)p * Q : NULL;
            float *dst = direct ? yrow : orow;
            scatter_row(m, O + r * m * T + tile0, T, TW, bias, dst);
            if (direct) {                  // fused: the run just written, in L1
                if (run && run + run_n == yrow && run_n < ACT_RUN) { run_n += Q; continue; }
                if (run) mk_activate(run, run_n, a->activation);
                run = yrow;
                run_n = Q;
                continue;
            }
            mk_activate(dst, Q, a->activation);   // fused: the row just written, in L1
            if (f32) memcpy(yrow, orow, (size_t)Q * 4);
            else mk_f2h(orow, (mk_half *)t->y + yoff + (long)p * Q, Q);
        }
    }
    if (run) mk_activate(run, run_n, a->activation);
}

static inline __attribute__((always_inline)) void
task_body(const wino_ctx *t, int m, int al, tf1d bt, tf1d at, long task, bufs *bf) {
    const mk_conv2d_args *a = t->a;
    int Cg = a->C / a->groups, Kg = a->K / a->groups, TW = t->TW;
    long A2 = (long)al * al, per_g = t->nblocks * t->nkb;
    int g = (int)(task / per_g);
    long blk = task % per_g / t->nkb, kb = task % t->nkb;
    long u0 = blk * t->ub, u1 = u0 + t->ub < t->units ? u0 + t->ub : t->units;
    long T = (u1 - u0) * TW;                     // tiles in this block (GEMM width)
    int k0 = (int)(kb * t->Kb), k1 = k0 + t->Kb < Kg ? k0 + t->Kb : Kg;
    long Kb = k1 - k0;
    if (declined(t)) return;
    const float *V = t->V ? t->V + (long)g * A2 * Cg * T : bf->V;
    if (!t->V)
        for (int c = 0; c < Cg; c++) input_block(t, m, al, bt, g, u0, u1, c, bf->V, T, bf);
    const float *U = t->U ? t->U + ((long)g * A2 * Kg + k0) * Cg : bf->U;
    long ldk = t->U ? Kg : Kb;
    if (!t->U) filter_some(t, (long)g * Kg + k0, (long)g * Kg + k1, bf->w9, bf->ftmp, bf->U, Kb);
    if (declined(t)) return;                     // nothing written: im2col takes the call
    // per transform position: M[pos] (Kb x T) = U[pos] (Kb x Cg) V[pos] (Cg x T)
    for (int pos = 0; pos < A2; pos++)
        mk_sgemm(0, 0, (int)Kb, (int)T, Cg, 1.0f, U + pos * ldk * Cg, Cg, V + pos * Cg * T,
                 (int)T, 0.0f, bf->M + pos * Kb * T, (int)T);
    for (int k = k0; k < k1; k++)
        output_block(t, m, al, at, g, u0, u1, k, bf->M + (long)(k - k0) * T, Kb * T, bf);
}

MK_MULTIVERSION static void tasks4(const wino_ctx *t, long b, long e, bufs *bf) {
    for (long i = b; i < e; i++) task_body(t, 4, 6, BT4, AT4, i, bf);
}
MK_MULTIVERSION static void tasks2(const wino_ctx *t, long b, long e, bufs *bf) {
    for (long i = b; i < e; i++) task_body(t, 2, 4, BT2, AT2, i, bf);
}
// the whole call's V: items are (group, input channel)
MK_MULTIVERSION static void inputs_all(const wino_ctx *t, long b, long e, bufs *bf) {
    int Cg = t->a->C / t->a->groups;
    long A2 = (long)t->al * t->al, T = t->units * t->TW;
    for (long i = b; i < e; i++) {
        int g = (int)(i / Cg), c = (int)(i % Cg);
        float *V = t->V + (long)g * A2 * Cg * T;
        if (t->m == 4) input_block(t, 4, 6, BT4, g, 0, t->units, c, V, T, bf);
        else input_block(t, 2, 4, BT2, g, 0, t->units, c, V, T, bf);
    }
}

static void free_bufs(bufs *bf) {
    mk_free(bf->rows); mk_free(bf->D); mk_free(bf->E); mk_free(bf->V); mk_free(bf->M);
    mk_free(bf->orow); mk_free(bf->U); mk_free(bf->w9); mk_free(bf->ftmp);
}

// the buffers of one thread; V, M and the filter ones only where the task needs them
static int alloc_bufs(const wino_ctx *t, bufs *bf, int task) {
    const mk_conv2d_args *a = t->a;
    int Cg = a->C / a->groups;
    long T = (long)t->ub * t->TW, A2 = (long)t->al * t->al;
    int own_v = task && !t->V, own_u = task && !t->U;
    bf->rows = mk_alloc((size_t)t->Wb * 4);
    bf->D = mk_alloc((size_t)A2 * T * 4);
    bf->E = mk_alloc((size_t)A2 * T * 4);
    bf->V = own_v ? mk_alloc((size_t)A2 * Cg * T * 4) : NULL;
    bf->M = task ? mk_alloc((size_t)A2 * t->Kb * T * 4) : NULL;
    bf->orow = mk_alloc((size_t)t->TW * t->m * 4);
    bf->U = own_u ? mk_alloc((size_t)A2 * t->Kb * Cg * 4) : NULL;
    bf->w9 = own_u ? mk_alloc((size_t)9 * Cg * 4) : NULL;
    bf->ftmp = own_u ? mk_alloc((size_t)3 * t->al * Cg * 4) : NULL;
    return bf->rows && bf->D && bf->E && (!own_v || bf->V) && (!task || bf->M) && bf->orow &&
           (!own_u || (bf->U && bf->w9 && bf->ftmp));
}

static void input_range(void *vc, long b, long e) {
    wino_ctx *t = vc;
    bufs bf;
    if (!alloc_bufs(t, &bf, 0)) t->failed = 1;
    else inputs_all(t, b, e, &bf);
    free_bufs(&bf);
}

static void task_range(void *vc, long b, long e) {
    wino_ctx *t = vc;
    bufs bf;
    if (!alloc_bufs(t, &bf, 1)) t->failed = 1;
    else if (t->m == 4) tasks4(t, b, e, &bf);
    else tasks2(t, b, e, &bf);
    free_bufs(&bf);
}

// (64-bit sums: H + 2*pad_h overflows int for a padding near 2^30; tile counts times m
// must stay in int)
int mk_winograd_applies(const mk_conv2d_args *a) {
    return a->R == 3 && a->S == 3 && a->stride_h == 1 && a->stride_w == 1 && a->dil_h == 1 &&
           a->dil_w == 1 && a->P == a->H + 2L * a->pad_h - 2 && a->Q == a->W + 2L * a->pad_w - 2 &&
           a->P < (1 << 30) && a->Q < (1 << 30);
}

mk_status mk_cpu_conv2d_winograd(const mk_conv2d_args *a, int m, int kb_cap, int dtype,
                                 const void *x, const void *w, const float *bias, void *y) {
    int G = a->groups, Cg = a->C / G, Kg = a->K / G;
    int al = m + 2;
    long A2 = (long)al * al;
    wino_ctx t = {a, dtype, m, al, x, w, bias, y, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    t.w_limit = ldexpf(1.0f, 127 - GAIN_LOG2 - 48) / (float)Cg;   // 48: log2 X_LIMIT
    t.TH = (a->P + m - 1) / m;
    t.TW = (a->Q + m - 1) / m;
    t.Wb = t.TW * m + 4;          // the tiles read TW*m + 2 columns; 2 more for gather_row
    t.units = (long)a->N * t.TH;
    long T_all = t.units * t.TW;
    // Two ways to cut the work; both read one of the transformed operands once per task:
    //  by tiles: U once for the call, tasks = blocks of tile rows (BLOCK_BYTES of V + M),
    //    each reading all of U: nblocks * |U| (large images, few channels);
    //  by channels: V once for the call, tasks = blocks of output channels, each
    //    transforming its own filters (FILTER_BLOCK_BYTES) and reading all of V: nkb * |V|
    //    (small images, many channels: 512x512 U would be 37.7 MB).
    // By channels when U would not stay in L3 (U_LIMIT: a fresh U that size costs page
    // faults and DRAM traffic on every call) and V is the smaller of the two (V scales
    // with the input, U with the weights: 2048x2048 would be 604 MB), or when V stays in
    // L3 next to the other cores' data (V_LIMIT) and its traffic is the smaller. Measured
    // on the ResNet rows: tiles at 56 and 28 (V 14.4 and 7.2 MB), channels at 14 and 7
    // (U 9.4 and 37.7 MB).
    long want = 2L * mk_cpu_threads();
    long unit_bytes = A2 * t.TW * (Cg + Kg) * 4;
    long ub = BLOCK_BYTES / unit_bytes;
    if (ub < 1) ub = 1;
    if (ub > t.units) ub = t.units;
    long nblocks = (t.units + ub - 1) / ub;
    if ((long)G * nblocks < want) {                  // enough tasks for the threads
        long nb = (want + G - 1) / G;
        ub = (t.units + nb - 1) / nb;
        nblocks = (t.units + ub - 1) / ub;
    }
    // A channel block's 36 GEMMs each pack all of V[pos] again: blocks of 8 channels (GEMMs
    // 8 rows tall, what FILTER_BLOCK_BYTES gives from 256 channels up) spent their time
    // packing. So at least MIN_KB_PACKED channels where that still leaves a block per
    // thread (AMD EPYC, 1 thread, CPU time, min of 25: 256@14 b8 25.6 ms at 8, 18.7 at 16,
    // 17.4 at 32, 16.9 at 64; 512@7 b8 20.4 / 18.2 / 17.7 / 20.6; 256@14 b1 2.97 -> 2.50)
    // On few threads with many tiles (GEMMs >= 64 wide) 64-channel blocks pack V half as
    // often again (device, 2 threads, 256@14 b8: 8.56 -> 7.43 ms and 9.31 -> 8.53 in two
    // runs); with few tiles (b1, 512@7 b8: 16-32) they lost, the packing being cheap there
    long kb = FILTER_BLOCK_BYTES / (A2 * Cg * 4) / 8 * 8;
    long kb_packed = (long)Kg * G / mk_cpu_threads() / 8 * 8;
    if (!kb_cap)
        kb_cap = mk_cpu_threads() <= WIDE_KB_THREADS && T_all >= WIDE_KB_TILES
                 ? WIDE_KB_PACKED : MIN_KB_PACKED;
    if (kb_packed > kb_cap) kb_packed = kb_cap;
    if (kb < kb_packed) kb = kb_packed;
    // ...and about a block per thread where 8-channel blocks allow: from 64 channels
    // FILTER_BLOCK_BYTES alone gave 56-channel blocks, so 64->64 @56 at batch 1 ran as 2
    // tasks on 16 threads (device: 1.49 ms, im2col's 12 tasks 0.64, torch 0.55)
    long kb_par = ((long)Kg * G / mk_cpu_threads() + 7) / 8 * 8;
    if (kb > kb_par) kb = kb_par;
    if (kb < 8) kb = 8;
    if (kb > Kg) kb = Kg;
    long nkb = (Kg + kb - 1) / kb;
    double by_tiles = (double)nblocks * Kg * Cg, by_channels = (double)nkb * Cg * T_all;
    double V_bytes = 4.0 * G * A2 * Cg * T_all, U_bytes = 4.0 * G * A2 * Kg * Cg;
    if ((U_bytes > U_LIMIT && V_bytes < U_bytes) || (V_bytes <= V_LIMIT && by_channels < by_tiles)) {
        t.ub = (int)t.units; t.nblocks = 1;
        t.Kb = (int)kb; t.nkb = nkb;
        t.V = mk_alloc((size_t)G * A2 * Cg * T_all * 4);
        if (!t.V) return mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory (Winograd input)");
        mk_parallel_for((long)G * Cg, mk_grain(A2 * T_all * 4), input_range, &t);
    } else {
        t.ub = (int)ub; t.nblocks = nblocks;
        t.Kb = Kg; t.nkb = 1;
        t.U = mk_alloc((size_t)G * A2 * Kg * Cg * 4);
        if (!t.U) return mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory (Winograd weights)");
        mk_parallel_for((long)G * Kg, mk_grain(A2 * Cg * 3), filter_range, &t);
    }
    if (!t.failed && !t.declined)
        mk_parallel_for((long)G * t.nblocks * t.nkb, 1, task_range, &t);
    mk_free(t.U); mk_free(t.V);
    if (t.failed) return mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory (Winograd)");
    return t.declined ? MK_ERR_UNSUPPORTED : MK_OK;
}
