// pool_indices.metal: max_pool2d with return_indices (pool_indices_max_<dt>): the maximum
// and where it came from, one thread per output element (barrier-free). pool.metal's max
// kernel stays index-free. torch's rule, tap by tap in row-major window order (rows
// h = p*stride_h - pad_h + i*dil_h inside the input, likewise columns): the window's first
// tap inside the input seeds the maximum; a later tap replaces it when greater or NaN. So
// equal maxima keep the first, the window's last NaN gives the index, a window of -inf only
// points at its first input element (no -inf sentinel: Metal's fast math may fold
// comparisons with infinities). idx: int64, flat into the (H, W) plane (h*W + w).
// Dispatch: N*C*P*Q threads (grid counted in threads, any threadgroup size); no macros.
#include "mk_common.h"
#include "mk_args.h"

template <typename T>
kernel void pool_indices_max(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                             device long* idx [[buffer(2)]],
                             constant mk_pool2d_args& a [[buffer(3)]],
                             uint gid [[thread_position_in_grid]])
{
    const int total = a.N * a.C * a.P * a.Q;
    if (int(gid) < total) {
        const int q = int(gid) % a.Q;
        const int p = (int(gid) / a.Q) % a.P;
        const int nc = int(gid) / (a.P * a.Q);
        const device T* xp = x + nc * a.H * a.W;
        const int h0 = p * a.stride_h - a.pad_h;
        const int w0 = q * a.stride_w - a.pad_w;
        float m = 0.0f;
        int at = -1;
        for (int i = 0; i < a.kh; ++i) {
            const int h = h0 + i * a.dil_h;
            if (h >= 0 && h < a.H) {
                for (int j = 0; j < a.kw; ++j) {
                    const int w = w0 + j * a.dil_w;
                    if (w >= 0 && w < a.W) {
                        const float v = float(xp[h * a.W + w]);
                        if (at < 0 || v > m || isnan(v)) {
                            m = v;
                            at = h * a.W + w;
                        }
                    }
                }
            }
        }
        // a window without input elements cannot occur for torch-valid arguments
        // (padding <= kernel/2); -inf is the maximum of nothing
        y[gid] = T(at >= 0 ? m : -INFINITY);
        idx[gid] = long(at);
    }
}

MK_PER_DTYPE(pool_indices_max)
