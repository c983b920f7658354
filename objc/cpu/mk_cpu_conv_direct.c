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
    int mr, width;
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
