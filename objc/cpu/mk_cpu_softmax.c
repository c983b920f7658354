// mk_cpu_softmax.c: softmax / log_softmax of x viewed as (outer, n, inner) along n.
// Numerically stable: the maximum is subtracted first. Contiguous rows (inner == 1) run
// three straight passes per row; strided rows (inner > 1) run the same passes over a block
// of inner columns at a time so that every pass reads contiguous memory. A few inner
// columns (inner < SMALL_INNER) would leave those passes a few scalar iterations long:
// there the (n, inner) block is transposed to inner contiguous rows in scratch instead.
#include "mk_cpu.h"
#include "mk_cpu_vecmath.h"
#include "mk_cpu_rowvec.h"
#include <math.h>
#include <string.h>

#define ROW_BLOCK 2048   // elements per block of the online max/sum pass (8 KiB, in L1)
#define MAX_BLOCKS 256

// One contiguous row; y may alias x. Block by block (a block is read from memory once for
// its max, then again from L1): the running max m and sum s are updated (s rescaled when m
// grows) and, for softmax, exp(x - m_then) is stored. A second pass multiplies each block
// by exp(m_then - m) / s: one exp per element and two passes over memory. The passes are
// mk_rowvec's (explicit vectors at the CPU's width).
static void softmax_row(const float *x, float *y, long n, int log_mode) {
    const mk_rowvec_t *rv = mk_rowvec();
    if (n <= ROW_BLOCK) {
        // one block (in L1): max, exp-sum, scale, without the running-max bookkeeping, which
        // costs as much as the passes on short rows. Non-finite rows come out as in the
        // blocked path: m = NaN or +-inf makes x - m NaN somewhere, so s and the row are NaN.
        float m = rv->max(x, n);
        float s = rv->exp_sum(x, log_mode ? NULL : y, n, m);
        if (log_mode) rv->sub2(x, y, n, m, logf(s));
        else rv->scale(y, n, 1.0f / s);
        return;
    }
    long blk = (n + MAX_BLOCKS - 1) / MAX_BLOCKS;
    blk = blk < ROW_BLOCK ? ROW_BLOCK : (blk + 15) & ~15L;
    float mb[MAX_BLOCKS];          // the running max each block's stored terms are relative to
    float m = -INFINITY, s = 0.0f;
    for (long i = 0, b = 0; i < n; i += blk, b++) {
        long len = n - i < blk ? n - i : blk;
        float bm = rv->max(x + i, len);
        mb[b] = m;
        if (bm == -INFINITY) {                     // contributes exp(-inf) = 0
            if (!log_mode) memset(y + i, 0, (size_t)len * 4);
            continue;
        }
        if (bm > m || bm != bm) {                  // NaN: m turns NaN and so does everything
            s *= mk_expf(m - bm);
            m = bm;
        }
        mb[b] = m;
        s += rv->exp_sum(x + i, log_mode ? NULL : y + i, len, m);
    }
    // an all -inf row leaves m = -inf, s = 0: the output is NaN, as torch gives
    if (log_mode) {
        // (x - m) - log(s), not x - (m + log(s)): m + log(s) rounds to m's ulp (5e-4 at 1e4)
        rv->sub2(x, y, n, m, logf(s));
        return;
    }
    for (long i = 0, b = 0; i < n; i += blk, b++) {
        long len = n - i < blk ? n - i : blk;
        float f = mk_expf(mb[b] - m) / s;
        if (m == -INFINITY || m != m) f = __builtin_nanf("");
        rv->scale(y + i, len, f);
    }
}

#define SUM_BLOCK 256   // rows summed into a partial sum first: long columns stay accurate

// a (n, B) block with row stride ld (float32, in place allowed); m, s, ps: B floats of scratch
MK_MULTIVERSION static void softmax_cols(const float *x, float *y, long n, long B, long ld, int log_mode,
                         float *m, float *s, float *ps) {
    for (long j = 0; j < B; j++) { m[j] = -INFINITY; s[j] = 0.0f; }
    for (long i = 0; i < n; i++) {
        const float *r = x + i * ld;
        for (long j = 0; j < B; j++) m[j] = (r[j] > m[j] || r[j] != r[j]) ? r[j] : m[j];
    }
    for (long i0 = 0; i0 < n; i0 += SUM_BLOCK) {
        long i1 = n - i0 < SUM_BLOCK ? n : i0 + SUM_BLOCK;
        for (long j = 0; j < B; j++) ps[j] = 0.0f;
        for (long i = i0; i < i1; i++) {
            const float *r = x + i * ld;
            float *o = y + i * ld;
            if (log_mode) for (long j = 0; j < B; j++) ps[j] += mk_expf(r[j] - m[j]);
            else for (long j = 0; j < B; j++) { float e = mk_expf(r[j] - m[j]); o[j] = e; ps[j] += e; }
        }
        for (long j = 0; j < B; j++) s[j] += ps[j];
    }
    if (log_mode) {
        for (long j = 0; j < B; j++) s[j] = logf(s[j]);   // (x - m) - log(s), as in softmax_row
        for (long i = 0; i < n; i++)
            for (long j = 0; j < B; j++) y[i * ld + j] = (x[i * ld + j] - m[j]) - s[j];
    } else {
        for (long j = 0; j < B; j++) s[j] = 1.0f / s[j];
        for (long i = 0; i < n; i++)
            for (long j = 0; j < B; j++) y[i * ld + j] *= s[j];
    }
}

typedef struct {
    const mk_softmax_args *a;
    int dtype;
    const void *x;
    void *y;
    long block, nblocks;      // strided case: inner columns per task, tasks per outer
    int failed;
} sm_ctx;

static void rows_range(void *vc, long b, long e) {
    sm_ctx *t = vc;
    long n = t->a->n;
    if (t->dtype == MK_F32) {
        for (long i = b; i < e; i++)
            softmax_row((const float *)t->x + i * n, (float *)t->y + i * n, n, t->a->log);
        return;
    }
    float *buf = mk_alloc((size_t)n * 4);
    if (!buf) { t->failed = 1; return; }
    for (long i = b; i < e; i++) {
        mk_h2f((const mk_half *)t->x + i * n, buf, n);
        softmax_row(buf, buf, n, t->a->log);
        mk_f2h(buf, (mk_half *)t->y + i * n, n);
    }
    mk_free(buf);
}

/* Contiguous rows cut into segments (mk_row_segments: fewer rows than threads). First per
   segment its max m_i and s_i = sum exp(x - m_i); per row m = max m_i (NaN if any is) and
   s = sum s_i exp(m_i - m); then per segment the output from x again: exp(x - m) / s (or
   (x - m) - log s). Recomputing the exps costs less than a third pass over memory would. */
typedef struct {
    sm_ctx *t;
    float *sm, *ss;           // per segment: max, sum of exp(x - max)
    float *m, *ls;            // per row: max, and 1/s (softmax) or log s (log_softmax)
} smseg_ctx;

// one segment (mk_segment_range): its statistics, or (g->y) its output
static void smseg_piece(void *vc, const mk_segment *g) {
    smseg_ctx *s = vc;
    const mk_rowvec_t *rv = mk_rowvec();
    if (!g->y) {
        float m = rv->max(g->x, g->len);
        s->sm[g->p] = m;
        s->ss[g->p] = m == -INFINITY ? 0.0f : rv->exp_sum(g->x, NULL, g->len, m);   // exp(-inf) = 0
        return;
    }
    // m = -inf (an all -inf row) or NaN makes x - m NaN: the row comes out NaN, as torch
    if (s->t->a->log) rv->sub2(g->x, g->y, g->len, s->m[g->row], s->ls[g->row]);
    else { rv->exp_sum(g->x, g->y, g->len, s->m[g->row]); rv->scale(g->y, g->len, s->ls[g->row]); }
}

static void softmax_segments(sm_ctx *t, long segs) {
    long rows = t->a->outer, tasks = rows * segs;
    float *mem = mk_alloc((size_t)(2 * tasks + 2 * rows) * 4);
    if (!mem) { t->failed = 1; return; }
    smseg_ctx s = {t, mem, mem + tasks, mem + 2 * tasks, mem + 2 * tasks + rows};
    mk_segment_pass pass = {t->dtype, t->x, NULL, t->a->n, segs, smseg_piece, &s, 0};
    mk_parallel_for(tasks, 1, mk_segment_range, &pass);
    t->failed |= pass.failed;
    for (long r = 0; r < rows && !t->failed; r++) {
        const float *sm = s.sm + r * segs, *ss = s.ss + r * segs;
        float m = -INFINITY, sum = 0.0f;
        int nan = 0;
        for (long i = 0; i < segs; i++) {
            nan |= sm[i] != sm[i];
            m = sm[i] > m ? sm[i] : m;
        }
        if (nan) m = __builtin_nanf("");
        for (long i = 0; i < segs; i++) sum += ss[i] * mk_expf(sm[i] - m);
        s.m[r] = m;
        s.ls[r] = t->a->log ? logf(sum) : 1.0f / sum;
    }
    if (!t->failed) {                                      // the output pass
        pass.y = t->y;
        mk_parallel_for(tasks, 1, mk_segment_range, &pass);
        t->failed |= pass.failed;
    }
    mk_free(mem);
}

#define SMALL_INNER 16
#define SMALL_INNER_MAX_FLOATS (1L << 18)   // scratch per task (1 MiB)

// (n, inner) with row stride inner <-> inner rows of n (float32 or float16 storage)
MK_MULTIVERSION static void gather_cols(const void *x, int f16, long n, long inner, float *buf) {
    for (long j = 0; j < inner; j++) {
        float *o = buf + j * n;
        if (f16) { const mk_half *h = (const mk_half *)x + j; for (long i = 0; i < n; i++) o[i] = (float)h[i * inner]; }
        else { const float *f = (const float *)x + j; for (long i = 0; i < n; i++) o[i] = f[i * inner]; }
    }
}

MK_MULTIVERSION static void scatter_cols(const float *buf, long n, long inner, int f16, void *y) {
    for (long j = 0; j < inner; j++) {
        const float *r = buf + j * n;
        if (f16) { mk_half *h = (mk_half *)y + j; for (long i = 0; i < n; i++) h[i * inner] = (mk_half)r[i]; }
        else { float *f = (float *)y + j; for (long i = 0; i < n; i++) f[i * inner] = r[i]; }
    }
}

// small inner: per outer, gather the (n, inner) block into inner rows, softmax them, scatter
static void small_inner_range(void *vc, long b, long e) {
    sm_ctx *t = vc;
    long n = t->a->n, inner = t->a->inner;
    int f16 = t->dtype == MK_F16;
    size_t es = mk_dsize(t->dtype);
    float *buf = mk_alloc((size_t)n * inner * 4);
    if (!buf) { t->failed = 1; return; }
    for (long o = b; o < e; o++) {
        long base = o * n * inner;
        gather_cols((const char *)t->x + base * es, f16, n, inner, buf);
        for (long j = 0; j < inner; j++) softmax_row(buf + j * n, buf + j * n, n, t->a->log);
        scatter_cols(buf, n, inner, f16, (char *)t->y + base * es);
    }
    mk_free(buf);
}

static void cols_range(void *vc, long b, long e) {
    sm_ctx *t = vc;
    long n = t->a->n, inner = t->a->inner, B = t->block;
    int f16 = t->dtype == MK_F16;
    float *ms = mk_alloc((size_t)3 * B * 4), *buf = f16 ? mk_alloc((size_t)n * B * 4) : NULL;
    if (!ms || (f16 && !buf)) { t->failed = 1; mk_free(ms); mk_free(buf); return; }
    for (long task = b; task < e; task++) {
        long o = task / t->nblocks, j0 = (task % t->nblocks) * B;
        long w = inner - j0 < B ? inner - j0 : B;
        long base = o * n * inner + j0;
        if (!f16) {
            softmax_cols((const float *)t->x + base, (float *)t->y + base, n, w, inner,
                         t->a->log, ms, ms + B, ms + 2 * B);
        } else {
            for (long i = 0; i < n; i++)
                mk_h2f((const mk_half *)t->x + base + i * inner, buf + i * w, w);
            softmax_cols(buf, buf, n, w, w, t->a->log, ms, ms + B, ms + 2 * B);
            for (long i = 0; i < n; i++)
                mk_f2h(buf + i * w, (mk_half *)t->y + base + i * inner, w);
        }
    }
    mk_free(ms); mk_free(buf);
}

mk_status mk_cpu_softmax(const mk_softmax_args *a, int dtype, const void *x, void *y) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    MK_CHECK_NONNEG(a->outer); MK_CHECK_NONNEG(a->n); MK_CHECK_NONNEG(a->inner);
    long total = (long)a->outer * a->n * a->inner;
    if (total == 0) return MK_OK;
    MK_CHECK_PTR(x); MK_CHECK_PTR(y);
    sm_ctx t = {a, dtype, x, y, 0, 0, 0};
    long segs = a->inner == 1 ? mk_row_segments(a->outer, a->n, mk_cpu_threads(), 25) : 1;
    if (segs > 1) {
        softmax_segments(&t, segs);
    } else if (a->inner == 1) {
        mk_parallel_for(a->outer, mk_grain(a->n), rows_range, &t);
    } else if (a->inner < SMALL_INNER && (long)a->n * a->inner <= SMALL_INNER_MAX_FLOATS) {
        mk_parallel_for(a->outer, mk_grain((long)a->n * a->inner), small_inner_range, &t);
    } else {
        long B = a->inner < 256 ? a->inner : 256;
        // float16 staging holds n*B floats: keep it within ~1 MiB when rows are long
        while (dtype == MK_F16 && B > 16 && (long)a->n * B > (1 << 18)) B /= 2;
        t.block = B;
        t.nblocks = (a->inner + B - 1) / B;
        mk_parallel_for((long)a->outer * t.nblocks, mk_grain(a->n * B), cols_range, &t);
    }
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_softmax: out of memory") : MK_OK;
}
