// mk_cpu_sgemm_avx512.c: our own float32 GEMM for x86-64 CPUs with AVX-512 (chosen at run
// time), C = act(alpha * op(A) @ op(B) + beta * C), with the epilogue in the micro-kernel's
// store: the activation runs on the accumulator registers of the last K block, so at small
// K (where the GEMM is bound by writing C) its arithmetic hides behind the store stream
// instead of being a second pass over C after a BLAS call (OpenBLAS has no epilogue hook).
// Loops as GotoBLAS/BLIS: for each panel of columns (at most PANEL_FLOATS packed floats,
// all of K), op(B) is packed ONCE into a buffer that every thread of the call reads (the
// grid of BLAS tiles packs B once per tile); then tasks of MC rows x a slice of the panel's
// columns run on the pool, each over all of K: per K block it packs its MC x KC block of
// op(A) and runs a 12 x 32 register micro-kernel (24 accumulators, two B vectors, one
// broadcast) over it; C's tile stays in L2 between K blocks. Packing is vectorised: rows
// of B (trans_b) and of A (not trans_a) are turned by 16 x 16 register transposes. Edges
// are padded with zeros in the packed buffers and written with masked loads/stores:
// nothing outside M x N is read or written. K blocks after the first add to C (the first
// one reads beta*C, so C may alias the output; beta == 0 never reads C: NaN there is
// cleared, as BLAS).
// mk_sgemm_batch_par_ep (mk_cpu_gemm_par.c) decides when this runs.
#include "mk_cpu.h"
#include "mk_cpu_vecmath.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef MK_VEC_DISPATCH
#include <immintrin.h>

#define MR 12      // rows of the micro-kernel
#define NR 32      // columns of the micro-kernel (two vectors)
#define KC 256     // K block: a 12 x 256 A micro-panel (12 KiB) and a 256 x 32 B strip (32 KiB)
#define MC 96      // rows a task packs (8 micro-panels, 96 KiB: in L2)
#define PANEL_FLOATS (4L << 20)   // a shared packed B panel (K x columns) holds at most this
#define NT_MAX 512 // columns a task covers at most
#define PACK_COLS 8   // packing a task's MC x KC of op(A) costs about this many columns of work

// the activation macros of mk_cpu_activation_impl.h for 16-float vectors, applied below to
// registers (their act_tile, compiled here too, is not used)
#define RV_W 16
#define RV_NAME(f) f##_own
#define RV_ATTR __attribute__((target("arch=x86-64-v4"), unused))
#define MK_ACT_KEEP
#include "mk_cpu_activation_impl.h"
#define OWN __attribute__((target("arch=x86-64-v4")))

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, act;
    float alpha, beta;
    const float *A, *B, *Cin;   // this item's operands; Cin: C to read (may be C itself)
    float *C;
    int j0, nc;                 // the panel: columns [j0, j0 + nc), all of K
    int nt, tasks_n;            // columns per task (a multiple of NR), tasks per row block
    long tasks;                 // row blocks x column slices
    int stream;                 // non-temporal stores of C (one K block, C beyond the caches)
    float *pb;                  // packed panel: ceil(nc / NR) strips of K x NR floats
    float *pa;                  // per slot (an mk_parallel_for index) an MC x KC block of A
    _Atomic long next;          // the next task to take
} own_ctx;

static int imin(int a, int b) { return a < b ? a : b; }

static __mmask16 lane_mask(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

// r[0..16) rows of 16 floats -> r[q] = column q (four rounds of 16 shuffles)
OWN static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 16; g += 4) {   // u[g + c]: column c (+4, 8, 12) of rows g..g+3
        u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xee);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xee);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {       // 128-bit lanes: rows 0-7 and 8-15, then all 16
        __m512 a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), b = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        __m512 x = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), y = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(a, x, 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(a, x, 0xdd);
        r[c + 4] = _mm512_shuffle_f32x4(b, y, 0x88);
        r[c + 12] = _mm512_shuffle_f32x4(b, y, 0xdd);
    }
}

// rows < h of src (row stride ld) x 16 columns (mask m) into out[q * step] (store mask
// sm), q < kk: 16 x 16 transposes (rows >= h are zeros)
OWN static inline __attribute__((always_inline)) void
put_columns(const float *src, long ld, int h, __mmask16 m, int kk, float *out, int step,
            __mmask16 sm) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = i < h ? _mm512_maskz_loadu_ps(m, src + i * ld) : _mm512_setzero_ps();
    transpose16(r);
#pragma GCC unroll 16
    for (int q = 0; q < 16; q++) if (q < kk) _mm512_mask_storeu_ps(out + (long)q * step, sm, r[q]);
}

// strips [b, e) of the panel: op(B)[k][j .. j + 32) as K rows of NR floats each, a K
// block of all the strips at a time (the source's next columns are still in L1/L2)
OWN static void pack_b(void *vc, long b, long e) {
    const own_ctx *t = vc;
    for (int k0 = 0; k0 < t->K; k0 += KC)
        for (long s = b; s < e; s++) {
            int j = t->j0 + (int)s * NR, w = imin(NR, t->j0 + t->nc - j), k1 = imin(k0 + KC, t->K);
            float *d = t->pb + s * (long)t->K * NR;
            if (!t->tb) {
                __mmask16 m0 = lane_mask(w), m1 = lane_mask(w - 16);
                for (int k = k0; k < k1; k++) {
                    const float *r = t->B + (long)k * t->ldb + j;
                    _mm512_store_ps(d + k * NR, _mm512_maskz_loadu_ps(m0, r));
                    _mm512_store_ps(d + k * NR + 16, _mm512_maskz_loadu_ps(m1, r + 16));
                }
            } else {   // B stored N x K: 16 x 16 blocks (columns of op(B) x values of K) turned
                const float *r = t->B + (long)j * t->ldb;
                for (int k = k0; k < k1; k += 16) {
                    int kk = imin(16, k1 - k);
                    __mmask16 m = lane_mask(kk);
                    put_columns(r + k, t->ldb, imin(w, 16), m, kk, d + (long)k * NR, NR, 0xffff);
                    put_columns(r + 16L * t->ldb + k, t->ldb, w - 16, m, kk,
                                d + (long)k * NR + 16, NR, 0xffff);
                }
            }
        }
}

// rows [i0, i0 + mc) of op(A), K block [p0, p0 + kc), as micro-panels of kc x MR floats
OWN static void pack_a(const own_ctx *t, int i0, int mc, int p0, int kc, float *pa) {
    for (int r = 0; r < mc; r += MR) {
        float *d = pa + (long)r * kc;
        int h = imin(MR, mc - r);
        if (!t->ta) {   // rows of A: 12 (or h) x 16 blocks turned into 16 rows of MR
            const float *s = t->A + (long)(i0 + r) * t->lda + p0;
            for (int k = 0; k < kc; k += 16) {
                int kk = imin(16, kc - k);
                put_columns(s + k, t->lda, h, lane_mask(kk), kk, d + (long)k * MR, MR, 0xfff);
            }
        } else {        // A stored K x M: MR consecutive values per k
            __mmask16 m = lane_mask(h);
            const float *s = t->A + (long)p0 * t->lda + i0 + r;
            for (int k = 0; k < kc; k++)
                _mm512_mask_storeu_ps(d + k * MR, 0xfff, _mm512_maskz_loadu_ps(m, s + (long)k * t->lda));
        }
    }
}

// the activation on one register (MK_ACT_NONE: unchanged)
#define OWN_ACT(v, act) ({ VF own_ = (VF)(v); \
    (act) == MK_ACT_RELU ? ACT_RELU(own_) : (act) == MK_ACT_GELU ? ACT_GELU(own_) : \
    (act) == MK_ACT_GELU_TANH ? ACT_GELU_TANH(own_) : (act) == MK_ACT_SILU ? ACT_SILU(own_) : own_; })

// C[0..mr) x [0..nr) (row stride ldc) from a packed A micro-panel and B strip. first: the
// first K block (C = alpha AB + beta Cin, Cin not read when beta == 0), else C += alpha AB;
// act: the activation before the store (a constant at each call: inlined per activation);
// stream: whole vectors go to memory past the caches (C 64-byte aligned, far larger than them)
OWN static inline __attribute__((always_inline)) void
ukernel(int kc, const float *pa, const float *pb, float *c, const float *ci, long ldc, int mr,
        int nr, float alpha, float beta, int first, int act, int stream) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(pb + k * NR), b1 = _mm512_load_ps(pb + k * NR + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_set1_ps(pa[k * MR + i]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    __mmask16 m[2] = {lane_mask(nr), lane_mask(nr - 16)};
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
        for (int h = 0; h < 2; h++) {
            __m512 v = _mm512_mul_ps(va, acc[i][h]);
            long o = (long)i * ldc + 16 * h;
            if (!first) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[h], c + o));
            else if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[h], ci + o), v);
            if (act != MK_ACT_NONE) v = (__m512)OWN_ACT(v, act);
            if (stream && m[h] == 0xffff) _mm512_stream_ps(c + o, v);
            else _mm512_mask_storeu_ps(c + o, m[h], v);
        }
    }
}

// Slots [b, e) of the pool's range, each with its own MC x KC scratch for op(A) (on the heap:
// the pool's and callers' threads may have small stacks); a slot takes tasks (a row block x
// a column slice of the panel, all of K) one at a time until none is left, so a thread
// that starts late takes fewer. Per K block a task packs its rows of op(A) and runs them
// against each strip; C's tile stays in L2 across K blocks.
OWN static void compute(void *vc, long b, long e) {
    own_ctx *t = vc;
    float *pa = t->pa + b * (long)MC * KC;
    (void)e;
    for (long q; (q = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed)) < t->tasks;) {
        int i0 = (int)(q / t->tasks_n) * MC, mc = imin(MC, t->M - i0);
        int c0 = (int)(q % t->tasks_n) * t->nt, c1 = imin(c0 + t->nt, t->nc);
        for (int p0 = 0; p0 < t->K; p0 += KC) {
            int kc = imin(KC, t->K - p0), first = p0 == 0;
            int act = p0 + kc == t->K ? t->act : MK_ACT_NONE;
            pack_a(t, i0, mc, p0, kc, pa);
            for (int jc = c0; jc < c1; jc += NR) {
                const float *pb = t->pb + ((long)(jc / NR) * t->K + p0) * NR;
                for (int r = 0; r < mc; r += MR) {
                    long off = (long)(i0 + r) * t->ldc + t->j0 + jc;
                    const float *a = pa + (long)r * kc;
                    int h = imin(MR, mc - r), w = imin(NR, c1 - jc);
#define OWN_CALL(A) ukernel(kc, a, pb, t->C + off, t->Cin + off, t->ldc, h, w, t->alpha, \
                            t->beta, first, A, t->stream)
                    switch (act) {
                    case MK_ACT_RELU: OWN_CALL(MK_ACT_RELU); break;
                    case MK_ACT_GELU: OWN_CALL(MK_ACT_GELU); break;
                    case MK_ACT_GELU_TANH: OWN_CALL(MK_ACT_GELU_TANH); break;
                    case MK_ACT_SILU: OWN_CALL(MK_ACT_SILU); break;
                    default: OWN_CALL(MK_ACT_NONE); break;
                    }
#undef OWN_CALL
                }
            }
        }
    }
    if (t->stream) _mm_sfence();   // streamed stores visible before the pool reports done
}

// Columns per task: the multiple of NR up to NT_MAX with the least modelled time, rounds of
// tasks (ceil(tasks / threads)) x (columns + PACK_COLS: a task's packing of its rows of
// op(A), in columns of work); ties to wider tasks. GPT-2's 256 x 2304 at 16 threads: 3 row
// blocks x 5 slices of 480 columns, one round (was 3 x 11 of 224: 33 tasks, 3 rounds).
static int task_columns(int nc, int tasks_m, int threads) {
    int best = NR;
    double best_cost = -1.0;
    for (int nt = imin(NT_MAX, (nc + NR - 1) / NR * NR); nt >= NR; nt -= NR) {
        long tasks = (long)tasks_m * ((nc + nt - 1) / nt);
        double cost = (double)((tasks + threads - 1) / threads) * (nt + PACK_COLS);
        if (best_cost < 0.0 || cost < best_cost) { best_cost = cost; best = nt; }
    }
    return best;
}

int mk_own_sgemm_batch(int trans_a, int trans_b, int batch, int M, int N, int K, float alpha,
                       const float *A, int lda, long stride_a, const float *B, int ldb,
                       long stride_b, float beta, const float *Cin, long stride_c, float *C,
                       int ldc, long stride_out, int act) {
    if (!mk_vec_wide() || K <= 0) return 0;
    // panels of at most PANEL_FLOATS packed floats (K x columns), as even as whole strips allow
    long max_nc = PANEL_FLOATS / K / NR * NR;
    if (max_nc < NR) max_nc = NR;
    int panels = (int)((N + max_nc - 1) / max_nc), nc_even = (N + panels - 1) / panels;
    nc_even = (nc_even + NR - 1) / NR * NR;
    int threads = mk_cpu_threads(), tasks_m = (M + MC - 1) / MC;
    float *pb = aligned_alloc(64, (size_t)nc_even * K * sizeof(float));
    float *pa = aligned_alloc(64, (size_t)threads * MC * KC * sizeof(float));
    if (!pb || !pa) { free(pb); free(pa); return 0; }   // nothing written: the BLAS path runs
    for (int item = 0; item < batch; item++) {
        own_ctx t = {trans_a, trans_b, M, N, K, lda, ldb, ldc, act, alpha, beta,
                     A + item * stride_a, B + item * stride_b,
                     Cin ? Cin + item * stride_c : C + item * stride_out, C + item * stride_out,
                     0, 0, 0, 0, 0, 0, pb, pa, 0};
        // one pass writes C: past 16 MiB it would only evict what the next tasks read
        t.stream = K <= KC && (long)M * N > (4L << 20) && ldc % 16 == 0 &&
                   ((unsigned long)t.C & 63) == 0;
        for (t.j0 = 0; t.j0 < N; t.j0 += nc_even) {
            t.nc = imin(nc_even, N - t.j0);
            t.nt = task_columns(t.nc, tasks_m, threads);
            t.tasks_n = (t.nc + t.nt - 1) / t.nt;
            t.tasks = (long)tasks_m * t.tasks_n;
            atomic_store_explicit(&t.next, 0, memory_order_relaxed);
            mk_parallel_for((t.nc + NR - 1) / NR, 1 + 16384 / ((long)K * NR), pack_b, &t);
            // one slot per thread, each its own index (the pool hands out disjoint ranges)
            mk_parallel_for(t.tasks < threads ? t.tasks : threads, 1, compute, &t);
        }
    }
    free(pb);
    free(pa);
    return 1;
}

#else   // no AVX-512 build (macOS, clang, other CPUs): the BLAS path always

int mk_own_sgemm_batch(int trans_a, int trans_b, int batch, int M, int N, int K, float alpha,
                       const float *A, int lda, long stride_a, const float *B, int ldb,
                       long stride_b, float beta, const float *Cin, long stride_c, float *C,
                       int ldc, long stride_out, int act) {
    (void)trans_a; (void)trans_b; (void)batch; (void)M; (void)N; (void)K; (void)alpha;
    (void)A; (void)lda; (void)stride_a; (void)B; (void)ldb; (void)stride_b; (void)beta;
    (void)Cin; (void)stride_c; (void)C; (void)ldc; (void)stride_out; (void)act;
    return 0;
}
#endif
