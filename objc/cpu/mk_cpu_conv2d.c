// mk_cpu_conv2d.c: NCHW conv2d, weight (K, C/groups, R, S), per-channel float32 bias.
//   depthwise (C/groups == 1, groups > 1): direct, one output plane per task
//   1x1, stride 1, no padding:           GEMM on the input as it is
//   otherwise:                           im2col of a block of output rows + GEMM
// float16: the image and the weights are converted to float32 (float32 accumulation).
#include "mk_cpu.h"
#include <string.h>

#define COL_BLOCK_BYTES (4u << 20)   // im2col block: large enough for an efficient GEMM

typedef struct {
    const mk_conv2d_args *a;
    const float *x;      // one image, float32 (C, H, W)
    float *col;          // (Cg*R*S, rows*Q) for output rows [p0, p0+rows)
    int c0, p0, rows;
} im2col_ctx;

// col rows are (c, r, s) of group g's channels; columns are output pixels of rows p0..
static void im2col_range(void *vc, long b, long e) {
    const im2col_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    int RS = a->R * a->S, Q = a->Q, W = a->W, H = a->H;
    long ncol = (long)t->rows * Q;
    for (long row = b; row < e; row++) {
        int c = (int)(row / RS), r = (int)(row % RS) / a->S, s = (int)(row % a->S);
        const float *xc = t->x + (long)(t->c0 + c) * H * W;
        float *dst = t->col + row * ncol;
        int off_w = s * a->dil_w - a->pad_w;
        // output columns q whose input column q*stride_w + off_w lies in [0, W)
        int q_lo = off_w >= 0 ? 0 : (-off_w + a->stride_w - 1) / a->stride_w;
        int q_hi = W - off_w <= 0 ? 0 : (W - off_w - 1) / a->stride_w + 1;
        if (q_hi > Q) q_hi = Q;
        if (q_lo > q_hi) q_lo = q_hi;
        for (int p = t->p0; p < t->p0 + t->rows; p++, dst += Q) {
            int ih = p * a->stride_h - a->pad_h + r * a->dil_h;
            if (ih < 0 || ih >= H) { memset(dst, 0, (size_t)Q * 4); continue; }
            const float *xr = xc + (long)ih * W + off_w;
            for (int q = 0; q < q_lo; q++) dst[q] = 0.0f;
            if (a->stride_w == 1) memcpy(dst + q_lo, xr + q_lo, (size_t)(q_hi - q_lo) * 4);
            else for (int q = q_lo; q < q_hi; q++) dst[q] = xr[(long)q * a->stride_w];
            for (int q = q_hi; q < Q; q++) dst[q] = 0.0f;
        }
    }
}

typedef struct {
    const mk_conv2d_args *a;
    const float *bias;
    float *y;            // one image (K, P*Q)
} bias_ctx;

static void bias_range(void *vc, long b, long e) {
    const bias_ctx *t = vc;
    long PQ = (long)t->a->P * t->a->Q;
    for (long k = b; k < e; k++) {
        float v = t->bias[k], *row = t->y + k * PQ;
        for (long i = 0; i < PQ; i++) row[i] += v;
    }
}

// one image through GEMM (float32 in and out)
static mk_status conv_image_gemm(const mk_conv2d_args *a, const float *x, const float *w,
                                 const float *bias, float *y, float *col, int col_rows) {
    int G = a->groups, Cg = a->C / G, Kg = a->K / G;
    int CRS = Cg * a->R * a->S;
    long PQ = (long)a->P * a->Q, HW = (long)a->H * a->W;
    int pointwise = a->R == 1 && a->S == 1 && a->stride_h == 1 && a->stride_w == 1 &&
                    a->pad_h == 0 && a->pad_w == 0 && a->P == a->H && a->Q == a->W;
    for (int g = 0; g < G; g++) {
        const float *wg = w + (long)g * Kg * CRS;
        float *yg = y + (long)g * Kg * PQ;
        if (CRS == 0) { memset(yg, 0, (size_t)Kg * PQ * 4); continue; }
        if (pointwise) {
            mk_sgemm(0, 0, Kg, (int)PQ, CRS, 1.0f, wg, CRS, x + (long)g * Cg * HW, (int)HW,
                     0.0f, yg, (int)PQ);
            continue;
        }
        for (int p0 = 0; p0 < a->P; p0 += col_rows) {
            int rows = a->P - p0 < col_rows ? a->P - p0 : col_rows;
            im2col_ctx t = {a, x, col, g * Cg, p0, rows};
            mk_parallel_for(CRS, 4, im2col_range, &t);
            mk_sgemm(0, 0, Kg, rows * a->Q, CRS, 1.0f, wg, CRS, col, rows * a->Q,
                     0.0f, yg + (long)p0 * a->Q, (int)PQ);
        }
    }
    if (bias) {
        bias_ctx t = {a, bias, y};
        mk_parallel_for(a->K, 1, bias_range, &t);
    }
    return MK_OK;
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

static void dw_plane(const mk_conv2d_args *a, const float *xp, const float *wk, float bias,
                     float *yp) {
    int Q = a->Q, W = a->W, sw = a->stride_w;
    for (int p = 0; p < a->P; p++) {
        float *yr = yp + (long)p * Q;
        for (int q = 0; q < Q; q++) yr[q] = bias;
        for (int r = 0; r < a->R; r++) {
            int ih = p * a->stride_h - a->pad_h + r * a->dil_h;
            if (ih < 0 || ih >= a->H) continue;
            for (int s = 0; s < a->S; s++) {
                int off_w = s * a->dil_w - a->pad_w;
                int q_lo = off_w >= 0 ? 0 : (-off_w + sw - 1) / sw;
                int q_hi = W - off_w <= 0 ? 0 : (W - off_w - 1) / sw + 1;
                if (q_hi > Q) q_hi = Q;
                float wv = wk[r * a->S + s];
                const float *xr = xp + (long)ih * W + off_w;
                if (sw == 1) for (int q = q_lo; q < q_hi; q++) yr[q] += wv * xr[q];
                else for (int q = q_lo; q < q_hi; q++) yr[q] += wv * xr[(long)q * sw];
            }
        }
    }
}

static void dw_range(void *vc, long b, long e) {
    dw_ctx *t = vc;
    const mk_conv2d_args *a = t->a;
    int mult = a->K / a->groups, RS = a->R * a->S;
    long HW = (long)a->H * a->W, PQ = (long)a->P * a->Q;
    float *xs = NULL, *ys = NULL, wf[64];
    float *wk = RS <= 64 ? wf : NULL;
    if (t->dtype == MK_F16) {
        xs = mk_alloc((size_t)HW * 4);
        ys = mk_alloc((size_t)PQ * 4);
        if (!wk) wk = mk_alloc((size_t)RS * 4);
        if (!xs || !ys || !wk) { t->failed = 1; goto done; }
    }
    for (long i = b; i < e; i++) {
        long n = i / a->K;
        int k = (int)(i % a->K), c = k / mult;
        float bias = t->bias ? t->bias[k] : 0.0f;
        if (t->dtype == MK_F32) {
            dw_plane(a, (const float *)t->x + (n * a->C + c) * HW,
                     (const float *)t->w + (long)k * RS, bias, (float *)t->y + i * PQ);
        } else {
            mk_h2f((const mk_half *)t->x + (n * a->C + c) * HW, xs, HW);
            mk_h2f((const mk_half *)t->w + (long)k * RS, wk, RS);
            dw_plane(a, xs, wk, bias, ys);
            mk_f2h(ys, (mk_half *)t->y + i * PQ, PQ);
        }
    }
done:
    mk_free(xs); mk_free(ys);
    if (wk != wf) mk_free(wk);
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
    return MK_OK;
}

mk_status mk_cpu_conv2d(const mk_conv2d_args *a, int dtype, const void *x, const void *w,
                        const float *bias, void *y) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    mk_status st = check_args(a);
    if (st) return st;
    long PQ = (long)a->P * a->Q, HW = (long)a->H * a->W;
    if (a->N == 0 || a->K == 0 || PQ == 0) return MK_OK;
    MK_CHECK_PTR(y);
    if (a->C > 0) { MK_CHECK_PTR(x); MK_CHECK_PTR(w); }
    if (a->has_bias) MK_CHECK_PTR(bias); else bias = NULL;
    int Cg = a->C / a->groups;

    if (Cg == 1 && a->groups > 1) {
        dw_ctx t = {a, dtype, x, w, bias, y, 0};
        mk_parallel_for((long)a->N * a->K, 1, dw_range, &t);
        return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory") : MK_OK;
    }

    long CRS = (long)Cg * a->R * a->S;
    int col_rows = CRS * a->Q > 0 ? (int)(COL_BLOCK_BYTES / 4 / (CRS * a->Q)) : a->P;
    if (col_rows < 1) col_rows = 1;
    if (col_rows > a->P) col_rows = a->P;
    long wsize = (long)a->K * CRS;
    float *col = mk_alloc((size_t)CRS * col_rows * a->Q * 4);
    float *wf = NULL, *xf = NULL, *yf = NULL;
    if (dtype == MK_F16) {
        wf = mk_alloc((size_t)wsize * 4);
        xf = mk_alloc((size_t)a->C * HW * 4);
        yf = mk_alloc((size_t)a->K * PQ * 4);
    }
    if (!col || (dtype == MK_F16 && (!wf || !xf || !yf))) {
        st = mk_set_error(MK_ERR_NOMEM, "mk_cpu_conv2d: out of memory for im2col/staging");
        goto done;
    }
    if (dtype == MK_F16) mk_h2f_par(w, wf, wsize);
    for (int n = 0; n < a->N; n++) {
        if (dtype == MK_F32) {
            conv_image_gemm(a, (const float *)x + (long)n * a->C * HW, w, bias,
                            (float *)y + (long)n * a->K * PQ, col, col_rows);
        } else {
            mk_h2f_par((const mk_half *)x + (long)n * a->C * HW, xf, (long)a->C * HW);
            conv_image_gemm(a, xf, wf, bias, yf, col, col_rows);
            mk_f2h_par(yf, (mk_half *)y + (long)n * a->K * PQ, (long)a->K * PQ);
        }
    }
done:
    mk_free(col); mk_free(wf); mk_free(xf); mk_free(yf);
    return st;
}
