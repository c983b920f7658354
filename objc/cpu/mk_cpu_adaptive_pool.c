// mk_cpu_adaptive_pool.c: adaptive_avg_pool2d (MK_POOL_ADAPTIVE_AVG) over NCHW planes, one
// plane per task. torch's windows: output row p averages input rows [p*H/P, ceil((p+1)*H/P))
// (likewise columns), so windows overlap when H is not a multiple of P and P > H repeats
// rows. Per band of rows the column sums are formed once (float32), then each output sums
// its columns: H*W + P*Q*(W/Q + 1) additions per plane instead of one sum per window.
// A float32 result that comes out non-finite is summed again in double from the input, so
// it is non-finite only where the exact average is (values near FLT_MAX, as mk_cpu_pool2d).
#include "mk_cpu.h"
#include <math.h>

// [lo, hi) of output i of n over an extent of len (64-bit: i*len overflows int)
static inline void band(long i, long n, long len, long *lo, long *hi) {
    *lo = i * len / n;
    *hi = ((i + 1) * len + n - 1) / n;
}

typedef struct {
    const mk_pool2d_args *a;
    int dtype;
    const void *x;
    void *y;
    int failed;
} apool_ctx;

MK_MULTIVERSION static void apool_plane(const mk_pool2d_args *a, const float *xp, float *yp,
                                        float *colsum) {
    long H = a->H, W = a->W;
    for (long p = 0; p < a->P; p++) {
        long h0, h1;
        band(p, a->P, H, &h0, &h1);
        for (long w = 0; w < W; w++) colsum[w] = 0.0f;
        for (long h = h0; h < h1; h++) {
            const float *xr = xp + h * W;
            for (long w = 0; w < W; w++) colsum[w] += xr[w];
        }
        for (long q = 0; q < a->Q; q++) {
            long w0, w1;
            band(q, a->Q, W, &w0, &w1);
            float s = 0.0f;
            for (long w = w0; w < w1; w++) s += colsum[w];
            float n = (float)((h1 - h0) * (w1 - w0));
            float v = s / n;
            if (!isfinite(v)) {          // overflow of a float32 sum, or a real Inf/NaN
                double d = 0.0;
                for (long h = h0; h < h1; h++)
                    for (long w = w0; w < w1; w++) d += xp[h * W + w];
                v = (float)(d / (double)((h1 - h0) * (w1 - w0)));
            }
            yp[p * a->Q + q] = v;
        }
    }
}

// one range's planes, with its thread's column sums
typedef struct {
    const mk_pool2d_args *a;
    float *colsum;
} apool_job;

static void apool_plane_job(void *vc, long i, const float *xp, float *yp) {
    const apool_job *j = vc;
    apool_plane(j->a, xp, yp, j->colsum);
}

static void apool_range(void *vc, long b, long e) {
    apool_ctx *t = vc;
    apool_job j = {t->a, mk_alloc((size_t)t->a->W * 4)};
    if (!j.colsum || !mk_pool_planes(t->a, t->dtype, t->x, t->y, b, e, apool_plane_job, &j))
        t->failed = 1;
    mk_free(j.colsum);
}

mk_status mk_cpu_adaptive_avg_pool2d(const mk_pool2d_args *a, int dtype, const void *x, void *y) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    MK_CHECK_NONNEG(a->N); MK_CHECK_NONNEG(a->C); MK_CHECK_NONNEG(a->P); MK_CHECK_NONNEG(a->Q);
    long planes = (long)a->N * a->C;
    if (planes == 0 || a->P == 0 || a->Q == 0) return MK_OK;
    MK_CHECK_POS(a->H); MK_CHECK_POS(a->W);        // (an empty plane has no average)
    MK_CHECK_PTR(x); MK_CHECK_PTR(y);
    apool_ctx t = {a, dtype, x, y, 0};
    long rows = (long)a->H + a->P, cols = (long)a->W + a->Q;   // band overlaps add at most P, Q
    double per_plane = (double)rows * cols + (double)a->P * cols;
    mk_parallel_for(planes, mk_grain(per_plane < 1e15 ? (long)per_plane : (long)1e15),
                    apool_range, &t);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_pool2d: out of memory") : MK_OK;
}
