// mk_cpu_pool2d.c: max / avg pooling over NCHW planes, one plane per task.
// For each output row the taps (r, s) are visited in turn and the output columns whose
// input lies inside the plane are updated as one straight loop (vectorised by the compiler).
// Few output columns (global pooling, 7x7 -> 1x1) would make that loop a handful of
// iterations per tap: there each output reduces its window directly, span by span.
// Divisors follow torch (see mk_pool2d_args in metal/mk_args.h).
#include "mk_cpu.h"
#include <math.h>
#include <string.h>

// number of taps start + t*d (0 <= t < k) inside [lo, hi)
static int count_taps(int start, int k, int d, int lo, int hi) {
    int n = 0;
    for (int t = 0; t < k; t++) {
        int v = start + t * d;
        n += v >= lo && v < hi;
    }
    return n;
}

// valid output column range [*lo, *hi) for tap offset off: 0 <= q*stride + off < W
static void col_range(int off, int stride, int W, int Q, int *lo, int *hi) {
    int l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int h = W - off <= 0 ? 0 : (W - off - 1) / stride + 1;
    if (h > Q) h = Q;
    if (l > h) l = h;
    *lo = l; *hi = h;
}

typedef struct {
    const mk_pool2d_args *a;
    int dtype;
    const void *x;
    void *y;
    const float *inv_div_w;   // avg: per-q factor; combined with the per-p factor
    const float *div_h;
    int failed;
} pool_ctx;

// sum / max of n contiguous floats in 8 independent lanes (GCC/clang vector extension:
// the auto-vectoriser left the lane array scalar), fixed order.
// max: NaN wins, as in torch (once a lane is NaN it stays NaN).
typedef float mk_v8f __attribute__((vector_size(32)));
typedef int32_t mk_v8i __attribute__((vector_size(32)));

// a macro, not a function: a vector-returning function warns about the non-AVX ABI
#define LOAD8(v, x) memcpy(&(v), (x), sizeof(v))

static inline float span_sum(const float *x, long n) {
    mk_v8f acc = {0};
    long i = 0;
    for (; i + 8 <= n; i += 8) { mk_v8f v; LOAD8(v, x + i); acc += v; }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += x[i];
    return s;
}

#define MAXNAN(m, v) (((v) > (m) || (v) != (v)) ? (v) : (m))
static inline float span_max(const float *x, long n, float m) {
    mk_v8f acc = {m, m, m, m, m, m, m, m};
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        mk_v8f v;
        LOAD8(v, x + i);
        mk_v8i take = (v > acc) | (v != v);
        acc = (mk_v8f)(((mk_v8i)v & take) | ((mk_v8i)acc & ~take));
    }
    for (int k = 0; k < 8; k++) m = MAXNAN(m, acc[k]);
    for (; i < n; i++) m = MAXNAN(m, x[i]);
    return m;
}

// per output column q the taps' column range: lo[s] <= q < hi[s] (no divisions in the loops)
static void tap_ranges(const mk_pool2d_args *a, int *lo, int *hi) {
    for (int s = 0; s < a->kw; s++)
        col_range(s * a->dil_w - a->pad_w, a->stride_w, a->W, a->Q, lo + s, hi + s);
}

// row sweep: for each tap, one straight loop over the output columns (wide outputs)
MK_MULTIVERSION static void pool_plane_rows(const pool_ctx *t, const float *xp, float *yp,
                                            const int *lo, const int *hi) {
    const mk_pool2d_args *a = t->a;
    int Q = a->Q, W = a->W, sw = a->stride_w;
    int is_max = a->mode == MK_POOL_MAX;
    for (int p = 0; p < a->P; p++) {
        float *yr = yp + (long)p * Q;
        float init = is_max ? -INFINITY : 0.0f;
        for (int q = 0; q < Q; q++) yr[q] = init;
        for (int r = 0; r < a->kh; r++) {
            int ih = p * a->stride_h - a->pad_h + r * a->dil_h;
            if (ih < 0 || ih >= a->H) continue;
            for (int s = 0; s < a->kw; s++) {
                const float *xr = xp + (long)ih * W + (s * a->dil_w - a->pad_w);
                if (is_max) {
                    for (int q = lo[s]; q < hi[s]; q++) yr[q] = MAXNAN(yr[q], xr[(long)q * sw]);
                } else {
                    for (int q = lo[s]; q < hi[s]; q++) yr[q] += xr[(long)q * sw];
                }
            }
        }
        if (!is_max) {
            float fh = t->div_h[p];
            for (int q = 0; q < Q; q++) yr[q] *= fh * t->inv_div_w[q];
        }
    }
}

// window by window: each output reduces its window in registers (narrow outputs)
MK_MULTIVERSION static void pool_plane_windows(const pool_ctx *t, const float *xp, float *yp) {
    const mk_pool2d_args *a = t->a;
    int Q = a->Q, W = a->W;
    int is_max = a->mode == MK_POOL_MAX;
    for (int p = 0; p < a->P; p++) {
        int h0 = p * a->stride_h - a->pad_h;
        for (int q = 0; q < Q; q++) {
            int w0 = q * a->stride_w - a->pad_w;
            float acc = is_max ? -INFINITY : 0.0f;
            if (a->dil_w == 1) {
                int c0 = w0 < 0 ? 0 : w0, c1 = w0 + a->kw > W ? W : w0 + a->kw;
                if (c1 > c0 && a->dil_h == 1 && c0 == 0 && c1 == W) {
                    // the window spans whole rows: its rows are one contiguous span
                    int r0 = h0 < 0 ? 0 : h0, r1 = h0 + a->kh > a->H ? a->H : h0 + a->kh;
                    if (r1 > r0) {
                        const float *xr = xp + (long)r0 * W;
                        long n = (long)(r1 - r0) * W;
                        acc = is_max ? span_max(xr, n, acc) : span_sum(xr, n);
                    }
                } else if (c1 > c0) {
                    for (int r = 0; r < a->kh; r++) {
                        int ih = h0 + r * a->dil_h;
                        if (ih < 0 || ih >= a->H) continue;
                        const float *xr = xp + (long)ih * W + c0;
                        acc = is_max ? span_max(xr, c1 - c0, acc) : acc + span_sum(xr, c1 - c0);
                    }
                }
            } else {
                for (int r = 0; r < a->kh; r++) {
                    int ih = h0 + r * a->dil_h;
                    if (ih < 0 || ih >= a->H) continue;
                    for (int s = 0; s < a->kw; s++) {
                        int iw = w0 + s * a->dil_w;
                        if (iw < 0 || iw >= W) continue;
                        float v = xp[(long)ih * W + iw];
                        acc = is_max ? MAXNAN(acc, v) : acc + v;
                    }
                }
            }
            yp[(long)p * Q + q] = is_max ? acc : acc * (t->div_h[p] * t->inv_div_w[q]);
        }
    }
}

// Few output columns: the row sweep's loops would be a handful of iterations per tap
#define WINDOW_MAX_Q 8

static void pool_plane(const pool_ctx *t, const float *xp, float *yp, const int *lo, const int *hi) {
    if (t->a->Q <= WINDOW_MAX_Q) pool_plane_windows(t, xp, yp);
    else pool_plane_rows(t, xp, yp, lo, hi);
}

static void pool_range(void *vc, long b, long e) {
    pool_ctx *t = vc;
    const mk_pool2d_args *a = t->a;
    long HW = (long)a->H * a->W, PQ = (long)a->P * a->Q;
    float *xs = NULL, *ys = NULL;
    int *lo = mk_alloc((size_t)a->kw * 2 * sizeof(int)), *hi = lo ? lo + a->kw : NULL;
    if (!lo) { t->failed = 1; return; }
    tap_ranges(a, lo, hi);
    if (t->dtype == MK_F16) {
        xs = mk_alloc((size_t)HW * 4);
        ys = mk_alloc((size_t)PQ * 4);
        if (!xs || !ys) { t->failed = 1; goto done; }
    }
    for (long i = b; i < e; i++) {
        if (t->dtype == MK_F32) {
            pool_plane(t, (const float *)t->x + i * HW, (float *)t->y + i * PQ, lo, hi);
        } else {
            mk_h2f((const mk_half *)t->x + i * HW, xs, HW);
            pool_plane(t, xs, ys, lo, hi);
            mk_f2h(ys, (mk_half *)t->y + i * PQ, PQ);
        }
    }
done:
    mk_free(xs); mk_free(ys); mk_free(lo);
}

mk_status mk_cpu_pool2d(const mk_pool2d_args *a, int dtype, const void *x, void *y) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    MK_CHECK_NONNEG(a->N); MK_CHECK_NONNEG(a->C); MK_CHECK_NONNEG(a->H); MK_CHECK_NONNEG(a->W);
    MK_CHECK_NONNEG(a->P); MK_CHECK_NONNEG(a->Q);
    MK_CHECK_POS(a->kh); MK_CHECK_POS(a->kw); MK_CHECK_POS(a->stride_h); MK_CHECK_POS(a->stride_w);
    MK_CHECK_NONNEG(a->pad_h); MK_CHECK_NONNEG(a->pad_w);
    MK_CHECK_POS(a->dil_h); MK_CHECK_POS(a->dil_w);
    if (a->mode != MK_POOL_MAX && a->mode != MK_POOL_AVG)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_pool2d: mode %d is not MK_POOL_MAX (0) or "
                            "MK_POOL_AVG (1)", a->mode);
    long planes = (long)a->N * a->C;
    if (planes == 0 || a->P == 0 || a->Q == 0) return MK_OK;
    MK_CHECK_PTR(x); MK_CHECK_PTR(y);

    float *div_h = NULL, *inv_w = NULL;
    if (a->mode == MK_POOL_AVG) {
        // divisor = taps_h(p) * taps_w(q), split into a per-row and a per-column factor
        div_h = mk_alloc((size_t)a->P * 4);
        inv_w = mk_alloc((size_t)a->Q * 4);
        if (!div_h || !inv_w) {
            mk_free(div_h); mk_free(inv_w);
            return mk_set_error(MK_ERR_NOMEM, "mk_cpu_pool2d: out of memory");
        }
        for (int p = 0; p < a->P; p++) {
            int s0 = p * a->stride_h - a->pad_h;
            int n = a->divisor > 0 ? 1 : a->count_include_pad
                ? count_taps(s0, a->kh, a->dil_h, s0, a->H + a->pad_h_end)
                : count_taps(s0, a->kh, a->dil_h, 0, a->H);
            div_h[p] = n > 0 ? 1.0f / (float)n : NAN;
        }
        for (int q = 0; q < a->Q; q++) {
            int s0 = q * a->stride_w - a->pad_w;
            int n = a->divisor > 0 ? a->divisor : a->count_include_pad
                ? count_taps(s0, a->kw, a->dil_w, s0, a->W + a->pad_w_end)
                : count_taps(s0, a->kw, a->dil_w, 0, a->W);
            inv_w[q] = n > 0 ? 1.0f / (float)n : NAN;
        }
    }
    pool_ctx t = {a, dtype, x, y, inv_w, div_h, 0};
    long per_plane = (long)a->H * a->W + (long)a->P * a->Q * a->kh * a->kw;
    mk_parallel_for(planes, mk_grain(per_plane), pool_range, &t);
    mk_free(div_h); mk_free(inv_w);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_pool2d: out of memory") : MK_OK;
}
