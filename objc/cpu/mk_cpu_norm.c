// mk_cpu_norm.c: layer_norm / rms_norm over rows, group_norm, batch_norm (inference and
// training with in-place running-stat updates). Statistics are two-pass (mean, then the
// sum of squared deviations) in float32 lanes per block, combined in double across blocks.
#include "mk_cpu.h"
#include "mk_cpu_rowvec.h"
#include <math.h>

// y = (x - mean) * scale + shift over n elements (float32 in; float32 out, or float16 out
// through tmp, which may be x itself). Centring first: x*scale + (shift - mean*scale)
// cancels badly when |mean*scale| is large (a constant group gave 2e-3 instead of 0).
MK_MULTIVERSION static void affine_out(const float *x, long n, float mean, float scale,
                                       float shift, int dtype, void *y, float *tmp) {
    float *o = dtype == MK_F32 ? y : tmp;
    for (long i = 0; i < n; i++) o[i] = (x[i] - mean) * scale + shift;
    if (dtype == MK_F16) mk_f2h(tmp, y, n);
}

/* ---------------------------------------------------------------- layer / rms norm */
typedef struct {
    const mk_rownorm_args *a;
    int dtype;
    const void *x;
    const float *w, *b;
    void *y;
    int failed;
} row_ctx;

static void rownorm_range(void *vc, long b, long e) {
    row_ctx *t = vc;
    const mk_rownorm_args *a = t->a;
    const mk_rowvec_t *rv = mk_rowvec();
    long n = a->n;
    float *buf = t->dtype == MK_F16 ? mk_alloc((size_t)n * 4) : NULL;
    if (t->dtype == MK_F16 && !buf) { t->failed = 1; return; }
    for (long r = b; r < e; r++) {
        const float *x;
        if (t->dtype == MK_F32) x = (const float *)t->x + r * n;
        else { mk_h2f((const mk_half *)t->x + r * n, buf, n); x = buf; }
        float mean = 0.0f, rstd;
        if (a->kind == MK_NORM_LAYER) {
            mean = rv->sum(x, n) / (float)n;
            rstd = 1.0f / sqrtf(rv->sumsq_dev(x, n, mean) / (float)n + a->eps);
        } else {
            rstd = 1.0f / sqrtf(rv->sumsq_dev(x, n, 0.0f) / (float)n + a->eps);
        }
        if (t->dtype == MK_F32) {
            rv->norm_out(x, (float *)t->y + r * n, n, mean, rstd, t->w, t->b);
        } else {                                  // x is buf: normalise in place
            rv->norm_out(buf, buf, n, mean, rstd, t->w, t->b);
            mk_f2h(buf, (mk_half *)t->y + r * n, n);
        }
    }
    mk_free(buf);
}

/* Rows cut into segments (mk_row_segments: fewer rows than threads). Per segment a center
   c_i (its float32 mean) and, about it, the sums of x - c_i and of (x - c_i)^2 (values
   near 0: accurate in float32 where a plain sum of large values is not); per row, in
   double, mean = sum (len_i c_i + d_i) / n and
   sum (x - mean)^2 = sum q_i + 2 (c_i - mean) d_i + len_i (c_i - mean)^2, exact for any c_i.
   Then the output per segment. */
typedef struct {
    row_ctx *t;
    long segs;
    float *c, *d, *q;         // per segment
    float *mean, *rstd;       // per row
} seg_ctx;

static const float *seg_input(const row_ctx *t, long r, long lo, long len, float *buf) {
    long n = t->a->n;
    if (t->dtype == MK_F32) return (const float *)t->x + r * n + lo;
    mk_h2f((const mk_half *)t->x + r * n + lo, buf, len);
    return buf;
}

static void seg_stats(void *vc, long b, long e) {
    seg_ctx *s = vc;
    row_ctx *t = s->t;
    long n = t->a->n;
    const mk_rowvec_t *rv = mk_rowvec();
    float *buf = t->dtype == MK_F16 ? mk_alloc((size_t)(n / s->segs + 32) * 4) : NULL;
    if (t->dtype == MK_F16 && !buf) { t->failed = 1; return; }
    for (long p = b; p < e; p++) {
        long i = p % s->segs, lo = mk_segment_start(i, s->segs, n);
        long len = mk_segment_start(i + 1, s->segs, n) - lo;
        const float *x = seg_input(t, p / s->segs, lo, len, buf);
        s->c[p] = t->a->kind == MK_NORM_LAYER ? rv->sum(x, len) / (float)len : 0.0f;
        s->q[p] = rv->dev_moments(x, len, s->c[p], &s->d[p]);
    }
    mk_free(buf);
}

static void seg_out(void *vc, long b, long e) {
    seg_ctx *s = vc;
    row_ctx *t = s->t;
    long n = t->a->n;
    const mk_rowvec_t *rv = mk_rowvec();
    float *buf = t->dtype == MK_F16 ? mk_alloc((size_t)(n / s->segs + 32) * 4) : NULL;
    if (t->dtype == MK_F16 && !buf) { t->failed = 1; return; }
    for (long p = b; p < e; p++) {
        long r = p / s->segs, i = p % s->segs, lo = mk_segment_start(i, s->segs, n);
        long len = mk_segment_start(i + 1, s->segs, n) - lo;
        const float *x = seg_input(t, r, lo, len, buf);
        const float *w = t->w ? t->w + lo : NULL, *bb = t->b ? t->b + lo : NULL;
        if (t->dtype == MK_F32) {
            rv->norm_out(x, (float *)t->y + r * n + lo, len, s->mean[r], s->rstd[r], w, bb);
        } else {
            rv->norm_out(buf, buf, len, s->mean[r], s->rstd[r], w, bb);
            mk_f2h(buf, (mk_half *)t->y + r * n + lo, len);
        }
    }
    mk_free(buf);
}

static void rownorm_segments(row_ctx *t, long segs) {
    const mk_rownorm_args *a = t->a;
    long rows = a->rows, n = a->n, tasks = rows * segs;
    float *mem = mk_alloc((size_t)(3 * tasks + 2 * rows) * 4);
    if (!mem) { t->failed = 1; return; }
    seg_ctx s = {t, segs, mem, mem + tasks, mem + 2 * tasks, mem + 3 * tasks,
                 mem + 3 * tasks + rows};
    mk_parallel_for(tasks, 1, seg_stats, &s);
    for (long r = 0; r < rows && !t->failed; r++) {
        const float *c = s.c + r * segs, *d = s.d + r * segs, *q = s.q + r * segs;
        double mean = 0.0, m2 = 0.0;
        for (long i = 0; i < segs; i++)
            mean += (double)c[i] * (mk_segment_start(i + 1, segs, n) - mk_segment_start(i, segs, n))
                    + d[i];
        mean /= (double)n;
        if (a->kind != MK_NORM_LAYER) mean = 0.0;     // rms: c_i = 0, no centring
        for (long i = 0; i < segs; i++) {
            double len = (double)(mk_segment_start(i + 1, segs, n) - mk_segment_start(i, segs, n));
            double dc = c[i] - mean;
            m2 += q[i] + 2.0 * dc * d[i] + len * dc * dc;
        }
        s.mean[r] = (float)mean;
        s.rstd[r] = 1.0f / sqrtf((float)(m2 / (double)n) + a->eps);
    }
    if (!t->failed) mk_parallel_for(tasks, 1, seg_out, &s);
    mk_free(mem);
}

mk_status mk_cpu_rownorm(const mk_rownorm_args *a, int dtype, const void *x,
                         const float *weight, const float *bias, void *y) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    MK_CHECK_NONNEG(a->rows); MK_CHECK_NONNEG(a->n);
    if (a->kind != MK_NORM_LAYER && a->kind != MK_NORM_RMS)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_rownorm: kind %d is not MK_NORM_LAYER (0) "
                            "or MK_NORM_RMS (1)", a->kind);
    if ((long)a->rows * a->n == 0) return MK_OK;
    MK_CHECK_PTR(x); MK_CHECK_PTR(y);
    if (a->has_weight) MK_CHECK_PTR(weight); else weight = NULL;
    if (a->has_bias && a->kind == MK_NORM_LAYER) MK_CHECK_PTR(bias); else bias = NULL;
    row_ctx t = {a, dtype, x, weight, bias, y, 0};
    long segs = mk_row_segments(a->rows, a->n, mk_cpu_threads(), 89);
    if (segs > 1) {
        rownorm_segments(&t, segs);
    } else {
        long grain = 32768 / a->n;
        mk_parallel_for(a->rows, grain < 1 ? 1 : grain, rownorm_range, &t);
    }
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_rownorm: out of memory") : MK_OK;
}

/* ---------------------------------------------------------------- group norm */
typedef struct {
    const mk_group_norm_args *a;
    int dtype;
    const void *x;
    const float *w, *b;
    void *y;
    int failed;
} gn_ctx;

#define GN_PIECE 4096L

static void group_range(void *vc, long b, long e) {
    gn_ctx *t = vc;
    const mk_group_norm_args *a = t->a;
    int Cg = a->C / a->groups;
    long HW = a->HW, blk = (long)Cg * HW;
    float *buf = t->dtype == MK_F16 ? mk_alloc((size_t)blk * 4) : NULL;
    if (t->dtype == MK_F16 && !buf) { t->failed = 1; return; }
    const mk_rowvec_t *rv = mk_rowvec();
    for (long i = b; i < e; i++) {            // i = n * groups + g
        long off = i * blk;
        const float *x;
        if (t->dtype == MK_F32) x = (const float *)t->x + off;
        else { mk_h2f((const mk_half *)t->x + off, buf, blk); x = buf; }
        // partial sums in float32 over pieces of the (contiguous) group, combined in
        // double; pieces of GN_PIECE floats, not channels: one call per 49-float plane
        // (late layers) cost more than the sums themselves
        double s = 0.0;
        for (long o = 0; o < blk; o += GN_PIECE) s += rv->sum(x + o, blk - o < GN_PIECE ? blk - o : GN_PIECE);
        float mean = (float)(s / (double)blk);
        double q = 0.0;
        for (long o = 0; o < blk; o += GN_PIECE)
            q += rv->sumsq_dev(x + o, blk - o < GN_PIECE ? blk - o : GN_PIECE, mean);
        float rstd = (float)(1.0 / sqrt(q / (double)blk + a->eps));
        int c0 = (int)(i % a->groups) * Cg;
        for (int c = 0; c < Cg; c++) {
            float scale = rstd * (t->w ? t->w[c0 + c] : 1.0f);
            float shift = t->b ? t->b[c0 + c] : 0.0f;
            affine_out(x + c * HW, HW, mean, scale, shift, t->dtype,
                       (char *)t->y + (off + c * HW) * mk_dsize(t->dtype), buf ? buf + c * HW : NULL);
        }
    }
    mk_free(buf);
}

mk_status mk_cpu_group_norm(const mk_group_norm_args *a, int dtype, const void *x,
                            const float *weight, const float *bias, void *y) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    MK_CHECK_NONNEG(a->N); MK_CHECK_NONNEG(a->C); MK_CHECK_NONNEG(a->HW); MK_CHECK_POS(a->groups);
    if (a->C % a->groups)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_group_norm: groups=%d must divide C=%d",
                            a->groups, a->C);
    if ((long)a->N * a->C * a->HW == 0) return MK_OK;
    MK_CHECK_PTR(x); MK_CHECK_PTR(y);
    if (a->has_weight) MK_CHECK_PTR(weight); else weight = NULL;
    if (a->has_bias) MK_CHECK_PTR(bias); else bias = NULL;
    gn_ctx t = {a, dtype, x, weight, bias, y, 0};
    mk_parallel_for((long)a->N * a->groups, 1, group_range, &t);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_group_norm: out of memory") : MK_OK;
}

/* ---------------------------------------------------------------- batch norm */
typedef struct {
    const mk_batch_norm_args *a;
    int dtype;
    const void *x;
    void *y;
    float *mean, *rstd;       // per channel: what normalises (batch or running stats)
    const float *w, *b;
    int failed;
} bn_ctx;

static const float *plane_f32(const bn_ctx *t, long plane, float *buf) {
    long HW = t->a->HW;
    if (t->dtype == MK_F32) return (const float *)t->x + plane * HW;
    mk_h2f((const mk_half *)t->x + plane * HW, buf, HW);
    return buf;
}

// batch statistics of channels [b, e): mean and biased variance over N x HW
static void bn_stats_range(void *vc, long b, long e) {
    bn_ctx *t = vc;
    const mk_batch_norm_args *a = t->a;
    long HW = a->HW;
    float *buf = t->dtype == MK_F16 ? mk_alloc((size_t)HW * 4) : NULL;
    if (t->dtype == MK_F16 && !buf) { t->failed = 1; return; }
    double cnt = (double)a->N * HW;
    const mk_rowvec_t *rv = mk_rowvec();
    for (long c = b; c < e; c++) {
        double s = 0.0, q = 0.0;
        for (long n = 0; n < a->N; n++) s += rv->sum(plane_f32(t, n * a->C + c, buf), HW);
        float mean = (float)(s / cnt);
        for (long n = 0; n < a->N; n++)
            q += rv->sumsq_dev(plane_f32(t, n * a->C + c, buf), HW, mean);
        t->mean[c] = mean;
        t->rstd[c] = (float)(q / cnt);   // biased variance for now; turned into rstd later
    }
    mk_free(buf);
}

static void bn_apply_range(void *vc, long b, long e) {
    bn_ctx *t = vc;
    const mk_batch_norm_args *a = t->a;
    long HW = a->HW;
    float *buf = t->dtype == MK_F16 ? mk_alloc((size_t)HW * 4) : NULL;
    if (t->dtype == MK_F16 && !buf) { t->failed = 1; return; }
    for (long p = b; p < e; p++) {
        int c = (int)(p % a->C);
        float scale = t->rstd[c] * (t->w ? t->w[c] : 1.0f);
        float shift = t->b ? t->b[c] : 0.0f;
        affine_out(plane_f32(t, p, buf), HW, t->mean[c], scale, shift, t->dtype,
                   (char *)t->y + p * HW * mk_dsize(t->dtype), buf);
    }
    mk_free(buf);
}

mk_status mk_cpu_batch_norm(const mk_batch_norm_args *a, int dtype, const void *x,
                            float *running_mean, float *running_var,
                            const float *weight, const float *bias, void *y) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    MK_CHECK_NONNEG(a->N); MK_CHECK_NONNEG(a->C); MK_CHECK_NONNEG(a->HW);
    if (!a->training && !a->has_running)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_batch_norm: inference (training=0) needs "
                            "running_mean and running_var (has_running=1)");
    if (a->has_running) { MK_CHECK_PTR(running_mean); MK_CHECK_PTR(running_var); }
    long count = (long)a->N * a->HW;
    if (a->training && count == 1)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_batch_norm: training needs more than 1 "
                            "value per channel (N*H*W = 1); use inference mode or a larger batch");
    if (count == 0 || a->C == 0) return MK_OK;
    MK_CHECK_PTR(x); MK_CHECK_PTR(y);
    if (a->has_weight) MK_CHECK_PTR(weight); else weight = NULL;
    if (a->has_bias) MK_CHECK_PTR(bias); else bias = NULL;

    float *mean = mk_alloc((size_t)a->C * 4), *rstd = mk_alloc((size_t)a->C * 4);
    if (!mean || !rstd) {
        mk_free(mean); mk_free(rstd);
        return mk_set_error(MK_ERR_NOMEM, "mk_cpu_batch_norm: out of memory");
    }
    bn_ctx t = {a, dtype, x, y, mean, rstd, weight, bias, 0};
    if (a->training) {
        mk_parallel_for(a->C, mk_grain(2 * count), bn_stats_range, &t);
        for (int c = 0; c < a->C && !t.failed; c++) {
            float var = rstd[c];
            if (a->has_running) {
                float m = a->momentum;
                running_mean[c] = (1.0f - m) * running_mean[c] + m * mean[c];
                running_var[c] = (1.0f - m) * running_var[c] +
                                 m * (float)((double)var * count / (double)(count - 1));
            }
            rstd[c] = 1.0f / sqrtf(var + a->eps);
        }
    } else {
        for (int c = 0; c < a->C; c++) {
            mean[c] = running_mean[c];
            rstd[c] = 1.0f / sqrtf(running_var[c] + a->eps);
        }
    }
    if (!t.failed) mk_parallel_for((long)a->N * a->C, mk_grain(a->HW), bn_apply_range, &t);
    mk_free(mean); mk_free(rstd);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_batch_norm: out of memory") : MK_OK;
}
