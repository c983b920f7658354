// adaptive_pool.metal: adaptive_avg_pool2d (adaptive_pool_avg_<dt>, MK_POOL_ADAPTIVE_AVG)
// over NCHW, a tile of outputs per threadgroup (mk_pool_tile.h, as pool.metal). torch's
// windows: output (p, q) averages input rows [p*H/P, ceil((p+1)*H/P)) and columns
// [q*W/Q, ceil((q+1)*W/Q)), so windows overlap when H is not a multiple of P, and P > H
// repeats rows; every window holds at least one element (H, W >= 1). The bounds come from
// the host (gpu/pool.py adaptive_windows: win[p] = rows of output row p, win[P + q] =
// columns of output column q): no division here. float32 accumulation of x/count for both
// storage types.
#include "mk_common.h"
#include "mk_args.h"
#include "mk_pool_tile.h"

template <typename S>
inline float adaptive_taps(S src, int off, int2 hr, int2 wr, int W)
{
    // the sum of x * (1/count): a float32 sum of near-FLT_MAX values would overflow where
    // their average is representable (as avg pooling in pool.metal)
    const float inv = 1.0f / float((hr.y - hr.x) * (wr.y - wr.x));
    float s = 0.0f;
    for (int h = hr.x; h < hr.y; ++h) {
        for (int w = wr.x; w < wr.y; ++w) {
            s += float(src[off + h * W + w]) * inv;
        }
    }
    return s;
}

template <typename T>
[[max_total_threads_per_threadgroup(1024)]]   // the adaptive_pool2d space's largest threadgroup
kernel void adaptive_pool_avg(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                              constant mk_pool2d_args& a [[buffer(2)]],
                              constant mk_pool_tile& t [[buffer(3)]],
                              constant int2* win [[buffer(4)]],
                              uint3 tgp [[threadgroup_position_in_grid]],
                              uint tid [[thread_position_in_threadgroup]],
                              uint nt [[threads_per_threadgroup]])
{
    threadgroup float stage[MK_POOL_STAGE + MK_POOL_SLACK];
    mk_pool_at at = mk_pool_block(a, t, tgp);
    // the tile's rows [p0*H/P, ceil((p0+tp)*H/P)): two divisions per thread, not win[]'s
    // two broadcast loads (products in 64 bits: P*H may pass 2^31)
    const int hlo = int(long(at.p0) * a.H / a.P);
    const int hhi = int((long(at.p0 + at.tp) * a.H + a.P - 1) / a.P) - 1;
    at.base = mk_pool_stage(x, stage, a, t, at, hlo, hhi, tid, nt);
    for (mk_pool_out u = mk_pool_first(a, tid); u.o < at.count; mk_pool_next(u, a, t, nt)) {
        const int off = mk_pool_plane(a, at, u);
        const int2 hr = win[at.p0 + u.r];
        const int2 wr = win[a.P + u.q];
        const float s = t.staged != 0 ? adaptive_taps(stage, off, hr, wr, a.W)
                                      : adaptive_taps(x, off, hr, wr, a.W);
        y[at.ybase + u.o] = T(s);
    }
}

MK_PER_DTYPE(adaptive_pool_avg)
