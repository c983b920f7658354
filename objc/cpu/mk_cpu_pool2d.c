// mk_cpu_pool2d.c: max / avg pooling over NCHW planes, one plane per task.
// For each output row the taps (r, s) are visited in turn and the output columns whose
// input lies inside the plane are updated as one straight loop (vectorised by the compiler).
// Few output columns (global pooling, 7x7 -> 1x1) would make that loop a handful of
// iterations per tap: there each output reduces its window directly, span by span.
// Divisors follow torch (see mk_pool2d_args in metal/mk_args.h).
// avg: float32 window sums; a sum that comes out non-finite (values near FLT_MAX whose
// average is representable) is summed again in double (window_sum_f64), so the result is
// non-finite only where the exact average is.
#include "mk_cpu.h"
#include <math.h>
#include <string.h>

// number of taps start + t*d (0 <= t < k) inside [lo, hi)
static int count_taps(long start, int k, int d, long lo, long hi) {
    int t0, t1;
    mk_tap_range(start - lo, d, hi - lo, k, &t0, &t1);
    return t1 - t0;
}

typedef struct {
    const mk_pool2d_args *a;
    int dtype;
    const void *x;
    void *y;
    const float *inv_div_w;   // avg: per-q factor; combined with the per-p factor
    const float *div_h;
    int s0, s1;               // the taps s that reach the input for some output column
    int rows;                 // the row sweep (else window by window)
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

// output (p, q)'s window sum in double, from the taps inside the plane (the padding adds 0)
static double window_sum_f64(const mk_pool2d_args *a, const float *xp, int p, int q) {
    long h0 = (long)p * a->stride_h - a->pad_h, w0 = (long)q * a->stride_w - a->pad_w;
    int r0, r1, c0, c1;
    mk_tap_range(h0, a->dil_h, a->H, a->kh, &r0, &r1);
    mk_tap_range(w0, a->dil_w, a->W, a->kw, &c0, &c1);
    double s = 0;
    for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++)
            s += xp[(h0 + (long)r * a->dil_h) * a->W + w0 + (long)c * a->dil_w];
    return s;
}

// the average of output (p, q) from its float32 sum (see the top)
static inline float average(const pool_ctx *t, const float *xp, int p, int q, float sum) {
    float f = t->div_h[p] * t->inv_div_w[q];
    if (isfinite(sum)) return sum * f;
    return (float)(window_sum_f64(t->a, xp, p, q) * ((double)t->div_h[p] * t->inv_div_w[q]));
}

// per output column q the taps' column range: lo[s] <= q < hi[s] for s in [s0, s1) (no
// divisions in the loops; taps that never reach the input, a huge window's padding, are
// not stored)
static void tap_ranges(const pool_ctx *t, int *lo, int *hi) {
    const mk_pool2d_args *a = t->a;
    for (int s = t->s0; s < t->s1; s++)
        mk_tap_range((long)s * a->dil_w - a->pad_w, a->stride_w, a->W, a->Q, lo + s - t->s0,
                     hi + s - t->s0);
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
        long h0 = (long)p * a->stride_h - a->pad_h;
        int r0, r1;
        mk_tap_range(h0, a->dil_h, a->H, a->kh, &r0, &r1);
        for (int r = r0; r < r1; r++) {
            long ih = h0 + (long)r * a->dil_h;
            for (int s = t->s0; s < t->s1; s++) {
                // (points before the row when the tap starts in the padding; read from lo on)
                const float *xr = xp + ih * W + ((long)s * a->dil_w - a->pad_w);
                int ql = lo[s - t->s0], qh = hi[s - t->s0];
                if (is_max) {
                    for (int q = ql; q < qh; q++) yr[q] = MAXNAN(yr[q], xr[(long)q * sw]);
                } else {
                    for (int q = ql; q < qh; q++) yr[q] += xr[(long)q * sw];
                }
            }
        }
        if (!is_max)
            for (int q = 0; q < Q; q++) yr[q] = average(t, xp, p, q, yr[q]);
    }
}

// window by window: each output reduces its window in registers (narrow outputs)
MK_MULTIVERSION static void pool_plane_windows(const pool_ctx *t, const float *xp, float *yp) {
    const mk_pool2d_args *a = t->a;
    int Q = a->Q, W = a->W;
    int is_max = a->mode == MK_POOL_MAX;
    for (int p = 0; p < a->P; p++) {
        long h0 = (long)p * a->stride_h - a->pad_h;
        int r0, r1;                        // the window's taps inside the input rows
        mk_tap_range(h0, a->dil_h, a->H, a->kh, &r0, &r1);
        for (int q = 0; q < Q; q++) {
            long w0 = (long)q * a->stride_w - a->pad_w;
            int c0, c1;                    // and inside the input columns
            mk_tap_range(w0, a->dil_w, W, a->kw, &c0, &c1);
            float acc = is_max ? -INFINITY : 0.0f;
            if (r1 > r0 && c1 > c0) {
                if (a->dil_w == 1 && a->dil_h == 1 && c0 + w0 == 0 && c1 + w0 == W) {
                    // the window spans whole rows: its rows are one contiguous span
                    const float *xr = xp + (h0 + r0) * W;
                    long n = (long)(r1 - r0) * W;
                    acc = is_max ? span_max(xr, n, acc) : span_sum(xr, n);
                } else if (a->dil_w == 1) {
                    for (int r = r0; r < r1; r++) {
                        const float *xr = xp + (h0 + (long)r * a->dil_h) * W + w0 + c0;
                        acc = is_max ? span_max(xr, c1 - c0, acc) : acc + span_sum(xr, c1 - c0);
                    }
                } else {
                    for (int r = r0; r < r1; r++) {
                        const float *xr = xp + (h0 + (long)r * a->dil_h) * W + w0;
                        for (int s = c0; s < c1; s++) {
                            float v = xr[(long)s * a->dil_w];
                            acc = is_max ? MAXNAN(acc, v) : acc + v;
                        }
                    }
                }
            }
            yp[(long)p * Q + q] = is_max ? acc : average(t, xp, p, q, acc);
        }
    }
}

int mk_pool_planes(const mk_pool2d_args *a, int dtype, const void *x, void *y, long b, long e,
                   mk_plane_fn plane, void *ctx) {
    long HW = (long)a->H * a->W, PQ = (long)a->P * a->Q;
    if (dtype == MK_F32) {
        for (long i = b; i < e; i++) plane(ctx, i, (const float *)x + i * HW, (float *)y + i * PQ);
        return 1;
    }
    float *xs = mk_alloc((size_t)HW * 4), *ys = mk_alloc((size_t)PQ * 4);
    int ok = xs && ys;
    for (long i = b; ok && i < e; i++) {
        mk_h2f((const mk_half *)x + i * HW, xs, HW);
        plane(ctx, i, xs, ys);
        mk_f2h(ys, (mk_half *)y + i * PQ, PQ);
    }
    mk_free(xs); mk_free(ys);
    return ok;
}

long mk_pool_grain(const mk_pool2d_args *a) {
    double per_plane = (double)a->H * a->W + (double)a->P * a->Q *
                       (a->kh < a->H ? a->kh : a->H) * (a->kw < a->W ? a->kw : a->W);
    return mk_grain(per_plane < 1e15 ? (long)per_plane : (long)1e15);
}

// one range's planes: the tap ranges of the row sweep are per thread
typedef struct {
    const pool_ctx *t;
    const int *lo, *hi;
} plane_job;

static void pool_plane(void *vc, long i, const float *xp, float *yp) {
    const plane_job *j = vc;
    if (j->t->rows) pool_plane_rows(j->t, xp, yp, j->lo, j->hi);
    else pool_plane_windows(j->t, xp, yp);
}

static void pool_range(void *vc, long b, long e) {
    pool_ctx *t = vc;
    long taps = t->rows ? t->s1 - t->s0 : 0;
    int *lo = mk_alloc((size_t)(taps + 1) * 2 * sizeof(int)), *hi = lo ? lo + taps : NULL;
    if (!lo) { t->failed = 1; return; }
    if (t->rows) tap_ranges(t, lo, hi);
    plane_job j = {t, lo, hi};
    if (!mk_pool_planes(t->a, t->dtype, t->x, t->y, b, e, pool_plane, &j)) t->failed = 1;
    mk_free(lo);
}

// Few output columns: the row sweep's loops would be a handful of iterations per tap
#define WINDOW_MAX_Q 8

mk_status mk_cpu_pool2d(const mk_pool2d_args *a, int dtype, const void *x, void *y,
                        int64_t *indices) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    if (a->mode == MK_POOL_ADAPTIVE_AVG && !indices) return mk_cpu_adaptive_avg_pool2d(a, dtype, x, y);
    MK_CHECK_NONNEG(a->N); MK_CHECK_NONNEG(a->C); MK_CHECK_NONNEG(a->H); MK_CHECK_NONNEG(a->W);
    MK_CHECK_NONNEG(a->P); MK_CHECK_NONNEG(a->Q);
    MK_CHECK_POS(a->kh); MK_CHECK_POS(a->kw); MK_CHECK_POS(a->stride_h); MK_CHECK_POS(a->stride_w);
    MK_CHECK_NONNEG(a->pad_h); MK_CHECK_NONNEG(a->pad_w);
    MK_CHECK_POS(a->dil_h); MK_CHECK_POS(a->dil_w);
    if (a->mode != MK_POOL_MAX && a->mode != MK_POOL_AVG)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_pool2d: mode %d is not MK_POOL_MAX (0), "
                            "MK_POOL_AVG (1) or MK_POOL_ADAPTIVE_AVG (2)%s", a->mode,
                            indices ? "; indices are for MK_POOL_MAX only" : "");
    if (indices && a->mode != MK_POOL_MAX)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_pool2d: indices are for MK_POOL_MAX only "
                            "(mode %d)", a->mode);
    long planes = (long)a->N * a->C;
    if (planes == 0 || a->P == 0 || a->Q == 0) return MK_OK;
    MK_CHECK_PTR(x); MK_CHECK_PTR(y);
    if (indices) return mk_cpu_max_pool2d_indices(a, dtype, x, y, indices);

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
            long s0 = (long)p * a->stride_h - a->pad_h;
            int n = a->divisor > 0 ? 1 : a->count_include_pad
                ? count_taps(s0, a->kh, a->dil_h, s0, (long)a->H + a->pad_h_end)
                : count_taps(s0, a->kh, a->dil_h, 0, a->H);
            div_h[p] = n > 0 ? 1.0f / (float)n : NAN;
        }
        for (int q = 0; q < a->Q; q++) {
            long s0 = (long)q * a->stride_w - a->pad_w;
            int n = a->divisor > 0 ? a->divisor : a->count_include_pad
                ? count_taps(s0, a->kw, a->dil_w, s0, (long)a->W + a->pad_w_end)
                : count_taps(s0, a->kw, a->dil_w, 0, a->W);
            inv_w[q] = n > 0 ? 1.0f / (float)n : NAN;
        }
    }
    pool_ctx t = {a, dtype, x, y, inv_w, div_h, 0, 0, 0, 0};
    // the taps s for which some output column q may read an input column (a superset:
    // 0 <= q*stride_w + s*dil_w - pad_w < W for a q in [0, Q)). A window reaches at most
    // W/dil_w + 1 input columns; the row sweep visits every tap in [s0, s1) per row, so it
    // is for wide outputs whose superset is not much more (not for windows of 2^30 taps
    // with their strides, mostly padding: those go window by window, which skips padding)
    mk_tap_range(-(long)a->pad_w + (long)(a->Q - 1) * a->stride_w, a->dil_w,
                 (long)a->W + (long)(a->Q - 1) * a->stride_w, a->kw, &t.s0, &t.s1);
    t.rows = a->Q > WINDOW_MAX_Q && t.s1 - t.s0 <= 2L * (a->W / a->dil_w) + 16;
    mk_parallel_for(planes, mk_pool_grain(a), pool_range, &t);
    mk_free(div_h); mk_free(inv_w);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_pool2d: out of memory") : MK_OK;
}
