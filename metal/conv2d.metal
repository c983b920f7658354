// conv2d.metal: 2-D convolution over NCHW (mk_conv2d_args). x (N, C, H, W), weight
// (K, C/groups, R, S), float32 bias[K], y (N, K, P, Q). Tap (r, s) of output (p, q) reads
// input row p*stride_h - pad_h + r*dil_h and column q*stride_w - pad_w + s*dil_w (zero
// outside the image).
//
// Kernels (T = float "f32" or half "f16"; half is storage only, accumulation is float):
//   conv2d_tiled_<t>, conv2d_simd_<t>   implicit GEMM, per group g (grid z):
//        Y_g (Kg x N*P*Q) = W_g (Kg x Cg*R*S) @ im2col(X_g) (Cg*R*S x N*P*Q),
//        with im2col's columns gathered straight into threadgroup memory, never stored
//        (mk_conv_gather: no division in the K loop), and the bias and activation as the
//        GEMM's epilogue, straight from the accumulators to y. The batch is folded into the GEMM's columns so small images still fill tiles.
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
[[max_total_threads_per_threadgroup(1024)]]   // the depthwise space's largest threadgroup
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

// The im2col gather (B slices, BK x BN at row k0: Bs[kk*LDB + jj]) without divisions in the
// K loop: each thread owns fixed tile columns and walks its rows kd (= c*R*S + r*S + s) by a
// fixed step, carrying (c, r, s) forward with compares instead of dividing kd again.
// Thread layout: NT a multiple of BN: column tid % BN, rows tid / BN + t*MK_CONV_STEP;
// else (BN a multiple of NT, tuning/tiles.py's rule) columns tid + u*NT, every row.
#define MK_CONV_ONE_COL (MK_NT % MK_BN == 0)
#define MK_CONV_NCOLS (MK_CONV_ONE_COL ? 1 : MK_BN / MK_NT)
#define MK_CONV_STEP (MK_CONV_ONE_COL ? min(MK_NT / MK_BN, MK_BK) : 1)
static_assert(MK_CONV_ONE_COL ? (MK_NT / MK_BN >= MK_BK || MK_BK % (MK_NT / MK_BN) == 0)
                              : MK_BN % MK_NT == 0,
              "conv2d: threads per threadgroup and BN must divide one another (and the rows "
              "a pass covers divide BK); see mpskern/tuning/tiles.py");
#define MK_CONV_NO_ROW (-(1 << 28))

// kd decomposed as c*RS + r*S + s (r < R, s < S).
struct mk_conv_tap {
    int c, r, s;
};

inline mk_conv_tap mk_conv_split(int kd, constant mk_conv2d_args& a, thread const mk_conv_view& v)
{
    mk_conv_tap t;
    t.c = kd / v.RS;
    const int rs = kd - t.c * v.RS;
    t.r = rs / a.S;
    t.s = rs - t.r * a.S;
    return t;
}

struct mk_conv_gather {
    int kk0, kd;                  // the thread's first tile row; its next im2col row
    mk_conv_tap at, step;         // kd and MK_CONV_STEP, decomposed
    int jj[MK_CONV_NCOLS];        // its tile columns, and per column: image n's channel 0
    int base[MK_CONV_NCOLS];      // of group g in x, the input row / column of tap (0, 0)
    int h0[MK_CONV_NCOLS];        // (columns past the end: a row far above the image, so
    int w0[MK_CONV_NCOLS];        // every tap reads as padding)
};

// The divisions, once per thread, before the K loop.
inline mk_conv_gather mk_conv_gather_begin(constant mk_conv2d_args& a,
                                           thread const mk_conv_view& v, int j0, int tid)
{
    mk_conv_gather g;
    g.kk0 = MK_CONV_ONE_COL ? tid / MK_BN : 0;
    g.kd = g.kk0;
    g.at = mk_conv_split(g.kd, a, v);
    g.step = mk_conv_split(MK_CONV_STEP, a, v);
    for (int u = 0; u < MK_CONV_NCOLS; ++u) {
        g.jj[u] = MK_CONV_ONE_COL ? tid % MK_BN : tid + u * MK_NT;
        const int j = j0 + g.jj[u];
        g.base[u] = 0;
        g.h0[u] = MK_CONV_NO_ROW;
        g.w0[u] = 0;
        if (j < v.Ncol) {
            const int n = j / v.PQ;
            const int pq = j - n * v.PQ;
            const int p = pq / a.Q;
            g.base[u] = (n * a.C + v.g * v.Cg) * a.H * a.W;
            g.h0[u] = p * a.stride_h - a.pad_h;
            g.w0[u] = (pq - p * a.Q) * a.stride_w - a.pad_w;
        }
    }
    return g;
}

// Gather the next BK x BN slice (zeros outside the image and past Kd), then step on.
template <typename T>
inline void mk_conv_gather_slice(threadgroup T* Bs, thread mk_conv_gather& g,
                                 const device T* x, constant mk_conv2d_args& a,
                                 thread const mk_conv_view& v)
{
    for (int kk = g.kk0; kk < MK_BK; kk += MK_CONV_STEP) {
        const int dh = g.at.r * a.dil_h;
        const int dw = g.at.s * a.dil_w;
        const int plane = g.at.c * a.H;
        for (int u = 0; u < MK_CONV_NCOLS; ++u) {
            const int h = g.h0[u] + dh;
            const int w = g.w0[u] + dw;
            T val = T(0);
            if (g.kd < v.Kd && h >= 0 && h < a.H && w >= 0 && w < a.W) {
                val = x[g.base[u] + (plane + h) * a.W + w];
            }
            Bs[kk * MK_LDB(T) + g.jj[u]] = val;
        }
        g.kd += MK_CONV_STEP;
        g.at.s += g.step.s;
        if (g.at.s >= a.S) {
            g.at.s -= a.S;
            g.at.r += 1;
        }
        g.at.r += g.step.r;
        if (g.at.r >= a.R) {
            g.at.r -= a.R;
            g.at.c += 1;
        }
        g.at.c += g.step.c;
    }
}

// Image n and pixel pq of a GEMM column, stepped forward by d (no division).
struct mk_conv_out {
    int n, pq;
};

inline mk_conv_out mk_conv_out_at(int j, thread const mk_conv_view& v)
{
    mk_conv_out o;
    o.n = j / v.PQ;
    o.pq = j - o.n * v.PQ;
    return o;
}

inline mk_conv_out mk_conv_out_next(mk_conv_out o, int d, thread const mk_conv_view& v)
{
    o.pq += d;
    while (o.pq >= v.PQ) {
        o.pq -= v.PQ;
        o.n += 1;
    }
    return o;
}

// The bias of GEMM row m (output channel g*Kg + m; 0 without bias or past Kg).
inline float mk_conv_bias(int m, const device float* bias, constant mk_conv2d_args& a,
                          thread const mk_conv_view& v)
{
    return a.has_bias != 0 && m < v.Kg ? bias[v.g * v.Kg + m] : 0.0f;
}

// Output element (m, j) of group g's GEMM (o: j's image and pixel): channel g*Kg + m; the
// bias b and the activation are the GEMM's epilogue.
template <typename T>
inline void mk_conv_store(float acc, float b, int m, int j, mk_conv_out o, device T* y,
                          constant mk_conv2d_args& a, thread const mk_conv_view& v)
{
    if (m < v.Kg && j < v.Ncol) {
        y[(o.n * a.K + v.g * v.Kg + m) * v.PQ + o.pq] = T(mk_act(acc + b));
    }
}

// A 1x1, stride-1, unpadded convolution's im2col is x itself: row c, column pq of image n
// at x[(n*C + g*Cg + c)*P*Q + pq]. When a tile's columns lie in one image, its slices are
// staged like a GEMM operand (4-wide on interior tiles) instead of gathered.
template <typename T>
struct mk_conv_plain {
    bool on;
    int q0;                       // the tile's first pixel in its image
    const device T* xp;           // channel 0 of group g in that image
};

template <typename T>
inline mk_conv_plain<T> mk_conv_plain_at(const device T* x, constant mk_conv2d_args& a,
                                      thread const mk_conv_view& v, int j0)
{
    mk_conv_plain<T> c;
    const int n = j0 / v.PQ;
    c.on = a.R == 1 && a.S == 1 && a.stride_h == 1 && a.stride_w == 1 && a.pad_h == 0
           && a.pad_w == 0 && a.P == a.H && a.Q == a.W
           && (min(j0 + MK_BN, v.Ncol) - 1) / v.PQ == n;
    c.q0 = j0 - n * v.PQ;
    c.xp = x + (n * a.C + v.g * v.Cg) * v.PQ;
    return c;
}

// The B slice at k0: staged from x when plain, else gathered.
template <typename T>
inline void mk_conv_load_b(threadgroup T* Bs, thread mk_conv_gather& g, mk_conv_plain<T> pl,
                           const device T* x, constant mk_conv2d_args& a,
                           thread const mk_conv_view& v, int k0, int tid)
{
    if (pl.on) {
        const bool vec = MK_VEC_LOADS && k0 + MK_BK <= v.Kd && pl.q0 + MK_BN <= v.PQ
                         && (v.PQ & 3) == 0;
        mk_stage<MK_BK, MK_BN, MK_LDB(T), 1>(Bs, pl.xp, v.PQ, false, vec, k0, pl.q0, v.Kd,
                                             v.PQ, tid);
    } else {
        mk_conv_gather_slice(Bs, g, x, a, v);
    }
}

// Whether the weight slice at k0 can take unchecked vector loads (mk_stage).
inline bool mk_conv_vec_a(int m0, int k0, thread const mk_conv_view& v)
{
    return MK_VEC_LOADS && m0 + MK_BM <= v.Kg && k0 + MK_BK <= v.Kd && (v.Kd & 3) == 0;
}

template <typename T>
[[max_total_threads_per_threadgroup(MK_NT)]]
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
    threadgroup T As[MK_TILED_A(T)];
    threadgroup T Bs[MK_SIMD_B(T)];

    const mk_conv_view v = mk_conv_locate(tgp.z, a);
    const int m0 = int(tgp.y) * MK_BM;
    const int j0 = int(tgp.x) * MK_BN;
    const device T* wg = w + v.g * v.Kg * v.Kd;
    const int tr = int(sg) / MK_WN * MK_SG_M + int(lane) / 8;
    const int tc = int(sg) % MK_WN * MK_SG_N + int(lane) % 8;

    mk_acc_tiled acc;
    mk_tiled_zero(acc);
    mk_conv_gather g = mk_conv_gather_begin(a, v, j0, int(tid));
    const mk_conv_plain<T> pl = mk_conv_plain_at(x, a, v, j0);
    for (int k0 = 0; k0 < v.Kd; k0 += MK_BK) {
        mk_stage<MK_BM, MK_BK, 1, MK_TLDA(T)>(As, wg, v.Kd, false, false, m0, k0, v.Kg, v.Kd,
                                              int(tid));
        mk_conv_load_b(Bs, g, pl, x, a, v, k0, int(tid));
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mk_tiled_step(As, Bs, acc, tr, tc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    mk_conv_out o = mk_conv_out_at(j0 + tc, v);
    for (int j = 0; j < MK_TN; ++j) {
        for (int i = 0; i < MK_TM; ++i) {
            const int m = m0 + tr + 4 * i;
            mk_conv_store(acc.v[i][j], mk_conv_bias(m, bias, a, v), m, j0 + tc + 8 * j, o, y,
                          a, v);
        }
        o = mk_conv_out_next(o, 8, v);
    }
}

#if MK_SIMD_FITS
template <typename T>
[[max_total_threads_per_threadgroup(MK_NT)]]
kernel void conv2d_simd(const device T* x [[buffer(0)]],
                        const device T* w [[buffer(1)]],
                        const device float* bias [[buffer(2)]],
                        device T* y [[buffer(3)]],
                        constant mk_conv2d_args& a [[buffer(4)]],
                        uint3 tgp [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]])
{
    threadgroup T As[MK_SIMD_A(T)];                  // As[m*LDA + k]
    threadgroup T Bs[MK_SIMD_B(T)];                  // Bs[k*LDB + j]

    const mk_conv_view v = mk_conv_locate(tgp.z, a);
    const int m0 = int(tgp.y) * MK_BM;
    const int j0 = int(tgp.x) * MK_BN;
    const device T* wg = w + v.g * v.Kg * v.Kd;
    const int sr = int(sg) / MK_WN * MK_SG_M;
    const int sc = int(sg) % MK_WN * MK_SG_N;
    const mk_frag_pos f = mk_frag_coord(lane);

    mk_acc_simd acc;
    mk_simd_zero(acc);
    mk_conv_gather g = mk_conv_gather_begin(a, v, j0, int(tid));
    const mk_conv_plain<T> pl = mk_conv_plain_at(x, a, v, j0);
    for (int k0 = 0; k0 < v.Kd; k0 += MK_BK) {
        mk_stage<MK_BM, MK_BK, MK_LDA(T), 1>(As, wg, v.Kd, false, mk_conv_vec_a(m0, k0, v),
                                             m0, k0, v.Kg, v.Kd, int(tid));
        mk_conv_load_b(Bs, g, pl, x, a, v, k0, int(tid));
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mk_simd_step(As, Bs, acc, sr, sc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // fragments straight to device memory, each lane its two elements per fragment; the
    // lane's rows' biases read once
    float b[MK_FM];
    for (int i = 0; i < MK_FM; ++i) {
        b[i] = mk_conv_bias(m0 + sr + 8 * i + f.fr, bias, a, v);
    }
    const int jc = j0 + sc + f.fc;
    mk_conv_out o = mk_conv_out_at(jc, v);
    for (int j = 0; j < MK_FN; ++j) {
        const mk_conv_out o1 = mk_conv_out_next(o, 1, v);
        for (int i = 0; i < MK_FM; ++i) {
            const float2 e = float2(acc.v[i][j].thread_elements());
            const int m = m0 + sr + 8 * i + f.fr;
            mk_conv_store(e.x, b[i], m, jc + 8 * j, o, y, a, v);
            mk_conv_store(e.y, b[i], m, jc + 8 * j + 1, o1, y, a, v);
        }
        o = mk_conv_out_next(o, 8, v);
    }
}
#endif

// The kernels, one per dtype (mk_common.h): <name>_f32, <name>_f16.
MK_PER_DTYPE(conv2d_tiled)
#if MK_SIMD_FITS
MK_PER_DTYPE(conv2d_simd)
#endif

#endif  // MK_BM
