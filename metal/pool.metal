// pool.metal: max_pool2d (pool_max_<dt>) and avg_pool2d (pool_avg_<dt>) over NCHW, a tile of
// outputs per threadgroup (mk_pool_tile.h: the input rows staged with vector loads, windows
// reduced from threadgroup memory). Semantics are torch's (mk_pool2d_args):
//   window rows h = p*stride_h - pad_h + i*dil_h, i < kh (likewise columns); dilation is
//   used by max only (avg_pool2d has none: the API passes dil = 1).
//   max: the maximum over the window clipped to the input; NaN propagates.
//   avg: the sum over the clipped window divided by divisor_override if > 0, else by the
//   window clipped to the padded extent (count_include_pad) or to the input; a window with
//   no input element gives 0 (torch does the same).
// float32 accumulation for both storage types; the staged copy is float (exact for half).
#include "mk_common.h"
#include "mk_args.h"
#include "mk_pool_tile.h"

// max over the window at (h0, w0) of the plane at src + off, taps in row-major order: the
// first element seeds the maximum (no -inf sentinel: Metal's fast math may fold comparisons
// with infinities); a NaN, once taken, stays
template <typename S>
inline float pool_max_taps(S src, int off, int h0, int w0, constant mk_pool2d_args& a)
{
    float m = 0.0f;
    bool seen = false;
    for (int i = 0; i < a.kh; ++i) {
        const int h = h0 + i * a.dil_h;
        if (h >= 0 && h < a.H) {
            const int row = off + h * a.W;
            for (int j = 0; j < a.kw; ++j) {
                const int w = w0 + j * a.dil_w;
                if (w >= 0 && w < a.W) {
                    const float v = float(src[row + w]);
                    if (!seen || ((v > m || isnan(v)) && !isnan(m))) {
                        m = v;
                    }
                    seen = true;
                }
            }
        }
    }
    // a window without input elements cannot occur for torch-valid arguments
    // (padding <= kernel/2); -inf is the maximum of nothing
    return seen ? m : -INFINITY;
}

template <typename S>
inline float pool_avg_taps(S src, int off, int hs, int ws, constant mk_pool2d_args& a)
{
    int he = min(hs + a.kh, a.H + a.pad_h_end);
    int we = min(ws + a.kw, a.W + a.pad_w_end);
    const int padded_count = (he - hs) * (we - ws);
    hs = max(hs, 0);
    ws = max(ws, 0);
    he = min(he, a.H);
    we = min(we, a.W);
    const int count = (he > hs && we > ws) ? (he - hs) * (we - ws) : 0;
    const int divisor = a.divisor > 0 ? a.divisor
                                      : (a.count_include_pad != 0 ? padded_count : count);
    // the sum of x / divisor, not the sum then / divisor: a float32 sum of values near
    // FLT_MAX overflows where their average is representable
    const float inv = 1.0f / float(max(divisor, 1));
    float s = 0.0f;
    for (int h = hs; h < he; ++h) {
        const int row = off + h * a.W;
        for (int w = ws; w < we; ++w) {
            s += float(src[row + w]) * inv;
        }
    }
    return count > 0 ? s : 0.0f;
}

template <typename T>
[[max_total_threads_per_threadgroup(1024)]]   // the pool2d space's largest threadgroup
kernel void pool_max(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                     constant mk_pool2d_args& a [[buffer(2)]],
                     constant mk_pool_tile& t [[buffer(3)]],
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
        const float m = t.staged != 0 ? pool_max_taps(stage, off, h0, w0, a)
                                      : pool_max_taps(x, off, h0, w0, a);
        y[at.ybase + u.o] = T(m);
    }
}

template <typename T>
[[max_total_threads_per_threadgroup(1024)]]   // the pool2d space's largest threadgroup
kernel void pool_avg(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                     constant mk_pool2d_args& a [[buffer(2)]],
                     constant mk_pool_tile& t [[buffer(3)]],
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
        const int hs = (at.p0 + u.r) * a.stride_h - a.pad_h;
        const int ws = u.q * a.stride_w - a.pad_w;
        const float s = t.staged != 0 ? pool_avg_taps(stage, off, hs, ws, a)
                                      : pool_avg_taps(x, off, hs, ws, a);
        y[at.ybase + u.o] = T(s);
    }
}

MK_PER_DTYPE(pool_max)
MK_PER_DTYPE(pool_avg)
