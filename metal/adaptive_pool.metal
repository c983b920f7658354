// adaptive_pool.metal: adaptive_avg_pool2d (adaptive_pool_avg_<dt>, MK_POOL_ADAPTIVE_AVG)
// over NCHW, one thread per output element (barrier-free). torch's windows: output (p, q)
// averages input rows [p*H/P, ceil((p+1)*H/P)) and columns [q*W/Q, ceil((q+1)*W/Q)), so
// windows overlap when H is not a multiple of P, and P > H repeats rows; every window holds
// at least one element (H, W >= 1). Products p*H are formed in 64 bits (P*H may pass 2^31).
// Dispatch: N*C*P*Q threads (grid counted in threads, any threadgroup size); no macros.
// float32 accumulation for both storage types.
#include "mk_common.h"
#include "mk_args.h"

template <typename T>
kernel void adaptive_pool_avg(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                              constant mk_pool2d_args& a [[buffer(2)]],
                              uint gid [[thread_position_in_grid]])
{
    const int total = a.N * a.C * a.P * a.Q;
    if (int(gid) < total) {
        const int q = int(gid) % a.Q;
        const int p = (int(gid) / a.Q) % a.P;
        const int nc = int(gid) / (a.P * a.Q);
        const device T* xp = x + nc * a.H * a.W;
        const int hs = int(long(p) * a.H / a.P);
        const int he = int((long(p + 1) * a.H + a.P - 1) / a.P);
        const int ws = int(long(q) * a.W / a.Q);
        const int we = int((long(q + 1) * a.W + a.Q - 1) / a.Q);
        float s = 0.0f;
        for (int h = hs; h < he; ++h) {
            for (int w = ws; w < we; ++w) {
                s += float(xp[h * a.W + w]);
            }
        }
        y[gid] = T(s / float((he - hs) * (we - ws)));
    }
}

MK_PER_DTYPE(adaptive_pool_avg)
