// conv2d.metal: 2-D convolution over NCHW (mk_conv2d_args). x (N, C, H, W), weight
// (K, C/groups, R, S), float32 bias[K], y (N, K, P, Q). Tap (r, s) of output (p, q) reads
// input row p*stride_h - pad_h + r*dil_h and column q*stride_w - pad_w + s*dil_w (zero
// outside the image).
//
// Kernels (T = float "f32" or half "f16"; half is storage only, accumulation is float):
//   conv2d_tiled_<t>, conv2d_simd_<t>   implicit GEMM, per group g (grid z):
//        Y_g (Kg x N*P*Q) = W_g (Kg x Cg*R*S) @ im2col(X_g) (Cg*R*S x N*P*Q),
//        with im2col's columns gathered straight into threadgroup memory, never stored.
//        The batch is folded into the GEMM's columns so small images still fill tiles.
//        Grid (threadgroups): x = ceil(N*P*Q / BN), y = ceil(Kg / BM), z = groups. Needs
//        the GEMM tile macros (mk_gemm_tile.h); the tiled / simd compute is gemm.metal's.
//   conv2d_depthwise_<t>                groups == C: one thread per output element, no
//        threadgroup memory, no tile macros (grid: ceil(N*K*P*Q / threads) threadgroups).
// 1x1 stride-1 convolutions without bias run as a GEMM (gemm.metal); see gpu_ops/conv2d.py.
// Every kernel applies the fused activation (MK_ACT, mk_activation.h) after the bias, in its
// own store.
#include "mk_common.h"
#include "mk_args.h"
#include "mk_activation.h"

template <typename T>
kernel void conv2d_depthwise(const device T* x [[buffer(0)]],
                             const device T* w [[buffer(1)]],
                             const device float* bias [[buffer(2)]],
                             device T* y [[buffer(3)]],
                             constant mk_conv2d_args& a [[buffer(4)]],
                             uint gid [[thread_position_in_grid]])
{
    const int PQ = a.P * a.Q;
    const int i = int(gid);
    if (i < a.N * a.K * PQ) {
        const int nk = i / PQ;                 // n*K + k
        const int pq = i - nk * PQ;
        const int n = nk / a.K;
        const int k = nk - n * a.K;
        const int p = pq / a.Q;
        const int q = pq - p * a.Q;
        const int c = k / (a.K / a.C);         // groups == C: K/C outputs per input channel
        const int h0 = p * a.stride_h - a.pad_h;
        const int w0 = q * a.stride_w - a.pad_w;
        const device T* xc = x + (n * a.C + c) * a.H * a.W;
        const device T* wk = w + k * a.R * a.S;
        // every tap is multiplied, padded ones by 0: a NaN/Inf weight there gives NaN, as
        // torch and the reference do (0 * Inf)
        float acc = 0.0f;
        for (int r = 0; r < a.R; ++r) {
            const int h = h0 + r * a.dil_h;
            const bool row_in = h >= 0 && h < a.H;
            for (int s = 0; s < a.S; ++s) {
                const int ww = w0 + s * a.dil_w;
                const float xv = row_in && ww >= 0 && ww < a.W ? float(xc[h * a.W + ww]) : 0.0f;
                acc += xv * float(wk[r * a.S + s]);
            }
        }
        if (a.has_bias != 0) {
            acc += bias[k];
        }
        y[i] = T(mk_act(acc));
    }
}

MK_PER_DTYPE(conv2d_depthwise)

#if defined(MK_BM)   // the implicit-GEMM kernels need the GEMM tile macros
#include "mk_gemm_tile.h"

// The GEMM view of group g.
struct mk_conv_view {
    int g, Cg, Kg, RS, PQ, Kd, Ncol;
};

inline mk_conv_view mk_conv_locate(uint z, constant mk_conv2d_args& a)
{
    mk_conv_view v;
    v.g = int(z);
    v.Cg = a.C / a.groups;
    v.Kg = a.K / a.groups;
    v.RS = a.R * a.S;
    v.PQ = a.P * a.Q;
    v.Kd = v.Cg * v.RS;
    v.Ncol = a.N * v.PQ;
    return v;
}

// What the gather needs about output column j of a tile, computed once per threadgroup
// (the divisions by P*Q and Q stay out of the K loop): the offset of image n's first
// channel of group g in x, and the input row/column of tap (0, 0). Columns past the end
// get a row far above the image, so every tap reads as padding.
struct mk_conv_col {
    int base, h0, w0;
};

#define MK_CONV_NO_ROW (-(1 << 28))
static_assert(MK_AB_FLOATS * 4 + MK_BN * 12 <= 32768,
              "at most 32 KiB of threadgroup memory (tiles + column table)");
#define MK_CONV_SIMD_FITS (MK_SIMD_FITS && MK_SMEM_FLOATS * 4 + MK_BN * 12 <= 32768)

inline void mk_conv_fill_cols(threadgroup mk_conv_col* cols, constant mk_conv2d_args& a,
                              thread const mk_conv_view& v, int j0, int tid)
{
    for (int jj = tid; jj < MK_BN; jj += MK_NT) {
        const int j = j0 + jj;
        mk_conv_col c;
        c.base = 0;
        c.h0 = MK_CONV_NO_ROW;
        c.w0 = 0;
        if (j < v.Ncol) {
            const int n = j / v.PQ;
            const int pq = j - n * v.PQ;
            const int p = pq / a.Q;
            const int q = pq - p * a.Q;
            c.base = (n * a.C + v.g * v.Cg) * a.H * a.W;
            c.h0 = p * a.stride_h - a.pad_h;
            c.w0 = q * a.stride_w - a.pad_w;
        }
        cols[jj] = c;
    }
}

// Gather the BK x BN slice of im2col(X_g) at row k0 into Bs[k*BN + j] (zeros outside).
template <typename T>
inline void mk_conv_load_b(threadgroup float* Bs, const threadgroup mk_conv_col* cols,
                           const device T* x, constant mk_conv2d_args& a,
                           thread const mk_conv_view& v, int k0, int tid)
{
    for (int i = tid; i < MK_BK * MK_BN; i += MK_NT) {
        const int kk = i / MK_BN;
        const int jj = i - kk * MK_BN;
        const int kd = k0 + kk;
        float val = 0.0f;
        if (kd < v.Kd) {
            const int c = kd / v.RS;
            const int rs = kd - c * v.RS;
            const int r = rs / a.S;
            const int s = rs - r * a.S;
            const mk_conv_col col = cols[jj];
            const int h = col.h0 + r * a.dil_h;
            const int w = col.w0 + s * a.dil_w;
            if (h >= 0 && h < a.H && w >= 0 && w < a.W) {
                val = float(x[col.base + (c * a.H + h) * a.W + w]);
            }
        }
        Bs[kk * MK_BN + jj] = val;
    }
}

// Output element (m, j) of group g's GEMM: channel g*Kg + m, image j / PQ, pixel j % PQ.
template <typename T>
inline void mk_conv_store(float acc, int m, int j, const device float* bias, device T* y,
                          constant mk_conv2d_args& a, thread const mk_conv_view& v)
{
    const int k = v.g * v.Kg + m;
    const int n = j / v.PQ;
    const int pq = j - n * v.PQ;
    if (a.has_bias != 0) {
        acc += bias[k];
    }
    y[(n * a.K + k) * v.PQ + pq] = T(mk_act(acc));
}

template <typename T>
kernel void conv2d_tiled(const device T* x [[buffer(0)]],
                         const device T* w [[buffer(1)]],
                         const device float* bias [[buffer(2)]],
                         device T* y [[buffer(3)]],
                         constant mk_conv2d_args& a [[buffer(4)]],
                         uint3 tgp [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float As[MK_BK * MK_BM];
    threadgroup float Bs[MK_BK * MK_BN];
    threadgroup mk_conv_col cols[MK_BN];

    const mk_conv_view v = mk_conv_locate(tgp.z, a);
    const int m0 = int(tgp.y) * MK_BM;
    const int j0 = int(tgp.x) * MK_BN;
    const device T* wg = w + v.g * v.Kg * v.Kd;
    const int tr = int(sg) / MK_WN * MK_SG_M + int(lane) / 8;
    const int tc = int(sg) % MK_WN * MK_SG_N + int(lane) % 8;

    mk_acc_tiled acc;
    mk_tiled_zero(acc);
    mk_conv_fill_cols(cols, a, v, j0, int(tid));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int k0 = 0; k0 < v.Kd; k0 += MK_BK) {
        mk_load_tile(As, 1, MK_BM, wg, v.Kd, false, MK_BM, MK_BK, m0, k0, v.Kg, v.Kd,
                     int(tid), MK_NT);
        mk_conv_load_b(Bs, cols, x, a, v, k0, int(tid));
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mk_tiled_step(As, Bs, acc, tr, tc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (int i = 0; i < MK_TM; ++i) {
        for (int j = 0; j < MK_TN; ++j) {
            const int m = m0 + tr + 4 * i;
            const int col = j0 + tc + 8 * j;
            if (m < v.Kg && col < v.Ncol) {
                mk_conv_store(acc.v[i][j], m, col, bias, y, a, v);
            }
        }
    }
}

#if MK_CONV_SIMD_FITS   // the simd kernel also holds the output tile
template <typename T>
kernel void conv2d_simd(const device T* x [[buffer(0)]],
                        const device T* w [[buffer(1)]],
                        const device float* bias [[buffer(2)]],
                        device T* y [[buffer(3)]],
                        constant mk_conv2d_args& a [[buffer(4)]],
                        uint3 tgp [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float smem[MK_SMEM_FLOATS];
    threadgroup mk_conv_col cols[MK_BN];

    threadgroup float* As = smem;                    // As[m*BK + k]
    threadgroup float* Bs = smem + MK_BM * MK_BK;    // Bs[k*BN + j]
    const mk_conv_view v = mk_conv_locate(tgp.z, a);
    const int m0 = int(tgp.y) * MK_BM;
    const int j0 = int(tgp.x) * MK_BN;
    const device T* wg = w + v.g * v.Kg * v.Kd;
    const int sr = int(sg) / MK_WN * MK_SG_M;
    const int sc = int(sg) % MK_WN * MK_SG_N;

    mk_acc_simd acc;
    mk_simd_zero(acc);
    mk_conv_fill_cols(cols, a, v, j0, int(tid));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int k0 = 0; k0 < v.Kd; k0 += MK_BK) {
        mk_load_tile(As, MK_BK, 1, wg, v.Kd, false, MK_BM, MK_BK, m0, k0, v.Kg, v.Kd,
                     int(tid), MK_NT);
        mk_conv_load_b(Bs, cols, x, a, v, k0, int(tid));
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mk_simd_step(As, Bs, acc, sr, sc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    mk_simd_store(acc, smem, sr, sc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int i = int(tid); i < MK_BM * MK_BN; i += MK_NT) {
        const int r = i / MK_BN;
        const int m = m0 + r;
        const int col = j0 + i - r * MK_BN;
        if (m < v.Kg && col < v.Ncol) {
            mk_conv_store(smem[i], m, col, bias, y, a, v);
        }
    }
}
#endif

// The kernels, one per dtype (mk_common.h): <name>_f32, <name>_f16.
MK_PER_DTYPE(conv2d_tiled)
#if MK_CONV_SIMD_FITS
MK_PER_DTYPE(conv2d_simd)
#endif

#endif  // MK_BM
