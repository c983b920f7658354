// mk_mps_math.c: see mk_mps_math.h.
#include "mk_mps_math.h"

int64_t mk_mps_end_pad(int in, int pad, int out, int stride, int dil, int k) {
    int64_t need = (int64_t)(out - 1) * stride + (int64_t)dil * (k - 1) + 1 - in - pad;
    return need > 0 ? need : 0;
}

int64_t mk_mps_floor_windows(int64_t padded, int stride, int dil, int k) {
    int64_t span = (int64_t)dil * (k - 1) + 1;
    return padded < span ? 0 : (padded - span) / stride + 1;
}

// Taps of a window starting at `start` (k taps, `dil` apart) that fall in [lo, hi).
static int taps_in(int64_t start, int k, int dil, int64_t lo, int64_t hi) {
    int n = 0;
    for (int i = 0; i < k; i++) {
        int64_t v = start + (int64_t)i * dil;
        n += v >= lo && v < hi;
    }
    return n;
}

void mk_mps_avg_divisors(const mk_pool2d_args *a, float *out) {
    for (int p = 0; p < a->P; p++)
        for (int q = 0; q < a->Q; q++) {
            int64_t hs = (int64_t)p * a->stride_h - a->pad_h, ws = (int64_t)q * a->stride_w - a->pad_w;
            int n;
            if (a->divisor > 0)
                n = a->divisor;
            else if (a->count_include_pad)
                n = taps_in(hs, a->kh, a->dil_h, -a->pad_h, (int64_t)a->H + a->pad_h_end) *
                    taps_in(ws, a->kw, a->dil_w, -a->pad_w, (int64_t)a->W + a->pad_w_end);
            else
                n = taps_in(hs, a->kh, a->dil_h, 0, a->H) * taps_in(ws, a->kw, a->dil_w, 0, a->W);
            out[(int64_t)p * a->Q + q] = n > 0 ? (float)n : 1.0f;
        }
}

void mk_mps_adaptive_window(int i, int out, int in, int64_t *lo, int64_t *hi) {
    *lo = (int64_t)i * in / out;
    *hi = ((int64_t)(i + 1) * in + out - 1) / out;
}

// the first tap of k (`dil` apart from `start`) inside [0, n); the start itself if none is
static int64_t first_inside(int64_t start, int k, int dil, int64_t n) {
    for (int i = 0; i < k; i++) {
        int64_t v = start + (int64_t)i * dil;
        if (v >= 0 && v < n) return v;
    }
    return start;
}

void mk_mps_first_taps(const mk_pool2d_args *a, int32_t *out) {
    for (int p = 0; p < a->P; p++) {
        int64_t h = first_inside((int64_t)p * a->stride_h - a->pad_h, a->kh, a->dil_h, a->H);
        for (int q = 0; q < a->Q; q++) {
            int64_t w = first_inside((int64_t)q * a->stride_w - a->pad_w, a->kw, a->dil_w, a->W);
            out[(int64_t)p * a->Q + q] = (int32_t)(h * a->W + w);
        }
    }
}

static mk_mps_matrix stored(int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    mk_mps_matrix m = {rows, cols, ld, stride};
    return m;
}

static int batchable(const mk_mps_matrix *m) {
    return m->stride >= m->rows * m->ld && m->ld > 0 && m->stride % m->ld == 0;
}

void mk_mps_gemm_plan_make(const mk_gemm_args *a, mk_mps_gemm_plan *p) {
    p->a = a->trans_a ? stored(a->K, a->M, a->lda, a->stride_a) : stored(a->M, a->K, a->lda, a->stride_a);
    p->b = a->trans_b ? stored(a->N, a->K, a->ldb, a->stride_b) : stored(a->K, a->N, a->ldb, a->stride_b);
    p->out = stored(a->M, a->N, a->ldc, a->stride_out);
    p->batched = a->batch == 1 || (batchable(&p->a) && batchable(&p->b) && batchable(&p->out));
    p->beta = a->has_c ? (double)a->beta : 1.0;
}
