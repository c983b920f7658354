// mk_cpu_norm.c: layer_norm / rms_norm over rows, group_norm, batch_norm (inference and
// training with in-place running-stat updates). Statistics are two-pass (mean, then the
// sum of squared deviations) in float32 lanes per block, combined in double across blocks.
#include "mk_cpu.h"
#include "mk_cpu_rowvec.h"
#include <float.h>
#include <limits.h>
#include <math.h>

/* Huge finite values (|x| beyond ~1e19) overflow the float32 sums of squares (and, near
   FLT_MAX, the sums) although the normalised output is representable. Such a row (group,
   channel) is redone on x * 2^-e, 2^e just above max|x|: exact (a power of two; values
   that drop below float32's normal range are negligible against the largest), and
   (x 2^-e - mean 2^-e) / sqrt(var 2^-2e + eps 2^-2e) is the same output without an
   intermediate beyond the range. Ordinary rows pay one comparison: the redo is taken only
   when the statistics came out non-finite or the rstd 0, and leaves rows holding Inf or
   NaN (whose statistics are non-finite by right) as they were. */
static inline int stats_overflowed(float mean, float rstd) {
    return !isfinite(mean) || !(rstd > 0.0f);
}

// the exponent e with max|x| < 2^e over n floats, or INT_MIN when one is Inf or NaN
static int row_exponent(const float *x, long n) {
    float m = 0.0f;
    for (long i = 0; i < n; i++) {
        float v = fabsf(x[i]);
        if (!(v <= FLT_MAX)) return INT_MIN;
        if (v > m) m = v;
    }
    int e;
    frexpf(m, &e);
    return e;
}

// o[i] = x[i] * 2^-e (o may be x)
static void scale_pow2(const float *x, float *o, long n, int e) {
    float s = ldexpf(1.0f, -e);
    for (long i = 0; i < n; i++) o[i] = x[i] * s;
}

#define PIECE 4096L
// sum of x and sum of (x - c)^2 over n floats: float32 lanes per piece, double across pieces
// (a group in pieces, not planes: a call per 49-float plane cost more than the sums)
static double sum_pieces(const mk_rowvec_t *rv, const float *x, long n) {
    double s = 0.0;
    for (long o = 0; o < n; o += PIECE) s += rv->sum(x + o, n - o < PIECE ? n - o : PIECE);
    return s;
}
static double sumsq_dev_pieces(const mk_rowvec_t *rv, const float *x, long n, float c) {
    double q = 0.0;
    for (long o = 0; o < n; o += PIECE) q += rv->sumsq_dev(x + o, n - o < PIECE ? n - o : PIECE, c);
    return q;
}

/* The scaled redo of one contiguous row or group (x, n floats; see above): o = x 2^-e
   (o may be x) and the mean and rstd that normalise o. Returns 0, touching nothing, when x
   holds Inf or NaN. */
static int rescaled_stats(const float *x, float *o, long n, int centred, double eps,
                          float *mean, float *rstd) {
    const mk_rowvec_t *rv = mk_rowvec();
    int e = row_exponent(x, n);
    if (e == INT_MIN) return 0;
    scale_pow2(x, o, n, e);
    float m = centred ? (float)(sum_pieces(rv, o, n) / (double)n) : 0.0f;
    double q = sumsq_dev_pieces(rv, o, n, m);
    *mean = m;
    *rstd = (float)(1.0 / sqrt(q / (double)n + eps * ldexp(1.0, -2 * e)));
    return 1;
}

// y = (x - mean) * scale + shift over n elements (float32 in; float32 out, or float16 out
// through tmp, which may be x itself). Centring first: x*scale + (shift - mean*scale)
// cancels badly when |mean*scale| is large (a constant group gave 2e-3 instead of 0).
MK_MULTIVERSION static void affine_out(const float *x, long n, float mean, float scale,
                                       float shift, int dtype, void *y, float *tmp) {
    float *o = dtype == MK_F32 ? y : tmp;
    for (long i = 0; i < n; i++) o[i] = (x[i] - mean) * scale + shift;
    if (dtype == MK_F16) mk_f2h(tmp, y, n);
}

// layer/rms norm and group norm: the op's arguments and operands (weight, bias: NULL if none)
typedef struct {
    const void *a;            // mk_rownorm_args (row_ctx) or mk_group_norm_args (gn_ctx)
    int dtype;
    const void *x;
    const float *w, *b;
    void *y;
    int failed;
} norm_ctx;

/* ---------------------------------------------------------------- layer / rms norm */
typedef norm_ctx row_ctx;

static void rownorm_range(void *vc, long b, long e) {
    row_ctx *t = vc;
    const mk_rownorm_args *a = t->a;
    const mk_rowvec_t *rv = mk_rowvec();
    long n = a->n;
    float *buf = t->dtype == MK_F16 ? mk_alloc((size_t)n * 4) : NULL;
    if (t->dtype == MK_F16 && !buf) { t->failed = 1; return; }
    for (long r = b; r < e; r++) {
        const float *x = mk_row_piece(t->dtype, t->x, n, r, 0, n, buf);
        float mean = 0.0f, rstd;
        if (a->kind == MK_NORM_LAYER) {
            mean = rv->sum(x, n) / (float)n;
            rstd = 1.0f / sqrtf(rv->sumsq_dev(x, n, mean) / (float)n + a->eps);
        } else {
            rstd = 1.0f / sqrtf(rv->sumsq_dev(x, n, 0.0f) / (float)n + a->eps);
        }
        // out: the f32 output row, or the f16 path's buffer (a redo: the scaled row first)
        float *o = t->dtype == MK_F32 ? (float *)t->y + r * n : buf;
        if (stats_overflowed(mean, rstd) &&
            rescaled_stats(x, o, n, a->kind == MK_NORM_LAYER, a->eps, &mean, &rstd))
            x = o;
        rv->norm_out(x, o, n, mean, rstd, t->w, t->b);
        if (t->dtype == MK_F16) mk_f2h(buf, (mk_half *)t->y + r * n, n);
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
    float *c, *d, *q;         // per segment
    float *mean, *rstd;       // per row
} seg_ctx;

// one segment (mk_segment_range): its statistics, or (g->y) its output
static void seg_piece(void *vc, const mk_segment *g) {
    seg_ctx *s = vc;
    row_ctx *t = s->t;
    const mk_rownorm_args *a = t->a;
    const mk_rowvec_t *rv = mk_rowvec();
    if (!g->y) {
        s->c[g->p] = a->kind == MK_NORM_LAYER ? rv->sum(g->x, g->len) / (float)g->len : 0.0f;
        s->q[g->p] = rv->dev_moments(g->x, g->len, s->c[g->p], &s->d[g->p]);
        return;
    }
    rv->norm_out(g->x, g->y, g->len, s->mean[g->row], s->rstd[g->row],
                 t->w ? t->w + g->lo : NULL, t->b ? t->b + g->lo : NULL);
}

// one row of the segmented path again, whole and scaled (see above), where its combined
// statistics overflowed: rare, so on the calling thread
static void rownorm_redo(row_ctx *t, long r) {
    const mk_rownorm_args *a = t->a;
    long n = a->n;
    float *buf = mk_alloc((size_t)n * 4), mean, rstd;
    if (!buf) { t->failed = 1; return; }
    const float *x = mk_row_piece(t->dtype, t->x, n, r, 0, n, buf);
    float *o = t->dtype == MK_F32 ? (float *)t->y + r * n : buf;
    if (rescaled_stats(x, o, n, a->kind == MK_NORM_LAYER, a->eps, &mean, &rstd)) {
        mk_rowvec()->norm_out(o, o, n, mean, rstd, t->w, t->b);
        if (t->dtype == MK_F16) mk_f2h(buf, (mk_half *)t->y + r * n, n);
    }
    mk_free(buf);
}

static void rownorm_segments(row_ctx *t, long segs) {
    const mk_rownorm_args *a = t->a;
    long rows = a->rows, n = a->n, tasks = rows * segs;
    float *mem = mk_alloc((size_t)(3 * tasks + 2 * rows) * 4);
    if (!mem) { t->failed = 1; return; }
    seg_ctx s = {t, mem, mem + tasks, mem + 2 * tasks, mem + 3 * tasks, mem + 3 * tasks + rows};
    mk_segment_pass pass = {t->dtype, t->x, NULL, n, segs, seg_piece, &s, 0};
    mk_parallel_for(tasks, 1, mk_segment_range, &pass);
    t->failed |= pass.failed;
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
            double dc = c[i] - mean;     // rms: 0, and the terms with it left out (an
            m2 += q[i] + (dc != 0.0 ? 2.0 * dc * d[i] + len * dc * dc : 0.0);   // Inf d: NaN)
        }
        s.mean[r] = (float)mean;
        s.rstd[r] = 1.0f / sqrtf((float)(m2 / (double)n) + a->eps);
    }
    if (!t->failed) {                                      // the output pass
        pass.y = t->y;
        mk_parallel_for(tasks, 1, mk_segment_range, &pass);
        t->failed |= pass.failed;
    }
    for (long r = 0; r < rows && !t->failed; r++)
        if (stats_overflowed(s.mean[r], s.rstd[r])) rownorm_redo(t, r);
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
typedef norm_ctx gn_ctx;

// o = (x - mean) * rstd * w[c] + b[c] over the group's Cg planes of HW floats (w, b may
// be NULL; o may be x): one call per group (a call per 49-float plane of a late layer, with
// its scalar tail, took a third of group_norm (1, 2048, 7, 7))
MK_MULTIVERSION static void group_out(const float *x, int Cg, long HW, float mean, float rstd,
                                      const float *w, const float *b, float *o) {
    for (int c = 0; c < Cg; c++) {
        float scale = rstd * (w ? w[c] : 1.0f), shift = b ? b[c] : 0.0f;
        const float *xc = x + c * HW;
        float *oc = o + c * HW;
        for (long i = 0; i < HW; i++) oc[i] = (xc[i] - mean) * scale + shift;
    }
}

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
        const float *x = mk_row_piece(t->dtype, t->x, blk, i, 0, blk, buf);
        // over pieces of the (contiguous) group, not channels
        float mean = (float)(sum_pieces(rv, x, blk) / (double)blk);
        float rstd = (float)(1.0 / sqrt(sumsq_dev_pieces(rv, x, blk, mean) / (double)blk + a->eps));
        float *o = t->dtype == MK_F32 ? (float *)t->y + off : buf;   // out (a redo: scaled x)
        if (stats_overflowed(mean, rstd) && rescaled_stats(x, o, blk, 1, a->eps, &mean, &rstd))
            x = o;
        int c0 = (int)(i % a->groups) * Cg;
        group_out(x, Cg, HW, mean, rstd, t->w ? t->w + c0 : NULL, t->b ? t->b + c0 : NULL, o);
        if (t->dtype == MK_F16) mk_f2h(buf, (mk_half *)t->y + off, blk);
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
    int *exp;                 // per channel: e of a scaled redo (x 2^-e normalised), or 0
    const float *w, *b;
    int failed;
} bn_ctx;

static const float *plane_f32(const bn_ctx *t, long plane, float *buf) {
    long HW = t->a->HW;
    if (t->dtype == MK_F32) return (const float *)t->x + plane * HW;
    mk_h2f((const mk_half *)t->x + plane * HW, buf, HW);
    return buf;
}

/* Channel c's statistics redone on x 2^-e (see the top of the file): the mean and biased
   variance of the scaled values, and e. Returns 1, 0 (Inf or NaN in the channel: nothing
   changed) or -1 (out of memory). */
static int bn_rescaled_stats(const bn_ctx *t, long c, const mk_rowvec_t *rv, float *mean,
                             float *var, int *exp) {
    const mk_batch_norm_args *a = t->a;
    long HW = a->HW;
    float *buf = mk_alloc((size_t)HW * 4);
    if (!buf) return -1;
    int e = 0;
    for (long n = 0; n < a->N && e != INT_MIN; n++) {
        int en = row_exponent(plane_f32(t, n * a->C + c, buf), HW);
        e = en == INT_MIN || en > e ? en : e;
    }
    if (e != INT_MIN) {
        double cnt = (double)a->N * HW, s = 0.0, q = 0.0;
        for (long n = 0; n < a->N; n++) {
            scale_pow2(plane_f32(t, n * a->C + c, buf), buf, HW, e);
            s += sum_pieces(rv, buf, HW);
        }
        float m = (float)(s / cnt);
        for (long n = 0; n < a->N; n++) {
            scale_pow2(plane_f32(t, n * a->C + c, buf), buf, HW, e);
            q += sumsq_dev_pieces(rv, buf, HW, m);
        }
        *mean = m;
        *var = (float)(q / cnt);
        *exp = e;
    }
    mk_free(buf);
    return e != INT_MIN;
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
        t->exp[c] = 0;
        if (stats_overflowed(mean, 1.0f / sqrtf(t->rstd[c] + a->eps)) &&
            bn_rescaled_stats(t, c, rv, &t->mean[c], &t->rstd[c], &t->exp[c]) < 0) {
            t->failed = 1;
            break;
        }
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
        const float *x = plane_f32(t, p, buf);
        char *y = (char *)t->y + p * HW * mk_dsize(t->dtype);
        if (t->exp[c]) {             // a scaled redo: normalise x 2^-e (in the output or buf)
            float *o = t->dtype == MK_F32 ? (float *)y : buf;
            scale_pow2(x, o, HW, t->exp[c]);
            x = o;
        }
        affine_out(x, HW, t->mean[c], scale, shift, t->dtype, y, buf);
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
    int *exp = mk_alloc((size_t)a->C * sizeof(int));
    if (!mean || !rstd || !exp) {
        mk_free(mean); mk_free(rstd); mk_free(exp);
        return mk_set_error(MK_ERR_NOMEM, "mk_cpu_batch_norm: out of memory");
    }
    bn_ctx t = {a, dtype, x, y, mean, rstd, exp, weight, bias, 0};
    if (a->training) {
        mk_parallel_for(a->C, mk_grain(2 * count), bn_stats_range, &t);
        for (int c = 0; c < a->C && !t.failed; c++) {
            float var = rstd[c];
            if (a->has_running && !exp[c]) {
                float m = a->momentum;
                running_mean[c] = (1.0f - m) * running_mean[c] + m * mean[c];
                running_var[c] = (1.0f - m) * running_var[c] +
                                 m * (float)((double)var * count / (double)(count - 1));
            } else if (a->has_running) {     // of x itself: the redo's 2^-e undone in double
                double m = a->momentum, u = ldexp(1.0, exp[c]);
                running_mean[c] = (float)((1.0 - m) * running_mean[c] + m * (mean[c] * u));
                running_var[c] = (float)((1.0 - m) * running_var[c] +
                                         m * ((double)var * u * u * count / (double)(count - 1)));
            }
            rstd[c] = exp[c] ? (float)(1.0 / sqrt(var + a->eps * ldexp(1.0, -2 * exp[c])))
                             : 1.0f / sqrtf(var + a->eps);
        }
    } else {
        for (int c = 0; c < a->C; c++) {
            mean[c] = running_mean[c];
            rstd[c] = 1.0f / sqrtf(running_var[c] + a->eps);
            exp[c] = 0;
        }
    }
    if (!t.failed) mk_parallel_for((long)a->N * a->C, mk_grain(a->HW), bn_apply_range, &t);
    mk_free(mean); mk_free(rstd); mk_free(exp);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_batch_norm: out of memory") : MK_OK;
}
