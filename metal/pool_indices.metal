// pool_indices.metal: max_pool2d with return_indices (pool_indices_max_<dt>): the maximum
// and where it came from, a tile of outputs per threadgroup (mk_pool_tile.h, as
// pool.metal). pool.metal's max kernel stays index-free. torch's rule, tap by tap in
// row-major window order (rows h = p*stride_h - pad_h + i*dil_h inside the input, likewise
// columns): the window's first tap inside the input seeds the maximum; a later tap replaces
// it when greater or NaN. So equal maxima keep the first, the window's last NaN gives the
// index, a window of -inf only points at its first input element (no -inf sentinel: Metal's
// fast math may fold comparisons with infinities). idx: int64, flat into the (H, W) plane
// (h*W + w).
#include "mk_common.h"
#include "mk_args.h"
#include "mk_pool_tile.h"

// the maximum; `at` = h*W + w of it (-1: no tap inside the input)
template <typename S>
inline float pool_argmax_taps(S src, int off, int h0, int w0, constant mk_pool2d_args& a,
                               thread int& at)
{
    float m = 0.0f;
    at = -1;
    for (int i = 0; i < a.kh; ++i) {
        const int h = h0 + i * a.dil_h;
        if (h >= 0 && h < a.H) {
            for (int j = 0; j < a.kw; ++j) {
                const int w = w0 + j * a.dil_w;
                if (w >= 0 && w < a.W) {
                    const float v = float(src[off + h * a.W + w]);
                    if (at < 0 || v > m || isnan(v)) {
                        m = v;
                        at = h * a.W + w;
                    }
                }
            }
        }
    }
    return m;
}

template <typename T>
[[max_total_threads_per_threadgroup(1024)]]   // the pool2d_indices space's largest threadgroup
kernel void pool_indices_max(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                             device long* idx [[buffer(2)]],
                             constant mk_pool2d_args& a [[buffer(3)]],
                             constant mk_pool_tile& t [[buffer(4)]],
                             uint3 tgp [[threadgroup_position_in_grid]],
                             uint tid [[thread_position_in_threadgroup]],
                             uint nt [[threads_per_threadgroup]])
{
    threadgroup float stage[MK_POOL_STAGE + MK_POOL_SLACK];
    mk_pool_at at = mk_pool_block(a, t, tgp);
    const int2 rows = mk_pool_rows(a, at);
    at.base = mk_pool_stage(x, stage, a, t, at, rows.x, rows.y, tid, nt);
    for (mk_pool_out u = mk_pool_first(a, tid); u.o < at.count; mk_pool_next(u, a, t, nt)) {
        const int off = mk_pool_plane(a, at, u);
        const int h0 = (at.p0 + u.r) * a.stride_h - a.pad_h;
        const int w0 = u.q * a.stride_w - a.pad_w;
        int where = -1;
        const float m = t.staged != 0 ? pool_argmax_taps(stage, off, h0, w0, a, where)
                                      : pool_argmax_taps(x, off, h0, w0, a, where);
        y[at.ybase + u.o] = T(where >= 0 ? m : -INFINITY);
        long i = where;
        if (where < 0) {
            // a window of padding only (dilation > 1): -inf, and torch's index of the first
            // tap at h, w >= 0 (a negative start stepped by the dilation; it may lie past the
            // plane). Only here: the divisions stay off the path of every other output.
            const int hs = h0 >= 0 ? h0 : h0 + (a.dil_h - 1 - h0) / a.dil_h * a.dil_h;
            const int ws = w0 >= 0 ? w0 : w0 + (a.dil_w - 1 - w0) / a.dil_w * a.dil_w;
            i = long(hs) * a.W + ws;
        }
        idx[at.ybase + u.o] = i;
    }
}

MK_PER_DTYPE(pool_indices_max)
