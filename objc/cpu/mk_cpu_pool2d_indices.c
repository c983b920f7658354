// mk_cpu_pool2d_indices.c: max_pool2d with return_indices (mk_cpu_pool2d with an indices
// array), one plane per task, window by window. torch's rule, tap by tap in row-major order
// from a maximum of -inf at the window's first tap inside the input: a tap replaces the
// maximum when it is greater or NaN. So equal maxima keep the first, a NaN wins and the
// window's last NaN gives the index, and a window of -inf only points at its first input
// element. Indices are flat into the (H, W) plane: h*W + w, int64.
#include "mk_cpu.h"
#include <math.h>

typedef struct {
    const mk_pool2d_args *a;
    int dtype;
    const void *x;
    void *y;
    int64_t *idx;
    int failed;
} ipool_ctx;

MK_MULTIVERSION static void ipool_window_maxima(const mk_pool2d_args *a, const float *xp,
                                                float *yp, int64_t *ip) {
    long W = a->W;
    for (int p = 0; p < a->P; p++) {
        long h0 = (long)p * a->stride_h - a->pad_h;
        int r0, r1;
        mk_tap_range(h0, a->dil_h, a->H, a->kh, &r0, &r1);
        for (int q = 0; q < a->Q; q++) {
            long w0 = (long)q * a->stride_w - a->pad_w;
            int c0, c1;
            mk_tap_range(w0, a->dil_w, W, a->kw, &c0, &c1);
            float m = -INFINITY;
            long at = (h0 + (long)r0 * a->dil_h) * W + w0 + (long)c0 * a->dil_w;
            for (int r = r0; r < r1; r++) {
                const float *xr = xp + (h0 + (long)r * a->dil_h) * W + w0;
                for (int s = c0; s < c1; s++) {
                    float v = xr[(long)s * a->dil_w];
                    if (v > m || v != v) {
                        m = v;
                        at = (h0 + (long)r * a->dil_h) * W + w0 + (long)s * a->dil_w;
                    }
                }
            }
            yp[(long)p * a->Q + q] = m;
            ip[(long)p * a->Q + q] = at;
        }
    }
}

// plane i: its indices go to the same plane of the int64 array
static void ipool_plane(void *vc, long i, const float *xp, float *yp) {
    const ipool_ctx *t = vc;
    ipool_window_maxima(t->a, xp, yp, t->idx + i * t->a->P * t->a->Q);
}

static void ipool_range(void *vc, long b, long e) {
    ipool_ctx *t = vc;
    if (!mk_pool_planes(t->a, t->dtype, t->x, t->y, b, e, ipool_plane, t)) t->failed = 1;
}

// a: checked by mk_cpu_pool2d (mode MK_POOL_MAX, planes and outputs not empty)
mk_status mk_cpu_max_pool2d_indices(const mk_pool2d_args *a, int dtype, const void *x, void *y,
                                    int64_t *indices) {
    ipool_ctx t = {a, dtype, x, y, indices, 0};
    mk_parallel_for((long)a->N * a->C, mk_pool_grain(a), ipool_range, &t);
    return t.failed ? mk_set_error(MK_ERR_NOMEM, "mk_cpu_pool2d: out of memory") : MK_OK;
}
