// mk_cpu_conv2d.c: NCHW conv2d, weight (K, C/groups, R, S), per-channel float32 bias.
// mk_cpu_conv2d checks the arguments and takes one path (choose_path, in this order):
//   depthwise (C/groups == 1, groups > 1): direct, one output plane per task
//   bias only: no input channels
//   3x3 stride-1 dilation-1 with enough channels: Winograd F(4x4, 3x3), mk_cpu_winograd.c;
//     when its transformed operands do not fit in memory or it declines non-finite/huge
//     values, the path below that applies
//   at most 7 input channels (groups 1, the 7x7/2 stem): a direct register-blocked kernel
//     over a padded copy of the input, mk_cpu_conv_direct.c (im2col when the copy does
//     not fit in memory)
//   1x1 float32 on >= 8 threads with >= 384 pixels a thread and at most 512 input
//     channels (ResNet's 1x1 layers at batch 8): the same register tiles reading the input
//     in place, mk_cpu_conv_direct.c (pointwise); strided/padded (256->512 1x1/2 @56) over
//     the output's pixels gathered once (im2col's blocks when that copy does not fit)
//   small images (fewer images than threads, few pixels, float32; a deeper im2col too
//     where the blocked path would leave the threads idle): per image one im2col and one
//     GEMM cut over output channels (on many threads also over the reduction,
//     mk_cpu_conv_splitk.c)
//   blocked (plan_blocks): tasks of (group, block of output pixels), each an im2col of its
//     block into an L2-sized buffer + single-threaded GEMMs (1x1 stride-1 float32 reads
//     the input in place). A block is a run of output rows of one image, whole images
//     when an image is small (late ResNet layers) so the GEMM stays wide, or columns of
//     one row when a row is wider than SCRATCH_FLOATS allows; huge kernels are reduced in
//     chunks. Scratch stays bounded whatever the shape.
// float16: input rows and weights are converted to float32 (float32 accumulation).
// MPSKERN_CPU_CONV (read per call) forces an algorithm, for tests and benchmarks: auto
// (default), gemm (im2col + GEMM: never Winograd, the direct kernels or a split
// reduction), winograd / winograd2 (F(4x4) / F(2x2) wherever it applies; the other
// convolutions still take the paths above), session9 (auto with session 9's rules, A/B).
// A small-images call whose images have at most 64 output pixels (AVX-512) runs as
// mk_cpu_conv_fewpix.c's kernel (512->512 3x3 @7 at batch 1).
#include "mk_cpu.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COL_BLOCK_FLOATS (1 << 18)   // im2col block (1 MiB): stays in L2 for the GEMM
#define MIN_COLS 256
#define MIN_TILES 16                 // Winograd's 4x4 output tiles per call (winograd_choice)
// Scratch bound per thread (8 MiB each for the im2col block and the output block): a huge
// kernel (32x32 on 64 channels: 65536 rows of im2col) is cut along the reduction, a wide
// row into column blocks, many output channels narrow the block; never below MIN_COLS
// columns (a narrow GEMM spends its time packing the weights)
#define SCRATCH_FLOATS (1L << 21)

// A strided convolution whose taps overlap along a row (S > stride_w: the 7x7/2 stem) reads
// its input through a copy in column phases: each input row becomes stride_w runs, run f
// holding columns f, f + stride_w, ..., so that every im2col row is a memcpy instead of a
// strided gather (the stem's im2col took 40% of its time). phase_start(a, f): run f's offset.
static int use_phases(const mk_conv2d_args *a) { return a->stride_w > 1 && a->S > a->stride_w; }

static long phase_start(const mk_conv2d_args *a, int f) {
    long o = 0;
    for (int g = 0; g < f; g++) o += (a->W - g + a->stride_w - 1) / a->stride_w;
    return o;
}

// one input row (W floats) into its phase runs
static void to_phases(const mk_conv2d_args *a, const float *src, float *dst) {
    int sw = a->stride_w;
    for (int f = 0; f < sw; f++)
        for (int w = f; w < a->W; w += sw) *dst++ = src[w];
}

// im2col of reduction rows [k0, k1) (row = (c, r, s), c counted from x's first channel)
// for output rows [p0, p0+rows), columns [q0, q0+qn) of one image (rows > 1 only with
// whole rows). x holds input rows [ih0, ...) of each channel, channel after channel
// `cstride` floats apart, in phase runs when `phased`; rows outside [0, H) are padding.
// col: row k at col + (k-k0)*ld.
static void im2col(const mk_conv2d_args *a, const float *x, long cstride, int ih0, int phased,
                   long k0, long k1, int p0, int rows, int q0, int qn, float *col, long ld) {
    int RS = a->R * a->S, W = a->W, e = q0 + qn, sw = a->stride_w;
    for (long row = k0; row < k1; row++) {
        int c = (int)(row / RS), r = (int)(row % RS) / a->S, s = (int)(row % a->S);
        float *dst = col + (row - k0) * ld;
        long off_w = (long)s * a->dil_w - a->pad_w;
        int lo, hi;   // output columns whose input column q*stride_w + off_w is in [0, W)
        mk_tap_range(off_w, sw, W, a->Q, &lo, &hi);
        lo = lo < q0 ? q0 : lo > e ? e : lo;
        hi = hi > e ? e : hi < lo ? lo : hi;
        // phased: input column q*sw + off_w is entry q + (off_w - f) / sw of run f
        int f = (int)(((off_w % sw) + sw) % sw);
        long run = phased ? phase_start(a, f) + (off_w - f) / sw : 0;
        for (int p = p0; p < p0 + rows; p++, dst += qn) {
            long ih = (long)p * a->stride_h - a->pad_h + (long)r * a->dil_h;
            if (ih < 0 || ih >= a->H) { memset(dst, 0, (size_t)qn * 4); continue; }
            const float *xr = x + c * cstride + (ih - ih0) * W;
            for (int q = q0; q < lo; q++) dst[q - q0] = 0.0f;
            if (phased) memcpy(dst + (lo - q0), xr + run + lo, (size_t)(hi - lo) * 4);
            else if (sw == 1) memcpy(dst + (lo - q0), xr + lo + off_w, (size_t)(hi - lo) * 4);
            else for (int q = lo; q < hi; q++) dst[q - q0] = xr[(long)q * sw + off_w];
            for (int q = hi; q < e; q++) dst[q - q0] = 0.0f;
        }
    }
}

typedef struct {
    const mk_conv2d_args *a;
    int dtype, pointwise, phased;   // phased: im2col reads phase runs (use_phases)
    const void *x;
    const float *w;          // float32 weights (converted up front for float16)
    const float *bias;
    void *y;
    int rows, imgs;          // a block: `rows` output rows of one image, or `imgs` images
    int qn, nq;              // rows == 1: columns per block, blocks per row (else Q, 1)
    long kc;                 // reduction rows per im2col chunk (CRS: one GEMM)
    long blocks;             // blocks per group
    long col_floats, slab_floats, out_floats;
    int failed;
} gemm_conv_ctx;

// The block's input for group g, image n, output rows [p0, p0+rows), columns [q0, q0+qn):
// the source im2col reads (the group's first channel, channels cstride floats apart,
// input rows from *ih0). float16 converts the rows the block reads into slab first, a
// phased convolution (use_phases) copies them there in phase runs (float32 rows directly,
// float16 rows through the slab's last W floats)
static const float *block_source(gemm_conv_ctx *t, int g, long n, int p0, int rows,
                                 float *slab, long *cstride, int *ih0) {
    const mk_conv2d_args *a = t->a;
    int Cg = a->C / a->groups;
    long HW = (long)a->H * a->W;
    long xoff = (n * a->C + (long)g * Cg) * HW;          // first channel of the group
    *cstride = HW;
    *ih0 = 0;
    if (t->dtype == MK_F32 && !t->phased) return (const float *)t->x + xoff;
    long lo = (long)p0 * a->stride_h - a->pad_h;
    long hi = (long)(p0 + rows - 1) * a->stride_h - a->pad_h + (long)(a->R - 1) * a->dil_h + 1;
    if (lo < 0) lo = 0;
    if (hi > a->H) hi = a->H;
    long srows = hi > lo ? hi - lo : 0;
    if (lo > a->H) lo = a->H;
    float *tmp = slab + (t->slab_floats - a->W);
    for (int c = 0; c < Cg; c++) {
        float *dst = slab + c * srows * a->W;
        if (!t->phased) {
            mk_h2f((const mk_half *)t->x + xoff + c * HW + (long)lo * a->W, dst, srows * a->W);
            continue;
        }
        for (long h = lo; h < hi; h++, dst += a->W) {
            long at = xoff + c * HW + h * a->W;
            const float *src = (const float *)t->x + at;
            if (t->dtype == MK_F16) { mk_h2f((const mk_half *)t->x + at, tmp, a->W); src = tmp; }
            to_phases(a, src, dst);
        }
    }
    *cstride = srows * a->W;
    *ih0 = (int)lo;
    return slab;
}

static void conv_task(gemm_conv_ctx *t, long task, float *col, float *slab, float *ys) {
    const mk_conv2d_args *a = t->a;
    int G = a->groups, Cg = a->C / G, Kg = a->K / G;
    int CRS = Cg * a->R * a->S, Q = a->Q;
    long PQ = (long)a->P * Q;
    int g = (int)(task / t->blocks);
    long blk = task % t->blocks;
    long n0, n1;
    int p0, rows, q0 = 0, qn = Q;
    if (t->imgs) {                       // whole images [n0, n1)
        n0 = blk * t->imgs;
        n1 = n0 + t->imgs < a->N ? n0 + t->imgs : a->N;
        p0 = 0; rows = a->P;
    } else {                             // rows of one image (columns of one row: nq > 1)
        long per = (a->P + t->rows - 1) / t->rows * t->nq;
        n0 = blk / per; n1 = n0 + 1;
        p0 = (int)(blk % per / t->nq) * t->rows;
        rows = a->P - p0 < t->rows ? a->P - p0 : t->rows;
        q0 = (int)(blk % t->nq) * t->qn;
        qn = Q - q0 < t->qn ? Q - q0 : t->qn;
    }
    long img_cols = (long)rows * qn, ncol = img_cols * (n1 - n0);
    int one_image = n1 - n0 == 1;
    long cstride[1];
    int ih0[1];
    const float *src = one_image ? block_source(t, g, n0, p0, rows, slab, cstride, ih0) : NULL;
    // float32 1x1 stride 1 on one image: the input itself is the GEMM's B
    const float *direct = one_image && t->pointwise && t->dtype == MK_F32
                          ? src + (long)p0 * Q + q0 : NULL;
    const float *wg = t->w + (long)g * Kg * CRS;
    // float32, one image: the GEMM writes the output in place; otherwise through ys
    int in_place = t->dtype == MK_F32 && one_image;
    float *yo = in_place ? (float *)t->y + (n0 * a->K + (long)g * Kg) * PQ + (long)p0 * Q + q0
                         : ys;
    long ldy = in_place ? PQ : ncol;
    // The bias goes in first and the GEMMs accumulate onto it (beta 1): no zeroing pass
    // inside the BLAS and no bias pass after it over the block (the stem: ~10% of its time)
    if (t->bias)
        for (int k = 0; k < Kg; k++) {
            float v = t->bias[g * Kg + k], *row = yo + (long)k * ldy;
            for (long i = 0; i < ncol; i++) row[i] = v;
        }
    // the reduction in chunks of kc rows (one chunk but for huge kernels), accumulated
    for (long k0 = 0; k0 < CRS; k0 += t->kc) {
        long k1 = k0 + t->kc < CRS ? k0 + t->kc : CRS;
        const float *B = direct ? direct + k0 * cstride[0] : col;
        long ldb = direct ? cstride[0] : ncol;
        if (!direct)
            for (long n = n0; n < n1; n++) {
                long cs = cstride[0];
                int h0 = ih0[0];
                const float *x = one_image ? src : block_source(t, g, n, p0, rows, slab, &cs, &h0);
                im2col(a, x, cs, h0, t->phased, k0, k1, p0, rows, q0, qn,
                       col + (n - n0) * img_cols, ncol);
            }
        mk_sgemm(0, 0, Kg, (int)ncol, (int)(k1 - k0), 1.0f, wg + k0, CRS, B, (int)ldb,
                 k0 || t->bias ? 1.0f : 0.0f, yo, (int)ldy);
    }
    if (in_place && a->activation == MK_ACT_NONE) return;
    for (int k = 0; k < Kg; k++) {
        float *row = yo + (long)k * ldy;
        mk_activate(row, ncol, a->activation);   // fused: the row is still in cache
        if (in_place) continue;
        for (long n = n0; n < n1; n++) {
            long dst = (n * a->K + (long)g * Kg + k) * PQ + (long)p0 * Q + q0;
            const float *src = row + (n - n0) * img_cols;
            if (t->dtype == MK_F16) mk_f2h(src, (mk_half *)t->y + dst, img_cols);
            else memcpy((float *)t->y + dst, src, (size_t)img_cols * 4);
        }
    }
}

static void conv_range(void *vc, long b, long e) {
    gemm_conv_ctx *t = vc;
    float *col = t->col_floats ? mk_alloc((size_t)t->col_floats * 4) : NULL;
    float *slab = t->slab_floats ? mk_alloc((size_t)t->slab_floats * 4) : NULL;
    float *ys = t->out_floats ? mk_alloc((size_t)t->out_floats * 4) : NULL;
    if ((t->col_floats && !col) || (t->slab_floats && !slab) || (t->out_floats && !ys))
        t->failed = 1;
    else
        for (long i = b; i < e; i++) conv_task(t, i, col, slab, ys);
    mk_free(col); mk_free(slab); mk_free(ys);
}

/* ---- depthwise: each output channel k reads input channel k / (K/groups) */
typedef struct {
    const mk_conv2d_args *a;
    int dtype;
    const void *x, *w;
    const float *bias;
    void *y;
    int failed;
} dw_ctx;

// The taps' loops below skip the zero padding. A non-finite weight times a padded zero is
// NaN (torch and the float64 reference multiply it): pad_nonfinite adds those products.
static void pad_nonfinite(const mk_conv2d_args *a, const float *wk, int p, float *yr) {
    long ih0 = (long)p * a->stride_h - a->pad_h;
    for (int r = 0; r < a->R; r++) {
        long ih = ih0 + (long)r * a->dil_h;
        for (int s = 0; s < a->S; s++) {
            float wv = wk[r * a->S + s];
            if (isfinite(wv)) continue;
            int q_lo = 0, q_hi = 0;               // columns reading the input: none when row ih is padding
            if (ih >= 0 && ih < a->H)
                mk_tap_range((long)s * a->dil_w - a->pad_w, a->stride_w, a->W, a->Q, &q_lo, &q_hi);
            for (int q = 0; q < a->Q; q++)
                if (q < q_lo || q >= q_hi) yr[q] += wv * 0.0f;
        }
    }
}

MK_MULTIVERSION static void dw_plane(const mk_conv2d_args *a, const float *xp, const float *wk,
                                     float bias, float *yp) {
    int Q = a->Q, W = a->W, sw = a->stride_w;
    int finite = 1;
    for (int i = 0; i < a->R * a->S; i++) finite &= isfinite(wk[i]) != 0;
    for (int p = 0; p < a->P; p++) {
        float *yr = yp + (long)p * Q;
        for (int q = 0; q < Q; q++) yr[q] = bias;
        int r0, r1;      // taps r whose input row p*stride_h - pad_h + r*dil_h is in [0, H)
        mk_tap_range((long)p * a->stride_h - a->pad_h, a->dil_h, a->H, a->R, &r0, &r1);
        for (int r = r0; r < r1; r++) {
            long ih = (long)p * a->stride_h - a->pad_h + (long)r * a->dil_h;
            for (int s = 0; s < a->S; s++) {
                long off_w = (long)s * a->dil_w - a->pad_w;
                int q_lo, q_hi;
                mk_tap_range(off_w, sw, W, Q, &q_lo, &q_hi);
                float wv = wk[r * a->S + s];
                const float *xr = xp + ih * W + off_w;
                if (sw == 1) for (int q = q_lo; q < q_hi; q++) yr[q] += wv * xr[q];
                else for (int q = q_lo; q < q_hi; q++) yr[q] += wv * xr[(long)q * sw];
            }
        }
        if (!finite) pad_nonfinite(a, wk, p, yr);
    }
}

// 3x3 taps on a zero-padded plane (row length Wp): one pass per output row, 9 FMAs per
// output, no bounds checks (the common depthwise case)
MK_MULTIVERSION static void dw3x3_plane(const mk_conv2d_args *a, const float *xp, long Wp,
                                        const float *w, float bias, float *yp) {
    int Q = a->Q, sw = a->stride_w, d = a->dil_w;
    for (int p = 0; p < a->P; p++) {
        const float *r0 = xp + (long)p * a->stride_h * Wp;
        const float *r1 = r0 + (long)a->dil_h * Wp, *r2 = r1 + (long)a->dil_h * Wp;
        float *yr = yp + (long)p * Q;
        if (sw == 1 && d == 1) {
            for (int q = 0; q < Q; q++)
                yr[q] = bias + w[0] * r0[q] + w[1] * r0[q + 1] + w[2] * r0[q + 2]
                             + w[3] * r1[q] + w[4] * r1[q + 1] + w[5] * r1[q + 2]
                             + w[6] * r2[q] + w[7] * r2[q + 1] + w[8] * r2[q + 2];
        } else {
            for (int q = 0; q < Q; q++) {
                long o = (long)q * sw;
                yr[q] = bias + w[0] * r0[o] + w[1] * r0[o + d] + w[2] * r0[o + 2 * d]
                             + w[3] * r1[o] + w[4] * r1[o + d] + w[5] * r1[o + 2 * d]
                             + w[6] * r2[o] + w[7] * r2[o + d] + w[8] * r2[o + 2 * d];
            }
        }
    }
}

static void dw_range(void *vc, long b, long e) {
    dw_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    int mult = a->K / a->groups, RS = a->R * a->S;
    long HW = (long)a->H * a->W, PQ = (long)a->P * a->Q;
    // 3x3: the plane goes into a zero-padded buffer (borders written once, stay zero),
    // unless padding or strides so large that the buffer would dwarf input and output
    long bot = (long)(a->P - 1) * a->stride_h + 2L * a->dil_h + 1 - a->pad_h - a->H;
    long rgt = (long)(a->Q - 1) * a->stride_w + 2L * a->dil_w + 1 - a->pad_w - a->W;
    long Hp = (long)a->pad_h + a->H + (bot > 0 ? bot : 0);
    long Wp = (long)a->pad_w + a->W + (rgt > 0 ? rgt : 0);
    int k3 = a->R == 3 && a->S == 3 && (double)Hp * Wp <= 4.0 * (HW + 9 * PQ) + 4096;
    float *xs = NULL, *ys = NULL, wf[64];
    float *wk = RS <= 64 ? wf : NULL;
    if (k3) xs = mk_alloc((size_t)Hp * Wp * 4);
    else if (t->dtype == MK_F16) xs = mk_alloc((size_t)HW * 4);
    if (t->dtype == MK_F16) {
        ys = mk_alloc((size_t)PQ * 4);
        if (!wk) wk = mk_alloc((size_t)RS * 4);
    }
    if (((k3 || t->dtype == MK_F16) && !xs) || (t->dtype == MK_F16 && (!ys || !wk))) {
        t->failed = 1;
        goto done;
    }
    if (k3) memset(xs, 0, (size_t)Hp * Wp * 4);
    for (long i = b; i < e; i++) {
        long n = i / a->K;
        int k = (int)(i % a->K), c = k / mult;
        float bias = t->bias ? t->bias[k] : 0.0f;
        long xoff = (n * a->C + c) * HW;
        const float *wsrc = (const float *)t->w + (long)k * RS;
        if (t->dtype == MK_F16) { mk_h2f((const mk_half *)t->w + (long)k * RS, wk, RS); wsrc = wk; }
        float *yo = t->dtype == MK_F32 ? (float *)t->y + i * PQ : ys;
        if (k3) {
            for (int h = 0; h < a->H; h++) {
                float *dst = xs + ((long)h + a->pad_h) * Wp + a->pad_w;
                if (t->dtype == MK_F32) memcpy(dst, (const float *)t->x + xoff + (long)h * a->W, (size_t)a->W * 4);
                else mk_h2f((const mk_half *)t->x + xoff + (long)h * a->W, dst, a->W);
            }
            dw3x3_plane(a, xs, Wp, wsrc, bias, yo);
        } else if (t->dtype == MK_F32) {
            dw_plane(a, (const float *)t->x + xoff, wsrc, bias, yo);
        } else {
            mk_h2f((const mk_half *)t->x + xoff, xs, HW);
            dw_plane(a, xs, wsrc, bias, yo);
        }
        mk_activate(yo, PQ, a->activation);   // the plane just written, in cache
        if (t->dtype == MK_F16) mk_f2h(ys, (mk_half *)t->y + i * PQ, PQ);
    }
done:
    mk_free(xs); mk_free(ys);
    if (wk != wf) mk_free(wk);
}

// MPSKERN_CPU_CONV: FORCE_NONE (auto), FORCE_GEMM, the forced Winograd tile size (4 or 2)
// or FORCE_SESSION9 (auto with session 9's rules: no fewpix kernel, 32-channel Winograd
// blocks; for A/B); -1 after setting the error for an unknown value
enum { FORCE_NONE = 0, FORCE_GEMM = 1, FORCE_SESSION9 = 9 };
static int forced_algorithm(void) {
    const char *e = getenv("MPSKERN_CPU_CONV");
    if (!e || !*e || !strcmp(e, "auto")) return FORCE_NONE;
    if (!strcmp(e, "gemm")) return FORCE_GEMM;
    if (!strcmp(e, "winograd")) return 4;
    if (!strcmp(e, "winograd2")) return 2;
    if (!strcmp(e, "session9")) return FORCE_SESSION9;
    mk_set_error(MK_ERR_INVALID, "MPSKERN_CPU_CONV=%s: expected auto, gemm, winograd, "
                 "winograd2 or session9 (unset means auto)", e);
    return -1;
}

// Winograd tile size m (4 or 2) for this convolution, 0 for the other paths
static int winograd_choice(const mk_conv2d_args *a, int forced) {
    if (forced == FORCE_GEMM || !mk_winograd_applies(a)) return 0;
    if (forced && forced != FORCE_SESSION9) return forced;
    // Measured against im2col (docs/cpu-kernels.md): Winograd pays from 16 input channels
    // per group (the GEMMs' inner dimension), or 8 when there are at most 8x as many output
    // channels (its output transform is per output channel), when its tiles waste little
    // (multiplications saved >= 2.5x: 7x7 outputs yes, 5x5 no), the call is big enough
    // for its extra passes (>= 5 M multiply-adds by im2col) and has at least MIN_TILES
    // tiles: the filter transform (36 floats written per filter, every call) and GEMMs a few
    // tiles wide cost more than the multiplications saved (1 thread, 512->512 @7: b1, 4
    // tiles, 1.6-2.5x im2col's time; b2-b3, 8-12 tiles, even; b4, 16 tiles, 1.1x faster).
    long Cg = a->C / a->groups, Kg = a->K / a->groups;
    long tiles = (long)a->N * ((a->P + 3) / 4) * ((a->Q + 3) / 4);
    double im2col = (double)a->N * a->P * a->Q * Cg * Kg * a->groups * 9;
    double saved = (double)a->P * a->Q * a->N * 9 / (36.0 * tiles);
    int channels = Cg >= 16 || (Cg >= 8 && Kg <= 8 * Cg);
    return channels && Kg >= 8 && saved >= 2.5 && im2col >= 5e6 && tiles >= MIN_TILES ? 4 : 0;
}

// small_images' output pass, per GEMM tile while it is in cache: bias, then activation.
// The tile's rows are output channels; its first one follows from its offset in the image.
typedef struct { const float *bias; int act; const float *base; } bias_act;

static void bias_act_tile(void *ctx, float *C, int ldc, int rows, int cols) {
    const bias_act *t = ctx;
    long k0 = (C - t->base) / ldc;
    for (int r = 0; r < rows; r++) {
        float *row = C + (long)r * ldc;
        if (t->bias) {
            float v = t->bias[k0 + r];
            for (int i = 0; i < cols; i++) row[i] += v;
        }
        mk_activate(row, cols, t->act);
    }
}

// small_images' im2col of its images, rows (image, reduction row) over the pool (one
// thread's 4608 x 49 of 512->512 3x3 @7 waited for by the others): row k of image n at
// col + (n * CRS + k) * ld, the ld - PQ floats past its PQ pixels zeroed (fewpix's lanes)
typedef struct { const mk_conv2d_args *a; const float *x; float *col; long ld; } im2col_job;

static void im2col_rows(void *vc, long b, long e) {
    const im2col_job *j = vc;
    const mk_conv2d_args *a = j->a;
    long PQ = (long)a->P * a->Q, HW = (long)a->H * a->W, CRS = (long)a->C * a->R * a->S;
    for (long i = b; i < e;) {
        long n = i / CRS, k0 = i % CRS, k1 = CRS - k0 < e - i ? CRS : k0 + (e - i);
        float *col = j->col + i * j->ld;
        im2col(a, j->x + n * a->C * HW, HW, 0, 0, k0, k1, 0, a->P, 0, a->Q, col, j->ld);
        if (j->ld > PQ)
            for (long k = 0; k < k1 - k0; k++)
                memset(col + k * j->ld + PQ, 0, (size_t)(j->ld - PQ) * 4);
        i += k1 - k0;
    }
}

// Images with few output pixels (mk_cpu_conv_fewpix.c): the batch's im2col, rows padded to
// whole vectors, then one pass per block of output channels over every image. 0 when the
// im2col does not fit in memory (small_images then)
static int fewpix(const mk_conv2d_args *a, const float *x, const float *w, const float *bias,
                  float *y) {
    long CRS = (long)a->C * a->R * a->S, PQ = (long)a->P * a->Q, ld = (PQ + 15) / 16 * 16;
    float *col = mk_alloc((size_t)a->N * CRS * ld * 4);
    if (!col) return 0;
    im2col_job job = {a, x, col, ld};
    mk_parallel_for(a->N * CRS, mk_grain(ld), im2col_rows, &job);
    mk_conv_fewpix(a->N, a->K, (int)PQ, CRS, w, col, ld, CRS * ld, bias, a->activation, y);
    mk_free(col);
    return 1;
}

// Fewer images than threads, each with too few output pixels to give every thread a wide
// GEMM (late layers at batch 1): cutting pixels would leave each thread a narrow GEMM that
// packs all the weights again (512->512 3x3 @7: 14 columns a task, 2.2x slower than
// this). Instead per image one im2col (at most COL_BLOCK_FLOATS) and one GEMM split over
// output channels (mk_sgemm_par), or, where its tiles would each pack all of the deep
// im2col again (many threads), split over the reduction too (mk_cpu_conv_splitk.c).
// float32, groups == 1.
static mk_status small_images(const mk_conv2d_args *a, int pointwise, int splitk,
                              const void *x, const float *w, const float *bias, void *y) {
    long CRS = (long)a->C * a->R * a->S, PQ = (long)a->P * a->Q, HW = (long)a->H * a->W;
    float *col = pointwise ? NULL : mk_alloc((size_t)CRS * PQ * 4);
    if (!pointwise && !col) return mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory");
    for (long n = 0; n < a->N; n++) {
        const float *xn = (const float *)x + n * a->C * HW;
        float *yn = (float *)y + n * a->K * PQ;
        im2col_job job = {a, xn, col, PQ};
        if (!pointwise) mk_parallel_for(CRS, mk_grain(PQ), im2col_rows, &job);
        const float *B = pointwise ? xn : col;
        int pm = 1, pn = 1, pk = splitk ? mk_conv_splitk_parts(a->K, (int)PQ, CRS,
                                                                (int)mk_cpu_threads(), &pm, &pn) : 1;
        if (pk > 1 && mk_conv_gemm_splitk(a->K, (int)PQ, CRS, pm, pn, pk, w, B, bias,
                                          a->activation, yn) == MK_OK)
            continue;
        bias_act ba = {bias, a->activation, yn};
        mk_sgemm_par_ep(0, 0, a->K, (int)PQ, (int)CRS, 1.0f, w, (int)CRS, B,
                        (int)PQ, 0.0f, yn, (int)PQ, bias || ba.act ? bias_act_tile : NULL, &ba);
    }
    mk_free(col);
    return MK_OK;
}

static mk_status check_args(const mk_conv2d_args *a) {
    MK_CHECK_NONNEG(a->N); MK_CHECK_NONNEG(a->C); MK_CHECK_NONNEG(a->H); MK_CHECK_NONNEG(a->W);
    MK_CHECK_NONNEG(a->K); MK_CHECK_POS(a->R); MK_CHECK_POS(a->S);
    MK_CHECK_NONNEG(a->P); MK_CHECK_NONNEG(a->Q);
    MK_CHECK_POS(a->stride_h); MK_CHECK_POS(a->stride_w);
    MK_CHECK_NONNEG(a->pad_h); MK_CHECK_NONNEG(a->pad_w);
    MK_CHECK_POS(a->dil_h); MK_CHECK_POS(a->dil_w); MK_CHECK_POS(a->groups);
    if (a->C % a->groups || a->K % a->groups)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_conv2d: groups=%d must divide C=%d and K=%d",
                            a->groups, a->C, a->K);
    if (a->activation < MK_ACT_NONE || a->activation > MK_ACT_SILU)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_conv2d: activation %d is not MK_ACT_*", a->activation);
    return MK_OK;
}

// The im2col path's blocks (t->imgs or rows/qn/nq, kc, blocks) and scratch sizes: about
// COL_BLOCK_FLOATS of im2col but at least MIN_COLS columns (a narrow GEMM spends its time
// packing the weights), two tasks per thread where that is possible without narrowing the
// GEMM further, and every scratch buffer within SCRATCH_FLOATS (see there)
static void plan_blocks(gemm_conv_ctx *t, long threads) {
    const mk_conv2d_args *a = t->a;
    long PQ = (long)a->P * a->Q, CRS = (long)(a->C / a->groups) * a->R * a->S;
    long Kg = a->K / a->groups, want = 2 * threads;
    long cols = COL_BLOCK_FLOATS / CRS;
    if (cols < MIN_COLS) cols = MIN_COLS;
    if (cols < a->Q && CRS * a->Q <= SCRATCH_FLOATS) cols = a->Q;     // whole rows
    long out_cols = SCRATCH_FLOATS / Kg;      // the output block, where one is used
    if (out_cols < MIN_COLS) out_cols = MIN_COLS;
    if (t->dtype == MK_F16 && cols > out_cols) cols = out_cols;
    t->qn = a->Q; t->nq = 1;
    if (cols >= 2 * PQ && out_cols >= 2 * PQ && a->N > 1) {   // whole images per block
        long imgs = (cols < out_cols ? cols : out_cols) / PQ;
        long max_imgs = ((long)a->N * a->groups + threads - 1) / threads;   // a task per thread
        if (max_imgs < 1) max_imgs = 1;
        t->imgs = (int)(imgs < max_imgs ? imgs : max_imgs);
        t->blocks = (a->N + t->imgs - 1) / t->imgs;
    }
    if (t->imgs <= 1) {                                  // rows of one image per block
        t->imgs = 0;
        long rows = cols / a->Q;
        long per_img = (long)a->N * a->groups;
        if (per_img < want) {
            long split = (want + per_img - 1) / per_img;
            long r2 = (a->P + split - 1) / split;
            long r_min = (MIN_COLS + a->Q - 1) / a->Q;   // not below MIN_COLS columns: 256->512
            if (r2 < r_min) r2 = r_min;                  // 1x1/2 @56 b8 on 16 threads cut 7 rows
            if (r2 < rows) rows = r2;                    // (196 columns), 0.7x the time of 10-28
        }
        if (rows < 1) {              // a row wider than a block: blocks of columns of a row
            rows = 1;
            t->nq = (int)((a->Q + cols - 1) / cols);
            t->qn = (a->Q + t->nq - 1) / t->nq;
        }
        if (rows > a->P) rows = a->P;
        t->rows = (int)rows;
        t->blocks = (long)a->N * ((a->P + rows - 1) / rows) * t->nq;
    }
    long ncol = t->imgs ? t->imgs * PQ : (long)t->rows * t->qn;
    t->kc = SCRATCH_FLOATS / ncol > CRS ? CRS : SCRATCH_FLOATS / ncol;
    if (t->kc < 1) t->kc = 1;
    if (!(t->pointwise && t->dtype == MK_F32 && !t->imgs)) t->col_floats = t->kc * ncol;
    if (t->dtype == MK_F16 || t->imgs) t->out_floats = Kg * ncol;
    if (t->dtype == MK_F16 || t->phased) {
        int rows_in = t->imgs ? a->P : t->rows;
        long srows = (rows_in - 1) * (long)a->stride_h + (long)(a->R - 1) * a->dil_h + 1;
        if (srows > a->H) srows = a->H;
        t->slab_floats = (long)(a->C / a->groups) * srows * a->W + (t->phased ? a->W : 0);
    }
}

// im2col + GEMM by blocks: the general path
static mk_status blocked(const mk_conv2d_args *a, int dtype, int pointwise, const void *x,
                         const void *w, const float *bias, void *y, long threads) {
    gemm_conv_ctx t = {a, dtype, pointwise, use_phases(a), x, w, bias, y, 0, 0, 0, 0, 0, 0, 0,
                       0, 0, 0};
    plan_blocks(&t, threads);
    long CRS = (long)(a->C / a->groups) * a->R * a->S, Kg = a->K / a->groups;
    float *wf = NULL;
    if (dtype == MK_F16) {
        wf = mk_alloc((size_t)a->K * CRS * 4);
        if (!wf) return mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory");
        mk_h2f(w, wf, (long)a->K * CRS);
        t.w = wf;
    }
    long ncol = t.imgs ? t.imgs * (long)a->P * a->Q : (long)t.rows * t.qn;
    mk_parallel_for((long)a->groups * t.blocks, mk_grain(Kg * CRS * ncol), conv_range, &t);
    mk_free(wf);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory for im2col")
                    : MK_OK;
}

// no input channels: the output is act(bias)
static mk_status bias_only(const mk_conv2d_args *a, int dtype, const float *bias, void *y) {
    long PQ = (long)a->P * a->Q;
    for (long i = 0; i < (long)a->N * a->K; i++) {
        float v = bias ? bias[i % a->K] : 0.0f;
        mk_activate(&v, 1, a->activation);
        for (long j = 0; j < PQ; j++) {
            if (dtype == MK_F32) ((float *)y)[i * PQ + j] = v;
            else ((mk_half *)y)[i * PQ + j] = (mk_half)v;
        }
    }
    return MK_OK;
}

// tasks of the blocked path (plan_blocks) on `threads` threads
static long blocked_tasks(const mk_conv2d_args *a, int dtype, long threads) {
    gemm_conv_ctx t = {.a = a, .dtype = dtype, .phased = use_phases(a)};
    plan_blocks(&t, threads);
    return a->groups * t.blocks;
}

// The paths, in the order they are tried (mk_cpu_conv2d)
enum { PATH_DEPTHWISE, PATH_BIAS_ONLY, PATH_WINOGRAD, PATH_DIRECT, PATH_POINTWISE,
       PATH_FEWPIX, PATH_SMALL_IMAGES, PATH_BLOCKED };
// fewpix: the small-images path may run as mk_cpu_conv_fewpix.c's kernel (few pixels)
static int choose_path(const mk_conv2d_args *a, int dtype, int wino, int direct, int pw,
                       int fewpix, long threads) {
    long Cg = a->C / a->groups, CRS = Cg * a->R * a->S, PQ = (long)a->P * a->Q;
    if (Cg == 1 && a->groups > 1) return PATH_DEPTHWISE;
    if (CRS == 0) return PATH_BIAS_ONLY;
    if (wino) return PATH_WINOGRAD;
    if (direct) return PATH_DIRECT;
    if (pw) return PATH_POINTWISE;
    if (dtype == MK_F32 && a->groups == 1 && threads > 1 && a->N < threads &&
        PQ < MIN_COLS * threads) {
        if (fewpix && a->N * CRS * ((PQ + 15) / 16 * 16) <= 2 * SCRATCH_FLOATS)
            return PATH_FEWPIX;          // (its im2col of the batch: at most 16 MiB)
        if (CRS * PQ <= COL_BLOCK_FLOATS) return PATH_SMALL_IMAGES;
        // a deeper im2col where the blocks would leave the threads idle: one task, or fewer
        // than half as many as threads (strided 3x3 at batch 1: 256->256 /2 @28 was ONE
        // task, 2.9 ms of ResNet-50 b1's 36 at 16 threads; 128->128 /2 @56 four)
        long tasks = blocked_tasks(a, dtype, threads);
        if (CRS * PQ <= SCRATCH_FLOATS && (tasks == 1 || 2 * tasks < threads))
            return PATH_SMALL_IMAGES;
    }
    return PATH_BLOCKED;
}

mk_status mk_cpu_conv2d(const mk_conv2d_args *a, int dtype, const void *x, const void *w,
                        const float *bias, void *y) {
    MK_CHECK_ENTRY(a, dtype, check_args);
    long PQ = (long)a->P * a->Q;
    if (a->N == 0 || a->K == 0 || PQ == 0) return MK_OK;
    MK_CHECK_PTR(y);
    if (a->C > 0) { MK_CHECK_PTR(x); MK_CHECK_PTR(w); }
    if (a->has_bias) MK_CHECK_PTR(bias); else bias = NULL;
    int forced = forced_algorithm();
    if (forced < 0) return MK_ERR_INVALID;
    int wino = winograd_choice(a, forced);
    int direct = forced != FORCE_GEMM && mk_conv_direct_applies(a);
    int pw = forced != FORCE_GEMM && mk_conv_pointwise_applies(a, dtype);
    int pointwise = a->R == 1 && a->S == 1 && a->stride_h == 1 && a->stride_w == 1 &&
                    a->pad_h == 0 && a->pad_w == 0 && a->P == a->H && a->Q == a->W;
    // the few-pixels kernel: float32, groups 1, an image's pixels in one tile's registers
    int fewpx = forced != FORCE_GEMM && forced != FORCE_SESSION9 && dtype == MK_F32 &&
                a->groups == 1 && PQ <= mk_conv_fewpix_max_pixels();
    long threads = mk_cpu_threads();
    int path = choose_path(a, dtype, wino, direct, pw, fewpx, threads);
    if (path == PATH_WINOGRAD) {
        // Winograd holds transformed operands (up to 4x the weights); when they do not fit
        // in memory, the other paths still do. Likewise when it declines non-finite or
        // huge values (its tiles would spread or overflow them)
        mk_status ws = mk_cpu_conv2d_winograd(a, wino, forced == FORCE_SESSION9 ? 32 : 0,
                                              dtype, x, w, bias, y);
        if (ws != MK_ERR_NOMEM && ws != MK_ERR_UNSUPPORTED) return ws;
        path = choose_path(a, dtype, 0, direct, pw, fewpx, threads);
    }
    if (path == PATH_DIRECT) {       // its padded input copy did not fit: im2col's blocks may
        mk_status ds = mk_cpu_conv2d_direct(a, dtype, x, w, bias, y);
        if (ds != MK_ERR_NOMEM) return ds;
        path = choose_path(a, dtype, 0, 0, pw, fewpx, threads);
    }
    if (path == PATH_FEWPIX && fewpix(a, x, w, bias, y)) return MK_OK;
    if (path == PATH_FEWPIX)         // its im2col did not fit: the small-images path's may
        path = choose_path(a, dtype, 0, 0, pw, 0, threads);
    switch (path) {
    case PATH_DEPTHWISE: {
        dw_ctx t = {a, dtype, x, w, bias, y, 0};
        mk_parallel_for((long)a->N * a->K, mk_grain(PQ * a->R * a->S), dw_range, &t);
        return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory") : MK_OK;
    }
    case PATH_BIAS_ONLY:
        return bias_only(a, dtype, bias, y);
    case PATH_POINTWISE: {      // a strided one's gathered copy did not fit: im2col's blocks
        mk_status ps = mk_cpu_conv2d_pointwise(a, x, w, bias, y);
        if (ps != MK_ERR_NOMEM) return ps;
        return blocked(a, dtype, pointwise, x, w, bias, y, threads);
    }
    case PATH_SMALL_IMAGES:
        return small_images(a, pointwise, forced != FORCE_GEMM, x, w, bias, y);
    default:
        return blocked(a, dtype, pointwise, x, w, bias, y, threads);
    }
}
