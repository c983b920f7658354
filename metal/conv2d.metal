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

// Two ways to lay out a threadgroup's BN output columns (gpu/conv2d.py picks one per call
// and compiles it in as MK_CONV_HALO):
//   MK_CONV_HALO 0: BN consecutive GEMM columns j = n*P*Q + p*Q + q (the batch folded in;
//       grid x = ceil(N*P*Q / BN)); B slices gathered from x, one element per thread.
//   MK_CONV_HALO 1: a 2-D tile of TP = BN/8 output rows x 8 output columns of one image
//       (column jj is pixel (p0 + jj/8, q0 + jj%8); grid x = N * ceil(P/TP) * ceil(Q/8)).
//       The input rows and columns the tile reads (its halo) are staged per slice of CB
//       input channels with aligned 4-wide loads, and the B slices are built from that
//       threadgroup copy: x is read from device memory once per channel slice, at vector
//       width, instead of R*S scalar gathers of every element.
#ifndef MK_CONV_HALO
#define MK_CONV_HALO 0
#endif
#ifndef MK_CONV_HALO_CAP
#define MK_CONV_HALO_CAP 2560     // halo elements (tuning/tiles.py HALO_CAP, passed in)
#endif
#define MK_CONV_TP (MK_BN / 8)

struct mk_conv_tile {
    int j0;                       // halo 0: the first GEMM column
    int n, p0, q0;                // halo 1: the image and the tile's first output pixel
};

inline mk_conv_tile mk_conv_tile_at(uint x, constant mk_conv2d_args& a)
{
    mk_conv_tile t;
    t.j0 = int(x) * MK_BN;
    t.n = 0;
    t.p0 = 0;
    t.q0 = 0;
    if (MK_CONV_HALO) {
        const int tq = (a.Q + 7) / 8;
        const int per_image = (a.P + MK_CONV_TP - 1) / MK_CONV_TP * tq;
        t.n = int(x) / per_image;
        const int rest = int(x) - t.n * per_image;
        const int tp = rest / tq;
        t.p0 = tp * MK_CONV_TP;
        t.q0 = (rest - tp * tq) * 8;
    }
    return t;
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

// The halo of a 2-D tile (MK_CONV_HALO 1): input rows hlo .. hlo+HR-1 of each channel of
// the slice, and per row the NV aligned 4-wide chunks from the one holding column wa (the
// tile's first input column): row hr of slice channel cl at halo[(cl*HR + hr)*HLD], input
// column w of input row h at ((row h's offset in x + wa) & 3) + w - wa (chunks keep their
// alignment: stored 4-wide as loaded, whatever W is). HLD is 4 modulo 8 elements: the 8
// output rows of a tile, which lanes of one SIMD-group read together (mk_conv_halo_slice),
// start in 8 different 4-bank groups. gpu/conv2d.py's halo_plane is the same arithmetic
// (it decides that CB >= 1 channels fit in MK_CONV_HALO_CAP).
struct mk_conv_halo {
    int HR, NV, HLD, PL, CB, hlo, wa, G, total;   // G: x offset of (channel 0, hlo, wa)
    int last;                                     // x's last whole 4-aligned chunk
    int cl0, hr0, ch0, drow, dch;     // the thread's first (channel, row, chunk) and its step
};

inline mk_conv_halo mk_conv_halo_at(constant mk_conv2d_args& a, thread const mk_conv_view& v,
                                    thread const mk_conv_tile& t, int tid)
{
    mk_conv_halo h = {};
    if (!MK_CONV_HALO) {
        return h;
    }
    h.HR = (MK_CONV_TP - 1) * a.stride_h + (a.R - 1) * a.dil_h + 1;
    const int span = 7 * a.stride_w + (a.S - 1) * a.dil_w + 1;
    h.NV = (span + 6) >> 2;
    h.HLD = (4 * h.NV) | 4;
    h.PL = h.HR * h.HLD;
    // whole slices of BK im2col rows per channel slice where that fits, else a multiple of
    // 4 channels (so every slice of the weights starts 4-aligned)
    int cb = max(1, MK_CONV_HALO_CAP / h.PL);
    cb = cb >= MK_BK ? cb - cb % MK_BK : (cb >= 4 ? cb & ~3 : cb);
    h.CB = min(cb, v.Cg);
    h.hlo = t.p0 * a.stride_h - a.pad_h;
    h.wa = t.q0 * a.stride_w - a.pad_w;
    h.G = (t.n * a.C + v.g * v.Cg) * a.H * a.W + h.hlo * a.W + h.wa;
    h.total = a.N * a.C * a.H * a.W;
    h.last = (h.total - 4) & ~3;
    const int row = tid / h.NV;
    h.ch0 = tid - row * h.NV;
    h.cl0 = row / h.HR;
    h.hr0 = row - h.cl0 * h.HR;
    h.drow = MK_NT / h.NV;
    h.dch = MK_NT - h.drow * h.NV;
    return h;
}

struct mk_conv_gather {
    int kk0, kd;                  // the thread's first tile row; its next im2col row
    mk_conv_tap at, at0, step;    // kd, kk0 (where every channel slice restarts), MK_CONV_STEP
    int jj[MK_CONV_NCOLS];        // its tile columns, and per column: image n's channel 0
    int base[MK_CONV_NCOLS];      // of group g in x, the input row / column of tap (0, 0)
    int h0[MK_CONV_NCOLS];        // (columns past the end: a row far above the image, so
    int w0[MK_CONV_NCOLS];        // every tap reads as padding)
};

// The divisions, once per thread, before the K loop.
inline mk_conv_gather mk_conv_gather_begin(constant mk_conv2d_args& a,
                                           thread const mk_conv_view& v,
                                           thread const mk_conv_tile& t, int tid)
{
    mk_conv_gather g;
    g.kk0 = MK_CONV_ONE_COL ? tid / MK_BN : 0;
    g.kd = g.kk0;
    g.at0 = mk_conv_split(g.kk0, a, v);
    g.at = g.at0;
    g.step = mk_conv_split(MK_CONV_STEP, a, v);
    for (int u = 0; u < MK_CONV_NCOLS; ++u) {
        g.jj[u] = MK_CONV_ONE_COL ? tid % MK_BN : tid + u * MK_NT;
        g.base[u] = 0;
        g.h0[u] = MK_CONV_NO_ROW;
        g.w0[u] = 0;
        int n = t.n, p = t.p0 + (g.jj[u] >> 3), q = t.q0 + (g.jj[u] & 7);
        bool in = p < a.P && q < a.Q;
        if (!MK_CONV_HALO) {
            const int j = t.j0 + g.jj[u];
            in = j < v.Ncol;
            n = j / v.PQ;
            const int pq = j - n * v.PQ;
            p = pq / a.Q;
            q = pq - p * a.Q;
        }
        if (in) {
            g.base[u] = (n * a.C + v.g * v.Cg) * a.H * a.W;
            g.h0[u] = p * a.stride_h - a.pad_h;
            g.w0[u] = q * a.stride_w - a.pad_w;
        }
    }
    return g;
}

// Back to the thread's first row of the channel slice starting at channel c0.
inline void mk_conv_gather_restart(thread mk_conv_gather& g, int c0,
                                   thread const mk_conv_view& v)
{
    g.at = g.at0;
    g.at.c += c0;
    g.kd = c0 * v.RS + g.kk0;
}

// Stage the halo of channels [c0, c0 + CB) of image n (xg: its channel 0 of group g, an
// offset into x). Rows outside the image are skipped (the gather reads them as padding).
template <typename T>
inline void mk_conv_halo_stage(threadgroup T* Hs, thread const mk_conv_halo& h, int c0,
                               int xg, const device T* x, constant mk_conv2d_args& a,
                               thread const mk_conv_view& v, int tid)
{
    const int items = min(h.CB, v.Cg - c0) * h.HR * h.NV;
    int cl = h.cl0, hr = h.hr0, ch = h.ch0;
    for (int i = tid; i < items; i += MK_NT) {
        const int ih = h.hlo + hr;
        if (ih >= 0 && ih < a.H) {
            const int at = ((xg + ((c0 + cl) * a.H + ih) * a.W + h.wa) & ~3) + 4 * ch;
            threadgroup T* d = Hs + (cl * h.HR + hr) * h.HLD + 4 * ch;
            // one aligned 4-wide copy from a chunk inside x (for chunks reaching past its
            // ends the first or last whole one, then redone element by element)
            const int from = max(min(at, h.last), 0);
            if (h.last >= 0) {
                *reinterpret_cast<threadgroup typename mk_vec<T>::v4*>(d) =
                    *reinterpret_cast<const device typename mk_vec<T>::v4*>(x + from);
            }
            if (from != at || h.last < 0 || !MK_VEC_LOADS) {
                for (int e = 0; e < 4; ++e) {
                    d[e] = at + e >= 0 && at + e < h.total ? x[at + e] : T(0);
                }
            }
        }
        ch += h.dch;
        hr += h.drow;
        if (ch >= h.NV) {
            ch -= h.NV;
            hr += 1;
        }
        while (hr >= h.HR) {
            hr -= h.HR;
            cl += 1;
        }
    }
}

// Gather the next BK x BN slice from x (zeros outside the image and from row kend on), then
// step on.
template <typename T>
inline void mk_conv_gather_slice(threadgroup T* Bs, thread mk_conv_gather& g,
                                 const device T* x, int kend, constant mk_conv2d_args& a,
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
            if (g.kd < kend && h >= 0 && h < a.H && w >= 0 && w < a.W) {
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

// The B slices of a 2-D tile, built from the halo (MK_CONV_HALO 1): item i of a slice is
// im2col row kk = i / TP over the 8 pixels of output row pl = i % TP of the tile, one
// thread each (MK_CONV_ITEMS per thread): one tap decomposition and one row check per 8
// elements, read from the halo and stored to Bs as two 4-wide stores. Each item carries
// its tap (c, r, s) from slice to slice by BK (compares, no division).
#define MK_CONV_HITEMS (MK_BK * MK_CONV_TP)
#define MK_CONV_ITEMS (MK_CONV_HITEMS > MK_NT ? MK_CONV_HITEMS / MK_NT : 1)
static_assert(!MK_CONV_HALO || MK_CONV_HITEMS % MK_NT == 0 || MK_NT % MK_CONV_HITEMS == 0,
              "conv2d halo tiles: threads and BK*BN/8 must divide one another "
              "(gpu/conv2d.py uses_halo)");

struct mk_conv_hitems {
    int kk[MK_CONV_ITEMS], pl[MK_CONV_ITEMS], kd[MK_CONV_ITEMS];
    mk_conv_tap at[MK_CONV_ITEMS], at0[MK_CONV_ITEMS];
    mk_conv_tap step;             // BK decomposed
    bool on;                      // whether this thread has items (NT > BK*TP: some idle)
};

inline mk_conv_hitems mk_conv_hitems_at(constant mk_conv2d_args& a,
                                        thread const mk_conv_view& v, int tid)
{
    mk_conv_hitems it = {};
    if (!MK_CONV_HALO) {
        return it;
    }
    it.on = tid < MK_CONV_HITEMS;
    it.step = mk_conv_split(MK_BK, a, v);
    for (int u = 0; u < MK_CONV_ITEMS; ++u) {
        const int i = tid + u * MK_NT;
        it.kk[u] = i / MK_CONV_TP;
        it.pl[u] = i - it.kk[u] * MK_CONV_TP;
        it.at0[u] = mk_conv_split(it.kk[u], a, v);
    }
    return it;
}

inline void mk_conv_hitems_restart(thread mk_conv_hitems& it, int c0,
                                   thread const mk_conv_view& v)
{
    for (int u = 0; u < MK_CONV_ITEMS; ++u) {
        it.at[u] = it.at0[u];
        it.at[u].c += c0;
        it.kd[u] = c0 * v.RS + it.kk[u];
    }
}

template <typename T>
inline void mk_conv_halo_slice(threadgroup T* Bs, thread mk_conv_hitems& it,
                               const threadgroup T* Hs, thread const mk_conv_halo& hl, int c0,
                               int kend, constant mk_conv2d_args& a,
                               thread const mk_conv_view& v)
{
    typedef typename mk_vec<T>::v4 V;
    for (int u = 0; u < MK_CONV_ITEMS && it.on; ++u) {
        const mk_conv_tap t = it.at[u];
        const int hr = it.pl[u] * a.stride_h + t.r * a.dil_h;      // halo row
        const int h = hl.hlo + hr;
        const int w = hl.wa + t.s * a.dil_w;                         // pixel 0's input column
        // the halo index of pixel 0: its row, that row's alignment offset, the tap's column
        const int src = (t.c - c0) * hl.PL + hr * hl.HLD
                        + ((hl.G + (t.c * a.H + hr) * a.W) & 3) + t.s * a.dil_w;
        const bool row = it.kd[u] < kend && h >= 0 && h < a.H;
        V lo = V(T(0)), hi = V(T(0));
        // float, stride 1: the 4 rows kk of a SIMD-group read their 8 pixels rotated so
        // that at each step their words lie in 4 different banks modulo 4 (their 8 output
        // rows are 4 banks apart already: HLD): no bank conflict whatever the taps (half:
        // two elements per bank word, conflict-free unrotated)
        const int rot = sizeof(T) == 4 && a.stride_w == 1 ? (it.kk[u] - src) & 3 : 0;
        const bool inside = w >= 0 && w + 7 * a.stride_w < a.W;
        for (int t8 = 0; t8 < 8 && row; ++t8) {
            const int e = (t8 + rot) & 7;
            const int we = w + e * a.stride_w;
            const T val = inside || (we >= 0 && we < a.W) ? Hs[src + e * a.stride_w] : T(0);
            if (e < 4) {
                lo[e] = val;
            } else {
                hi[e - 4] = val;
            }
        }
        // odd rows store their second half first: the lanes of one store then cover every
        // bank for half too (its 8-element rows are 4 banks apart, not 8)
        threadgroup T* d = Bs + it.kk[u] * MK_LDB(T) + 8 * it.pl[u];
        const int odd = sizeof(T) == 2 ? it.kk[u] & 1 : 0;
        *reinterpret_cast<threadgroup V*>(d + 4 * odd) = odd ? hi : lo;
        *reinterpret_cast<threadgroup V*>(d + 4 - 4 * odd) = odd ? lo : hi;
        // on by BK rows
        it.kd[u] += MK_BK;
        mk_conv_tap n = t;
        n.s += it.step.s;
        if (n.s >= a.S) {
            n.s -= a.S;
            n.r += 1;
        }
        n.r += it.step.r;
        while (n.r >= a.R) {
            n.r -= a.R;
            n.c += 1;
        }
        n.c += it.step.c;
        it.at[u] = n;
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

// The image and pixel of tile column jj: 2-D tiles directly, else from o (column j's,
// stepped by the caller); pixel -1 past the output.
inline mk_conv_out mk_conv_pixel(thread const mk_conv_tile& t, int jj, mk_conv_out o,
                                 constant mk_conv2d_args& a, thread const mk_conv_view& v)
{
    if (MK_CONV_HALO) {
        const int p = t.p0 + (jj >> 3);
        const int q = t.q0 + (jj & 7);
        o.n = t.n;
        o.pq = p < a.P && q < a.Q ? p * a.Q + q : -1;
    } else if (t.j0 + jj >= v.Ncol) {
        o.pq = -1;
    }
    return o;
}

// The bias of GEMM row m (output channel g*Kg + m; 0 without bias or past Kg).
inline float mk_conv_bias(int m, const device float* bias, constant mk_conv2d_args& a,
                          thread const mk_conv_view& v)
{
    return a.has_bias != 0 && m < v.Kg ? bias[v.g * v.Kg + m] : 0.0f;
}

// Output element (m, o) of group g's GEMM: channel g*Kg + m of image o.n at pixel o.pq;
// the bias b and the activation are the GEMM's epilogue.
template <typename T>
inline void mk_conv_store(float acc, float b, int m, mk_conv_out o, device T* y,
                          constant mk_conv2d_args& a, thread const mk_conv_view& v)
{
    if (m < v.Kg && o.pq >= 0) {
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
    c.on = !MK_CONV_HALO && a.R == 1 && a.S == 1 && a.stride_h == 1 && a.stride_w == 1
           && a.pad_h == 0 && a.pad_w == 0 && a.P == a.H && a.Q == a.W
           && (min(j0 + MK_BN, v.Ncol) - 1) / v.PQ == n;
    c.q0 = j0 - n * v.PQ;
    c.xp = x + (n * a.C + v.g * v.Cg) * v.PQ;
    return c;
}

// The B slice at k0: staged from x when plain, else gathered (from the halo or x).
template <typename T>
inline void mk_conv_load_b(threadgroup T* Bs, thread mk_conv_gather& g, mk_conv_plain<T> pl,
                           thread mk_conv_hitems& it, const device T* x,
                           const threadgroup T* Hs, thread const mk_conv_halo& hl, int c0,
                           int kend, constant mk_conv2d_args& a, thread const mk_conv_view& v,
                           int k0, int tid)
{
    if (MK_CONV_HALO) {
        mk_conv_halo_slice(Bs, it, Hs, hl, c0, kend, a, v);
    } else if (pl.on) {
        const bool vec = MK_VEC_LOADS && k0 + MK_BK <= v.Kd && pl.q0 + MK_BN <= v.PQ
                         && (v.PQ & 3) == 0;
        mk_stage<MK_BK, MK_BN, MK_LDB(T), 1>(Bs, pl.xp, v.PQ, false, vec, k0, pl.q0, v.Kd,
                                             v.PQ, tid);
    } else {
        mk_conv_gather_slice(Bs, g, x, kend, a, v);
    }
}

// Whether the weight slice at k0 can take unchecked vector loads (mk_stage): whole rows of
// the tile, 4-aligned; the columns from its channel slice's end kend (a multiple of 4
// then, like Kd) read as 0 and are not loaded past it.
inline bool mk_conv_vec_a(int m0, int k0, int kend, thread const mk_conv_view& v)
{
    return MK_VEC_LOADS && m0 + MK_BM <= v.Kg && ((v.Kd | k0 | kend) & 3) == 0;
}

// The K loop both variants share: per channel slice [c0, c0 + CB) (one slice of all Cg
// channels without the halo), the halo staged once, then BK-deep slices of the weights
// (As, staged by STAGE_A) and of im2col (Bs) and the variant's STEP over them.
#define MK_CONV_K_LOOP(STAGE_A, STEP)                                                       \
    const mk_conv_halo hl = mk_conv_halo_at(a, v, t, int(tid));                             \
    mk_conv_gather g = mk_conv_gather_begin(a, v, t, int(tid));                             \
    mk_conv_hitems it = mk_conv_hitems_at(a, v, int(tid));                                  \
    const mk_conv_plain<T> pl = mk_conv_plain_at(x, a, v, t.j0);                            \
    const int cb = MK_CONV_HALO ? hl.CB : max(v.Cg, 1);                                     \
    for (int c0 = 0; c0 < v.Cg; c0 += cb) {                                                 \
        const int kend = min(c0 + cb, v.Cg) * v.RS;                                         \
        mk_conv_gather_restart(g, c0, v);                                                   \
        mk_conv_hitems_restart(it, c0, v);                                                  \
        if (MK_CONV_HALO) {                                                                 \
            mk_conv_halo_stage(Hs, hl, c0, (t.n * a.C + v.g * v.Cg) * a.H * a.W, x, a, v,   \
                               int(tid));                                                   \
            threadgroup_barrier(mem_flags::mem_threadgroup);                                \
        }                                                                                   \
        for (int k0 = c0 * v.RS; k0 < kend; k0 += MK_BK) {                                  \
            STAGE_A;                                                                        \
            mk_conv_load_b(Bs, g, pl, it, x, Hs, hl, c0, kend, a, v, k0, int(tid));         \
            threadgroup_barrier(mem_flags::mem_threadgroup);                                \
            STEP;                                                                           \
            threadgroup_barrier(mem_flags::mem_threadgroup);                                \
        }                                                                                   \
    }

// threadgroup memory for the halo (one element when there is none: arrays are not empty)
#define MK_CONV_HALO_ELEMS (MK_CONV_HALO ? MK_CONV_HALO_CAP : 4)
static_assert(MK_TILED_STAGE_BYTES + 4 * MK_CONV_HALO_ELEMS <= 32768,
              "conv2d: staging and halo exceed 32 KiB of threadgroup memory");
#define MK_CONV_SIMD_FITS (MK_SIMD_FITS && MK_STAGE_BYTES + 4 * MK_CONV_HALO_ELEMS <= 32768)

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
    threadgroup T Hs[MK_CONV_HALO_ELEMS];

    const mk_conv_view v = mk_conv_locate(tgp.z, a);
    const mk_conv_tile t = mk_conv_tile_at(tgp.x, a);
    const int m0 = int(tgp.y) * MK_BM;
    const device T* wg = w + v.g * v.Kg * v.Kd;
    const int tr = int(sg) / MK_WN * MK_SG_M + int(lane) / 8;
    const int tc = int(sg) % MK_WN * MK_SG_N + int(lane) % 8;

    mk_acc_tiled acc;
    mk_tiled_zero(acc);
    MK_CONV_K_LOOP((mk_stage<MK_BM, MK_BK, 1, MK_TLDA(T)>(As, wg, v.Kd, false, false, m0, k0,
                                                          v.Kg, kend, int(tid))),
                   mk_tiled_step(As, Bs, acc, tr, tc))
    mk_conv_out o = mk_conv_out_at(MK_CONV_HALO ? 0 : t.j0 + tc, v);
    for (int j = 0; j < MK_TN; ++j) {
        const mk_conv_out oj = mk_conv_pixel(t, tc + 8 * j, o, a, v);
        for (int i = 0; i < MK_TM; ++i) {
            const int m = m0 + tr + 4 * i;
            mk_conv_store(acc.v[i][j], mk_conv_bias(m, bias, a, v), m, oj, y, a, v);
        }
        if (!MK_CONV_HALO) {
            o = mk_conv_out_next(o, 8, v);
        }
    }
}

#if MK_CONV_SIMD_FITS
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
    threadgroup T Hs[MK_CONV_HALO_ELEMS];            // the halo (MK_CONV_HALO 1)

    const mk_conv_view v = mk_conv_locate(tgp.z, a);
    const mk_conv_tile t = mk_conv_tile_at(tgp.x, a);
    const int m0 = int(tgp.y) * MK_BM;
    const device T* wg = w + v.g * v.Kg * v.Kd;
    const int sr = int(sg) / MK_WN * MK_SG_M;
    const int sc = int(sg) % MK_WN * MK_SG_N;
    const mk_frag_pos f = mk_frag_coord(lane);

    mk_acc_simd acc;
    mk_simd_zero(acc);
    MK_CONV_K_LOOP((mk_stage<MK_BM, MK_BK, MK_LDA(T), 1>(As, wg, v.Kd, false,
                                                         mk_conv_vec_a(m0, k0, kend, v), m0,
                                                         k0, v.Kg, kend, int(tid))),
                   mk_simd_step(As, Bs, acc, sr, sc))
    // fragments straight to device memory, each lane its two elements per fragment; the
    // lane's rows' biases read once
    float b[MK_FM];
    for (int i = 0; i < MK_FM; ++i) {
        b[i] = mk_conv_bias(m0 + sr + 8 * i + f.fr, bias, a, v);
    }
    const int jc = sc + f.fc;
    mk_conv_out o = mk_conv_out_at(MK_CONV_HALO ? 0 : t.j0 + jc, v);
    for (int j = 0; j < MK_FN; ++j) {
        const mk_conv_out o0 = mk_conv_pixel(t, jc + 8 * j, o, a, v);
        mk_conv_out o1 = o;
        if (!MK_CONV_HALO) {
            o1 = mk_conv_out_next(o, 1, v);
        }
        o1 = mk_conv_pixel(t, jc + 8 * j + 1, o1, a, v);
        for (int i = 0; i < MK_FM; ++i) {
            const float2 e = float2(acc.v[i][j].thread_elements());
            const int m = m0 + sr + 8 * i + f.fr;
            mk_conv_store(e.x, b[i], m, o0, y, a, v);
            mk_conv_store(e.y, b[i], m, o1, y, a, v);
        }
        if (!MK_CONV_HALO) {
            o = mk_conv_out_next(o, 8, v);
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
