// mk_cpu_conv_direct.c: conv2d by a direct register-blocked kernel for convolutions with
// few input channels (the 7x7/2 stem's 3): there im2col + GEMM is a short reduction
// (C*R*S = 147) over an im2col R*S/stride^2 times the input's size, written and read
// again, and OpenBLAS's kernels run short-K panels at ~110 GFLOP/s per core.
// Here the input is copied once, zero-padded and split into column phases, into `in`:
// per channel Hp padded rows of stride_w runs of Lr floats, run f holding padded columns
// f, f + stride_w, ... Then output column q of tap (c, r, s) of output row p is entry
// p * stride_h * rowlen + q + off[c, r, s] of `in`, one offset per tap for every output:
// a vector of consecutive output columns is one unaligned load per tap, no bounds checks
// (mk_cpu_conv_direct_impl.h's tile: mr output channels x nv vectors in registers).
// Tasks are runs of output rows (the pool hands them out); within a task blocks of rows
// whose output stays in L2, output channels in blocks of mr (their packed weights in L1).
// Products of padded zeros are computed as in the direct method (a non-finite weight
// gives NaN there, as torch and the float64 reference). float16: the copy converts the
// input, outputs go through a float32 block.
#include "mk_cpu.h"
#include <string.h>

#define MAX_C 7                    // from 8 input channels Winograd / im2col pay (conv2d.c)
#define MAX_TAPS 4096
#define OUT_BLOCK_FLOATS (1L << 16)   // a row block's output (256 KiB: stays in L2)

typedef struct {
    const long *off;     // per tap (c, r, s): its offset in `in` from the output's position
    int taps;
    long ldo;            // floats between output channels in the output block
    long qv, Q;          // vectors per output row, output columns
    long row_step;       // floats of `in` between output rows (stride_h padded rows)
} mk_dc_geom;

typedef struct {
    void (*run)(const mk_dc_geom *g, const float *wp, const float *bias, const float *in,
                float *out, long p0, long v0, long v1, int mr);
    int mr, nv, width;   // the tile: mr output channels x nv vectors of `width` floats
} mk_dc_kernel;

#define MK_VEC_IMPL "mk_cpu_conv_direct_impl.h"
#include "mk_cpu_vec_widths.h"

typedef struct {
    const mk_conv2d_args *a;
    int dtype;
    const void *x;
    const float *bias;
    void *y;
    const mk_dc_kernel *kern;
    mk_dc_geom g;
    long Lr, rowlen, Hp, img;     // run length, padded row, padded rows, floats per image
    const float *wp;              // weights [K / mr blocks][taps][mr], zero past K
    float *in;
    int failed;
} dc_ctx;

// the padded, phased rows [b, e) of (image, channel, padded row)
static void pad_rows(void *vc, long b, long e) {
    dc_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    int sw = a->stride_w;
    float *tmp = t->dtype == MK_F16 ? mk_alloc((size_t)a->W * 4) : NULL;
    if (t->dtype == MK_F16 && !tmp) { t->failed = 1; return; }
    for (long i = b; i < e; i++) {
        long y = i % t->Hp, nc = i / t->Hp, ih = y - a->pad_h;
        float *dst = t->in + nc * t->Hp * t->rowlen + y * t->rowlen;
        if (ih < 0 || ih >= a->H) { memset(dst, 0, (size_t)t->rowlen * 4); continue; }
        long at = (nc * a->H + ih) * a->W;
        const float *src = (const float *)t->x + at;
        if (t->dtype == MK_F16) { mk_h2f((const mk_half *)t->x + at, tmp, a->W); src = tmp; }
        for (int f = 0; f < sw; f++, dst += t->Lr) {
            int lo, hi;      // entries j whose input column j * sw + f - pad_w is in [0, W)
            mk_tap_range((long)f - a->pad_w, sw, a->W, t->Lr, &lo, &hi);
            memset(dst, 0, (size_t)lo * 4);
            for (long j = lo; j < hi; j++) dst[j] = src[j * sw + f - a->pad_w];
            memset(dst + hi, 0, (size_t)(t->Lr - hi) * 4);
        }
    }
    mk_free(tmp);
}

// output rows [b, e) of the batch (row = image * P + p)
static void row_range(void *vc, long b, long e) {
    dc_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    long P = a->P, Q = a->Q, PQ = P * Q, K = a->K, mr = t->kern->mr;
    long block = OUT_BLOCK_FLOATS / (K * Q);
    if (block < 1) block = 1;
    float *ob = t->dtype == MK_F16 ? mk_alloc((size_t)(block < e - b ? block : e - b) * K * Q * 4)
                                   : NULL;
    if (t->dtype == MK_F16 && !ob) { t->failed = 1; return; }
    mk_dc_geom g = t->g;
    for (long r0 = b; r0 < e;) {
        long n = r0 / P, p0 = r0 % P;
        long p1 = p0 + block < P ? p0 + block : P;
        if (p1 - p0 > e - r0) p1 = p0 + (e - r0);
        long rows = p1 - p0;
        float *out = t->dtype == MK_F32 ? (float *)t->y + n * K * PQ + p0 * Q : ob;
        g.ldo = t->dtype == MK_F32 ? PQ : rows * Q;
        const float *in = t->in + n * t->img;
        for (long k0 = 0; k0 < K; k0 += mr) {
            int m = K - k0 < mr ? (int)(K - k0) : (int)mr;
            t->kern->run(&g, t->wp + k0 * t->g.taps, t->bias ? t->bias + k0 : NULL, in,
                         out + k0 * g.ldo, p0, p0 * g.qv, p1 * g.qv, m);
        }
        for (long k = 0; k < K; k++) {          // fused: the block just written, in L2
            float *row = out + k * g.ldo;
            mk_activate(row, rows * Q, a->activation);
            if (t->dtype == MK_F16) mk_f2h(row, (mk_half *)t->y + (n * K + k) * PQ + p0 * Q, rows * Q);
        }
        r0 += rows;
    }
    mk_free(ob);
}

// padded rows, run length and `in` per image for kernel width V (0: too big)
static long geometry(const mk_conv2d_args *a, int V, long *Lr, long *Hp) {
    long qv = (a->Q + V - 1) / V;
    *Lr = qv * V + (long)(a->S - 1) * a->dil_w / a->stride_w;
    *Hp = (long)(a->P - 1) * a->stride_h + (long)(a->R - 1) * a->dil_h + 1;
    double img = (double)a->C * *Hp * a->stride_w * *Lr;
    return img < 1e12 ? (long)img : 0;
}

int mk_conv_direct_applies(const mk_conv2d_args *a) {
    if (a->groups != 1 || a->C < 1 || a->C > MAX_C || a->R * a->S < 2 ||
        (long)a->C * a->R * a->S > MAX_TAPS)
        return 0;
    // the padded copy stays within a few times the input (huge paddings or strides that
    // skip most of it: im2col)
    long Lr, Hp, img = geometry(a, 16, &Lr, &Hp);
    return img > 0 && img <= 4 * ((long)a->C * a->H * a->W + 4096);
}

mk_status mk_cpu_conv2d_direct(const mk_conv2d_args *a, int dtype, const void *x,
                               const void *w, const float *bias, void *y) {
    const mk_dc_kernel *kern = MK_VEC_PICK(dc_kernel);
    int mr = kern->mr, V = kern->width, RS = a->R * a->S, taps = a->C * RS;
    long K = a->K, kb = (K + mr - 1) / mr;
    dc_ctx t = {a, dtype, x, bias, y, kern, {0}, 0, 0, 0, 0, NULL, NULL, 0};
    t.img = geometry(a, V, &t.Lr, &t.Hp);
    t.rowlen = (long)a->stride_w * t.Lr;
    long *off = mk_alloc((size_t)taps * sizeof(long));
    float *wp = mk_alloc((size_t)kb * taps * mr * 4);
    float *wf = dtype == MK_F16 ? mk_alloc((size_t)K * taps * 4) : NULL;
    t.in = mk_alloc((size_t)a->N * t.img * 4);
    mk_status st = MK_OK;
    if (!off || !wp || !t.in || (dtype == MK_F16 && !wf)) { st = MK_ERR_NOMEM; goto done; }
    for (int c = 0; c < a->C; c++)
        for (int r = 0; r < a->R; r++)
            for (int s = 0; s < a->S; s++) {
                long sd = (long)s * a->dil_w;
                off[(c * a->R + r) * a->S + s] = c * t.Hp * t.rowlen + (long)r * a->dil_h * t.rowlen
                                                 + sd % a->stride_w * t.Lr + sd / a->stride_w;
            }
    const float *wsrc = w;
    if (dtype == MK_F16) { mk_h2f(w, wf, K * taps); wsrc = wf; }
    for (long k = 0; k < kb * mr; k++)           // wp[k / mr][tap][k % mr]
        for (int i = 0; i < taps; i++)
            wp[(k / mr * taps + i) * mr + k % mr] = k < K ? wsrc[k * taps + i] : 0.0f;
    t.wp = wp;
    t.g = (mk_dc_geom){off, taps, 0, (a->Q + V - 1) / V, a->Q, (long)a->stride_h * t.rowlen};
    mk_parallel_for((long)a->N * a->C * t.Hp, mk_grain(t.rowlen), pad_rows, &t);
    if (!t.failed)
        mk_parallel_for((long)a->N * a->P, mk_grain(K * a->Q * taps), row_range, &t);
    if (t.failed) st = MK_ERR_NOMEM;
done:
    mk_free(off); mk_free(wp); mk_free(wf); mk_free(t.in);
    return st == MK_ERR_NOMEM ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory (direct)")
                              : st;
}

/* ---- pointwise: 1x1 stride-1 unpadded float32 convolutions on many threads (ResNet's
   1x1 layers at batch 8). As a GEMM (K x C weights times C x H*W pixels) per block of
   pixels, OpenBLAS packs both operands again in every task and zeroes C first; at 16
   threads that costs more than the multiply-adds. Here the same tiles read the input in
   place: an image is one row of H*W output columns and input channel c is tap c at offset
   c*H*W. Items are runs of `sub` vectors of one image (C x sub vectors of input, from
   L1/L2) over which every block of mr output channels passes (the packed weights stream
   from L2), the next run's input prefetched meanwhile; the activation follows per run, in
   cache. An image's last vector, when H*W is not a multiple of the width, reads a
   zero-padded copy (the input's end may be the buffer's).
   Measured (16-core Xeon VM, AVX-512, fresh outputs, one process, against the GEMM path):
   16 threads b8 64->256 @56 3.31 -> 0.85 ms, 128->512 @28 1.35 -> 1.10, 256->64 @56
   1.00 -> 0.73, 64->64 0.32 -> 0.22, 512->128 @28 0.94 -> 0.72; 8 threads 5 of 6 shapes
   faster (128->512 @28 1.46 -> 1.60); 2 threads slower where OpenBLAS's kernels run at
   full rate (64->256 @56 5.2 -> 6.3 ms), and at batch 1 (too few pixels per thread) the
   GEMM's grid over output channels balances better: those keep the GEMM. Runs of 12288
   input floats beat 4096; the prefetch pays at 8 threads. */
#define PW_MAX_C 512            // measured up to here
#define PW_MIN_THREADS 8
#define PW_MIN_PIXELS 384       // per thread, over the batch
#define PW_RUN_FLOATS 12288     // a run's input (C x sub vectors)

typedef struct {
    const mk_conv2d_args *a;
    const mk_dc_kernel *kern;
    mk_dc_geom g;
    const float *wp, *bias, *x;
    float *y;
    long full, runs, sub;       // full vectors and runs per image, vectors a run
    const long *toff;           // tap c of the last vector's copy: c * width
    int failed;
} pw_ctx;

// a 1x1 whose input is the output's pixels: stride 1, no padding
static int pw_dense(const mk_conv2d_args *a) {
    return a->stride_h == 1 && a->stride_w == 1 && a->pad_h == 0 && a->pad_w == 0;
}

int mk_conv_pointwise_applies(const mk_conv2d_args *a, int dtype) {
    long threads = mk_cpu_threads();
    // strided or padded: the gathered copy (C x P x Q per image) within the input's size
    return dtype == MK_F32 && a->groups == 1 && a->R == 1 && a->S == 1 && a->C >= 1 &&
           a->C <= PW_MAX_C && (pw_dense(a) || (long)a->P * a->Q <= (long)a->H * a->W) &&
           threads >= PW_MIN_THREADS &&
           (double)a->N * a->P * a->Q >= (double)threads * PW_MIN_PIXELS;
}

// strided/padded 1x1: rows [b, e) of (image, channel, output row) of the gathered input
typedef struct { const mk_conv2d_args *a; const float *x; float *xs; } pw_gather_ctx;

static void pw_gather_rows(void *vc, long b, long e) {
    const pw_gather_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    int q_lo, q_hi;            // output columns reading the input; the others are padding
    mk_tap_range(-(long)a->pad_w, a->stride_w, a->W, a->Q, &q_lo, &q_hi);
    for (long i = b; i < e; i++) {
        long p = i % a->P, nc = i / a->P, ih = p * a->stride_h - a->pad_h;
        float *dst = t->xs + i * a->Q;
        if (ih < 0 || ih >= a->H) { memset(dst, 0, (size_t)a->Q * 4); continue; }
        const float *src = t->x + (nc * a->H + ih) * a->W - a->pad_w;
        for (int q = 0; q < q_lo; q++) dst[q] = 0.0f;
        for (int q = q_lo; q < q_hi; q++) dst[q] = src[(long)q * a->stride_w];
        for (int q = q_hi; q < a->Q; q++) dst[q] = 0.0f;
    }
}

// the next run's input (rows of C channels, lines of 16 floats), a share per block of k
static void pw_prefetch(const float *in, long PQ, long C, long q0, long q1, long j, long kb) {
    for (long c = C * j / kb; c < C * (j + 1) / kb; c++)
        for (long q = q0; q < q1; q += 16) __builtin_prefetch(in + c * PQ + q, 0, 3);
}

static void pw_range(void *vc, long b, long e) {
    const pw_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    long C = a->C, K = a->K, PQ = (long)a->P * a->Q, V = t->kern->width, mr = t->kern->mr;
    long kb = (K + mr - 1) / mr;
    // the last vector's input, zero-padded, on the heap (36 KiB on the stack overflowed a
    // 32 KiB Python thread, which runs chunks too: qa10)
    float *tail = mk_alloc((size_t)C * V * 4);
    if (!tail) { __atomic_store_n((int *)&t->failed, 1, __ATOMIC_RELAXED); return; }
    mk_dc_geom gt = {t->toff, (int)C, PQ, 1, PQ - t->full * V, 0};
    for (long i = b; i < e; i++) {
        long n = i / t->runs, v0 = i % t->runs * t->sub, v1 = v0 + t->sub;
        int last = gt.Q > 0 && v0 <= t->full && t->full < v1;   // holds the partial vector
        if (v1 > t->full) v1 = t->full;
        long pf1 = v1 + t->sub < t->full ? v1 + t->sub : t->full;   // the next run's vectors
        const float *in = t->x + n * C * PQ;
        float *out = t->y + n * K * PQ;
        if (last)
            for (long c = 0; c < C; c++) {
                memcpy(tail + c * V, in + c * PQ + t->full * V, (size_t)gt.Q * 4);
                memset(tail + c * V + gt.Q, 0, (size_t)(V - gt.Q) * 4);
            }
        for (long k0 = 0; k0 < K; k0 += mr) {
            int m = K - k0 < mr ? (int)(K - k0) : (int)mr;
            const float *wk = t->wp + k0 * C, *bk = t->bias ? t->bias + k0 : NULL;
            if (i + 1 < e && pf1 > v1)
                pw_prefetch(in, PQ, C, v1 * V, pf1 * V, k0 / mr, kb);
            if (v1 > v0) t->kern->run(&t->g, wk, bk, in, out + k0 * PQ, 0, v0, v1, m);
            if (last) t->kern->run(&gt, wk, bk, tail, out + k0 * PQ + t->full * V, 0, 0, 1, m);
        }
        int act = a->activation;
        long cols = (last ? PQ : v1 * V) - v0 * V;
        mk_activate_tile(&act, out + v0 * V, (int)PQ, (int)K, (int)cols);
    }
    mk_free(tail);
}

mk_status mk_cpu_conv2d_pointwise(const mk_conv2d_args *a0, const void *xv, const void *wv,
                                  const float *bias, void *y) {
    const float *x = xv, *w = wv;
    // strided or padded (256->512 1x1/2 @56): the output's pixels gathered once, then the
    // dense 1x1 over them
    mk_conv2d_args dense = *a0;
    const mk_conv2d_args *a = &dense;
    float *xs = NULL;
    if (!pw_dense(a0)) {
        xs = mk_alloc((size_t)a0->N * a0->C * a0->P * a0->Q * 4);
        if (!xs) return mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory (pointwise)");
        pw_gather_ctx gc = {a0, x, xs};
        mk_parallel_for((long)a0->N * a0->C * a0->P, mk_grain(a0->Q), pw_gather_rows, &gc);
        dense.H = a0->P; dense.W = a0->Q;
        dense.stride_h = dense.stride_w = 1;
        dense.pad_h = dense.pad_w = 0;
        x = xs;
    }
    const mk_dc_kernel *kern = MK_VEC_PICK(dc_kernel);
    long C = a->C, K = a->K, PQ = (long)a->P * a->Q, mr = kern->mr, V = kern->width;
    long kb = (K + mr - 1) / mr;
    long *off = mk_alloc((size_t)2 * C * sizeof(long));   // the taps, then the tail copy's
    float *wp = mk_alloc((size_t)kb * C * mr * 4);
    if (!off || !wp) {
        mk_free(off); mk_free(wp); mk_free(xs);
        return mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory (pointwise)");
    }
    for (long c = 0; c < C; c++) off[c] = c * PQ;
    for (long k = 0; k < kb * mr; k++)           // wp[k / mr][c][k % mr]
        for (long c = 0; c < C; c++)
            wp[(k / mr * C + c) * mr + k % mr] = k < K ? w[k * C + c] : 0.0f;
    long sub = PW_RUN_FLOATS / (C * V * kern->nv) * kern->nv;
    if (sub < kern->nv) sub = kern->nv;
    long full = PQ / V, vecs = (PQ + V - 1) / V;
    pw_ctx t = {a, kern, {off, (int)C, PQ, vecs, PQ, 0}, wp, bias, x, y, full,
                (vecs + sub - 1) / sub, sub, off + C, 0};
    for (long c = 0; c < C; c++) off[C + c] = c * V;
    mk_parallel_for((long)a->N * t.runs, mk_grain(K * C * sub * V), pw_range, &t);
    mk_free(off); mk_free(wp); mk_free(xs);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory (pointwise)")
                    : MK_OK;
}
