// pool.metal: max_pool2d (pool_max_<dt>) and avg_pool2d (pool_avg_<dt>) over NCHW, one
// thread per output element (barrier-free). Semantics are torch's (mk_pool2d_args):
//   window rows h = p*stride_h - pad_h + i*dil_h, i < kh (likewise columns); dilation is
//   used by max only (avg_pool2d has none: the API passes dil = 1).
//   max: the maximum over the window clipped to the input; NaN propagates.
//   avg: the sum over the clipped window divided by divisor_override if > 0, else by the
//   window clipped to the padded extent (count_include_pad) or to the input; a window with
//   no input element gives 0 (torch does the same).
// Dispatch: N*C*P*Q threads (grid counted in threads, any threadgroup size); no macros.
// float32 accumulation for both storage types.
#include "mk_common.h"
#include "mk_args.h"

// Output element gid = (nc*P + p)*Q + q: two divisions per output (was three), none per
// window element (rows of the window are a pointer step apart).
struct pool_pos {
    int q;
    int p;
    int nc;
};

inline pool_pos pool_locate(constant mk_pool2d_args& a, int gid)
{
    pool_pos r;
    const int row = gid / a.Q;
    r.q = gid - row * a.Q;
    r.nc = row / a.P;
    r.p = row - r.nc * a.P;
    return r;
}

template <typename T>
kernel void pool_max(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                     constant mk_pool2d_args& a [[buffer(2)]],
                     uint gid [[thread_position_in_grid]])
{
    const int total = a.N * a.C * a.P * a.Q;
    if (int(gid) < total) {
        const pool_pos at = pool_locate(a, int(gid));
        const int q = at.q, p = at.p, nc = at.nc;
        const device T* xp = x + nc * a.H * a.W;
        const int h0 = p * a.stride_h - a.pad_h;
        const int w0 = q * a.stride_w - a.pad_w;
        // the first element seeds the maximum (no -inf sentinel: Metal's fast math may
        // fold comparisons with infinities); a NaN, once taken, stays
        float m = 0.0f;
        bool seen = false;
        for (int i = 0; i < a.kh; ++i) {
            const int h = h0 + i * a.dil_h;
            if (h >= 0 && h < a.H) {
                const device T* xr = xp + h * a.W;
                for (int j = 0; j < a.kw; ++j) {
                    const int w = w0 + j * a.dil_w;
                    if (w >= 0 && w < a.W) {
                        const float v = float(xr[w]);
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
        y[gid] = T(seen ? m : -INFINITY);
    }
}

template <typename T>
kernel void pool_avg(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                     constant mk_pool2d_args& a [[buffer(2)]],
                     uint gid [[thread_position_in_grid]])
{
    const int total = a.N * a.C * a.P * a.Q;
    if (int(gid) < total) {
        const pool_pos at = pool_locate(a, int(gid));
        const int q = at.q, p = at.p, nc = at.nc;
        const device T* xp = x + nc * a.H * a.W;
        int hs = p * a.stride_h - a.pad_h;
        int ws = q * a.stride_w - a.pad_w;
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
            const device T* xr = xp + h * a.W;
            for (int w = ws; w < we; ++w) {
                s += float(xr[w]) * inv;
            }
        }
        y[gid] = T(count > 0 ? s : 0.0f);
    }
}

MK_PER_DTYPE(pool_max)
MK_PER_DTYPE(pool_avg)
