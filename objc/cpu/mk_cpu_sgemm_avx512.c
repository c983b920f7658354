// mk_cpu_sgemm_avx512.c: our own float32 GEMM for x86-64 CPUs with AVX-512 (chosen at run
// time), C = act(alpha * op(A) @ op(B) + beta * C), with the epilogue in the micro-kernel's
// store: the activation runs on the accumulator registers of the last K block, so at small
// K (where the GEMM is bound by writing C) its arithmetic hides behind the store stream
// instead of being a second pass over C after a BLAS call (OpenBLAS has no epilogue hook).
// Loops as GotoBLAS/BLIS: for each NC-column panel and KC block of K, op(B)'s panel is
// packed ONCE into a buffer that every thread of the call reads (the grid of BLAS tiles
// packs B once per tile); then tasks of MC rows x a slice of the panel's columns run on the
// pool, each packing its own MC x KC block of op(A) and running a 12 x 32 register
// micro-kernel (24 accumulators, two B vectors, one broadcast) over it. Edges are padded
// with zeros in the packed buffers and written with masked loads/stores: nothing outside
// M x N is read or written. K blocks after the first add to C (the first one reads beta*C,
// so C may alias the output, and beta == 0 never reads C: NaN there is cleared, as BLAS).
// mk_sgemm_batch_par_ep (mk_cpu_gemm_par.c) decides when this runs.
#include "mk_cpu.h"
#include "mk_cpu_vecmath.h"
#include <stdlib.h>
#include <string.h>

#ifdef MK_VEC_DISPATCH
#include <immintrin.h>

#define MR 12      // rows of the micro-kernel
#define NR 32      // columns of the micro-kernel (two vectors)
#define KC 256     // K block: a 12 x 256 A micro-panel (12 KiB) and a 256 x 32 B strip (32 KiB)
#define MC 96      // rows a task packs (8 micro-panels, 96 KiB: in L2)
#define NC 4096    // columns of one shared B panel (up to 4 MiB)
#define NT_MAX 512 // columns a task covers at most

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
    int j0, nc, p0, kc;         // the panel: columns [j0, j0 + nc), K block [p0, p0 + kc)
    int nt, tasks_n;            // columns per task (a multiple of NR), tasks per row block
    int stream;                 // non-temporal stores of C (one K block, C beyond the caches)
    float *pb;                  // packed panel: ceil(nc / NR) strips of kc x NR floats
} own_ctx;

static int imin(int a, int b) { return a < b ? a : b; }

static __mmask16 lane_mask(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

// strips [b, e) of the panel: op(B)[p0 + k][j .. j + 32) as kc rows of NR floats
OWN static void pack_b(void *vc, long b, long e) {
    const own_ctx *t = vc;
    for (long s = b; s < e; s++) {
        int j = t->j0 + (int)s * NR, w = imin(NR, t->j0 + t->nc - j), kc = t->kc;
        float *d = t->pb + s * (long)kc * NR;
        if (!t->tb) {
            __mmask16 m0 = lane_mask(w), m1 = lane_mask(w - 16);
            for (int k = 0; k < kc; k++) {
                const float *r = t->B + (long)(t->p0 + k) * t->ldb + j;
                _mm512_store_ps(d + k * NR, _mm512_maskz_loadu_ps(m0, r));
                _mm512_store_ps(d + k * NR + 16, _mm512_maskz_loadu_ps(m1, r + 16));
            }
        } else {   // B stored N x K: 16 values of K per column, transposed through L1
            float tmp[NR][16] __attribute__((aligned(64)));
            for (int k = 0; k < kc; k += 16) {
                int kk = imin(16, kc - k);
                __mmask16 m = lane_mask(kk);
                for (int jj = 0; jj < NR; jj++)
                    _mm512_store_ps(tmp[jj], jj < w ? _mm512_maskz_loadu_ps(m, t->B +
                                    (long)(j + jj) * t->ldb + t->p0 + k) : _mm512_setzero_ps());
                for (int q = 0; q < kk; q++)
                    for (int jj = 0; jj < NR; jj++) d[(long)(k + q) * NR + jj] = tmp[jj][q];
            }
        }
    }
}

// rows [i0, i0 + mc) of op(A), K block [p0, p0 + kc), as micro-panels of kc x MR floats
static void pack_a(const own_ctx *t, int i0, int mc, float *pa) {
    int kc = t->kc;
    for (int r = 0; r < mc; r += MR) {
        float *d = pa + (long)r * kc;
        int h = imin(MR, mc - r);
        if (!t->ta) {
            for (int i = 0; i < MR; i++) {
                if (i >= h) { for (int k = 0; k < kc; k++) d[k * MR + i] = 0.0f; continue; }
                const float *s = t->A + (long)(i0 + r + i) * t->lda + t->p0;
                for (int k = 0; k < kc; k++) d[k * MR + i] = s[k];
            }
        } else {
            for (int k = 0; k < kc; k++) {
                const float *s = t->A + (long)(t->p0 + k) * t->lda + i0 + r;
                for (int i = 0; i < MR; i++) d[k * MR + i] = i < h ? s[i] : 0.0f;
            }
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

// tasks [b, e): row block x column slice of the panel
OWN static void compute(void *vc, long b, long e) {
    const own_ctx *t = vc;
    float pa[MC * KC] __attribute__((aligned(64)));   // 96 KiB of the thread's stack
    int first = t->p0 == 0, act = t->p0 + t->kc == t->K ? t->act : MK_ACT_NONE;
    for (long q = b; q < e; q++) {
        int i0 = (int)(q / t->tasks_n) * MC, mc = imin(MC, t->M - i0);
        int c0 = (int)(q % t->tasks_n) * t->nt, c1 = imin(c0 + t->nt, t->nc);
        pack_a(t, i0, mc, pa);
        for (int jc = c0; jc < c1; jc += NR) {
            const float *pb = t->pb + (long)(jc / NR) * t->kc * NR;
            for (int r = 0; r < mc; r += MR) {
                long off = (long)(i0 + r) * t->ldc + t->j0 + jc;
                const float *a = pa + (long)r * t->kc;
                int h = imin(MR, mc - r), w = imin(NR, c1 - jc);
#define OWN_CALL(A) ukernel(t->kc, a, pb, t->C + off, t->Cin + off, t->ldc, h, w, t->alpha, \
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
    if (t->stream) _mm_sfence();   // streamed stores visible before the pool reports done
}

int mk_own_sgemm_batch(int trans_a, int trans_b, int batch, int M, int N, int K, float alpha,
                       const float *A, int lda, long stride_a, const float *B, int ldb,
                       long stride_b, float beta, const float *Cin, long stride_c, float *C,
                       int ldc, long stride_out, int act) {
    if (!mk_vec_wide() || K <= 0) return 0;
    int ncmax = imin(N, NC), kcmax = imin(K, KC);
    float *pb = aligned_alloc(64, (size_t)(ncmax + NR - 1) / NR * NR * kcmax * 4);
    if (!pb) return 0;
    int threads = mk_cpu_threads(), tasks_m = (M + MC - 1) / MC;
    for (int item = 0; item < batch; item++) {
        own_ctx t = {trans_a, trans_b, M, N, K, lda, ldb, ldc, act, alpha, beta,
                     A + item * stride_a, B + item * stride_b,
                     Cin ? Cin + item * stride_c : C + item * stride_out, C + item * stride_out,
                     0, 0, 0, 0, 0, 0, 0, pb};
        // one pass writes C: past 16 MiB it would only evict what the next tasks read
        t.stream = K <= KC && (long)M * N > (4L << 20) && ldc % 16 == 0 &&
                   ((unsigned long)t.C & 63) == 0;
        for (t.j0 = 0; t.j0 < N; t.j0 += NC) {
            t.nc = imin(NC, N - t.j0);
            // columns per task: at least ~2 tasks a thread where the rows alone give fewer
            int want_n = (2 * threads + tasks_m - 1) / tasks_m;
            int nt = (t.nc + want_n - 1) / want_n;
            nt = (nt + NR - 1) / NR * NR;
            t.nt = nt > NT_MAX ? NT_MAX : nt;
            t.tasks_n = (t.nc + t.nt - 1) / t.nt;
            for (t.p0 = 0; t.p0 < K; t.p0 += KC) {
                t.kc = imin(KC, K - t.p0);
                long strips = (t.nc + NR - 1) / NR;
                mk_parallel_for(strips, 1 + 16384 / ((long)t.kc * NR), pack_b, &t);
                mk_parallel_for((long)tasks_m * t.tasks_n, 1, compute, &t);
            }
        }
    }
    free(pb);
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
