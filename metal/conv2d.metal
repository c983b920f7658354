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

// What the host decides once per call (gpu/conv2d.py, constant buffer 5): the halo's
// layout (halo_layout; zeros without the halo; its fields: "The halo of a 2-D tile"
// below), the weights' row pitch and the biases' group pitch (weight_rows, bias_rows), and
// split-K (split_k):
// SPLIT > 1 threadgroups per output tile, split s summing input channels [s*CHUNK,
// (s+1)*CHUNK) of its group into float partials (conv2d_splitk_reduce adds them, the bias
// and the activation).
struct mk_conv_layout {
    int HLD, PL, H2, ES, CB, HR, NV, SPAN, VEC;   // NV: 4-wide chunks per staged row
    int WLD, BLD;
    int SPLIT, CHUNK;
};

// The GEMM view of group g, and the input channels [c0, c1) this threadgroup sums.
struct mk_conv_view {
    int g, Cg, Kg, RS, PQ, Kd, Ncol;
    int s, c0, c1;                // split s (grid z = g*SPLIT + s) and its channels
};

inline mk_conv_view mk_conv_locate(uint z, constant mk_conv2d_args& a,
                                   constant mk_conv_layout& L)
{
    mk_conv_view v;
    v.g = int(z);
    v.s = 0;
    if (L.SPLIT > 1) {
        v.g = int(z) / L.SPLIT;
        v.s = int(z) - v.g * L.SPLIT;
    }
    v.Cg = a.C / a.groups;
    v.Kg = a.K / a.groups;
    v.RS = a.R * a.S;
    v.PQ = a.P * a.Q;
    v.Kd = v.Cg * v.RS;
    v.Ncol = a.N * v.PQ;
    v.c0 = L.SPLIT > 1 ? min(v.s * L.CHUNK, v.Cg) : 0;
    v.c1 = L.SPLIT > 1 ? min(v.c0 + L.CHUNK, v.Cg) : v.Cg;
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
#define MK_CONV_HALO_CAP 1788     // halo elements (tuning/tiles.py HALO_CAP, passed in)
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

// a tap stepped forward by a decomposed step (compares and carries, no division)
inline mk_conv_tap mk_conv_tap_next(mk_conv_tap t, thread const mk_conv_tap& step,
                                    constant mk_conv2d_args& a)
{
    t.s += step.s;
    if (t.s >= a.S) {
        t.s -= a.S;
        t.r += 1;
    }
    t.r += step.r;
    if (t.r >= a.R) {
        t.r -= a.R;
        t.c += 1;
    }
    t.c += step.c;
    return t;
}

// The halo of a 2-D tile (MK_CONV_HALO 1): input rows hlo .. hlo+HR-1 of each channel of
// the slice, columns wa .. wa+SPAN-1, staged per channel slice with zeros outside the image
// (so nothing that reads it checks a bound). Its layout comes from the host
// (gpu/conv2d_halo.py halo_layout, buffer 5: one place decides it): input column wa+u of
// halo row hr of slice channel cl at Hs[cl*PL + hr*HLD + col(u + al)], col(v) = v, or at
// stride 2 (H2 > 0) the two column phases apart, (v & 1)*H2 + (v >> 1). Staged by VEC,
// every mode loading aligned 4-wide chunks of x's rows:
//   1 (stride 1, W a multiple of 4: every row of x 4-aligned alike): chunks stored 4-wide
//     where they were loaded, al = wa & 3 the same for every row (and tile);
//   2 (stride 1, each row of x at its own 4-alignment): each 4-wide store of columns
//     4*ch .. 4*ch+3 built from the lane's chunk and the next lane's (the row's next
//     chunk, simd_shuffle_down), al = 0;
//   3 (stride 2, W a multiple of 4): chunks in place as 1, each split to the two phases as
//     two 2-wide stores (.xz even columns, .yw odd ones), al = wa & 3;
//   4 (stride 2 otherwise): realigned as 2, then split as 3, al = 0;
//   0 (else: stride 3 and more, or a row of more than 32 chunks): element by element,
//     al = 0.
// Modes 2-4 need NV <= 32: their SIMD-groups stage whole rows (mk_conv_halo_at; mode 1 too
// where NV <= 32).
// Pixel q of a tap column u0 is at col(u0 + al) + q*ES (ES: 1 at strides 1 and 2, else the
// stride). HLD, PL and H2 are chosen there so that the 8 im2col rows x 4 pixels a fragment
// load reads (mk_conv_halo_step), and the staging stores, use every bank alike.

inline int mk_conv_col(int u, constant mk_conv_layout& L)
{
    return L.H2 != 0 ? (u & 1) * L.H2 + (u >> 1) : u;
}

// The first input column's place in a VEC 1 or 3 halo row (0 otherwise): x's 4-alignment
// of wa.
inline int mk_conv_halo_al(thread const mk_conv_tile& t, constant mk_conv_layout& L,
                           constant mk_conv2d_args& a)
{
    return L.VEC == 1 || L.VEC == 3 ? (t.q0 * a.stride_w - a.pad_w) & 3 : 0;
}

// whether a VEC mode's SIMD-groups stage whole rows (rows of at most 32 chunks; modes 2-4
// always), realign the chunks by shuffles, split them to the two stride-2 column phases
#define MK_CONV_WHOLE_ROWS(L) ((L).VEC != 0 && (L).NV <= MK_SIMD_WIDTH)
#define MK_CONV_REALIGNED(L) ((L).VEC == 2 || (L).VEC == 4)
#define MK_CONV_PHASES(L) ((L).VEC >= 3)

struct mk_conv_halo {
    int hlo, wa, al, total, last;     // al: mk_conv_halo_al; last: x's last whole chunk
    int cl0, hr0, ch0;                // the thread's first (channel, row, chunk)
    int dcl, dhr, dch, pass;          // its step per pass (channels, rows, chunks); items a pass
    bool slot;                        // whether this lane stages (WHOLE_ROWS: some idle)
};

inline mk_conv_halo mk_conv_halo_at(constant mk_conv2d_args& a, constant mk_conv_layout& L,
                                    thread const mk_conv_tile& t, int tid)
{
    mk_conv_halo h = {};
    if (!MK_CONV_HALO) {
        return h;
    }
    h.hlo = t.p0 * a.stride_h - a.pad_h;
    h.wa = t.q0 * a.stride_w - a.pad_w;
    h.al = mk_conv_halo_al(t, L, a);
    h.total = a.N * a.C * a.H * a.W;
    h.last = (h.total - 4) & ~3;
    // items (row, channel, chunk), chunks fastest, then CB channels (so the 8 rows a
    // SIMD-group's stores reach are 8 channels' or rows' alike: halo_layout's pitches):
    // whole rows per SIMD-group, 32/NV rows of NV lanes (a row's next chunk in the next
    // lane), the other lanes idle; else (VEC 0, or 1 with NV > 32) consecutive items
    int row, rows;                    // the thread's first row (hr*CB + cl); rows a pass
    h.slot = true;
    if (MK_CONV_WHOLE_ROWS(L)) {
        const int lane = tid % MK_SIMD_WIDTH;
        const int per = MK_SIMD_WIDTH / L.NV;
        const int lr = lane / L.NV;
        h.slot = lr < per;
        h.ch0 = lane - lr * L.NV;
        row = tid / MK_SIMD_WIDTH * per + lr;
        rows = MK_NT / MK_SIMD_WIDTH * per;
        h.dch = 0;
        h.pass = rows * L.NV;
    } else {
        row = tid / L.NV;
        h.ch0 = tid - row * L.NV;
        rows = MK_NT / L.NV;
        h.dch = MK_NT - rows * L.NV;
        h.pass = MK_NT;
    }
    h.hr0 = row / L.CB;
    h.cl0 = row - h.hr0 * L.CB;
    h.dhr = rows / L.CB;
    h.dcl = rows - h.dhr * L.CB;
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
// offset into x): per (channel, row) the NV aligned 4-wide chunks from the one holding
// column wa, stored by VEC (the halo's comment above), 0 outside the image. Every lane runs
// every pass (the realigning shuffles).
template <typename T>
inline void mk_conv_halo_stage(threadgroup T* Hs, thread const mk_conv_halo& h,
                               constant mk_conv_layout& L, int c0, int xg,
                               const device T* x, constant mk_conv2d_args& a,
                               thread const mk_conv_view& v, int tid)
{
    typedef typename mk_vec<T>::v4 V;
    typedef typename mk_vec<T>::v2 V2;
    const int nch = min(L.CB, v.c1 - c0);
    const int items = L.HR * L.CB * L.NV;
    int cl = h.cl0, hr = h.hr0, ch = h.ch0;
    for (int i0 = 0; i0 < items; i0 += h.pass) {
        const int ih = h.hlo + hr;
        const bool rin = ih >= 0 && ih < a.H;
        // (the last pass may have fewer items, the last slice fewer channels: VEC 1-4 store
        // zeros for those, never read, so every lane stores alike)
        const bool on = h.slot && hr < L.HR;
        const bool here = on && cl < nch;
        const int rowx = xg + ((c0 + cl) * a.H + ih) * a.W + h.wa;   // x offset of column wa
        const int at = (rowx & ~3) + 4 * ch;
        const int u0 = at - rowx;                  // the chunk's first halo column (>= -3)
        V val = V(T(0));
        if (rin && here) {
            // one aligned 4-wide copy from a chunk inside x (for chunks reaching past its
            // ends the first or last whole one, then redone element by element)
            const int from = max(min(at, h.last), 0);
            if (h.last >= 0) {
                val = *reinterpret_cast<const device V*>(x + from);
            }
            if (from != at || h.last < 0 || !MK_VEC_LOADS) {
                for (int e = 0; e < 4; ++e) {
                    val[e] = at + e >= 0 && at + e < h.total ? x[at + e] : T(0);
                }
            }
        }
        if (L.VEC != 0) {
            for (int e = 0; e < 4; ++e) {
                const int w = h.wa + u0 + e;
                val[e] = rin && w >= 0 && w < a.W ? val[e] : T(0);
            }
        }
        if (MK_CONV_REALIGNED(L)) {
            // columns 4*ch.. : this chunk's from column 4*ch (element sh) on, the rest from
            // the next lane's, the row's next chunk (a row's chunks share a SIMD-group; the
            // last chunk's tail, past SPAN, is never read)
            const V nx = simd_shuffle_down(val, ushort(1));
            const int sh = rowx & 3;
            val = sh == 0 ? val : sh == 1 ? V(val.yzw, nx.x)
                : sh == 2 ? V(val.zw, nx.xy) : V(val.w, nx.xyz);
        }
        threadgroup T* d = Hs + cl * L.PL + hr * L.HLD;
        if (L.VEC != 0 && on) {
            if (MK_CONV_PHASES(L)) {       // columns 4*ch + 0, 2 and 4*ch + 1, 3
                *reinterpret_cast<threadgroup V2*>(d + 2 * ch) = val.xz;
                *reinterpret_cast<threadgroup V2*>(d + L.H2 + 2 * ch) = val.yw;
            } else {
                *reinterpret_cast<threadgroup V*>(d + 4 * ch) = val;
            }
        } else if (L.VEC == 0 && here) {
            for (int e = 0; e < 4; ++e) {
                const int u = u0 + e;
                const int w = h.wa + u;
                if (u >= 0 && u < L.SPAN) {
                    d[mk_conv_col(u, L)] = rin && w >= 0 && w < a.W ? val[e] : T(0);
                }
            }
        }
        ch += h.dch;
        cl += h.dcl;
        hr += h.dhr;
        if (ch >= L.NV) {
            ch -= L.NV;
            cl += 1;
        }
        if (cl >= L.CB) {
            cl -= L.CB;
            hr += 1;
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
        g.at = mk_conv_tap_next(g.at, g.step, a);
    }
}

// The B slices of a 2-D tile for the tiled kernel, built from the halo (MK_CONV_HALO 1):
// item i of a slice is im2col row kk = i / TP over the 8 pixels of output row pl = i % TP
// of the tile, one thread each (MK_CONV_ITEMS per thread), stored to Bs as two 4-wide
// stores. Each item carries its tap (c, r, s) from slice to slice by BK (compares, no
// division). (The simd kernel reads its fragments from the halo directly:
// mk_conv_halo_step.)
#define MK_CONV_HITEMS (MK_BK * MK_CONV_TP)
#define MK_CONV_ITEMS (MK_CONV_HITEMS > MK_NT ? MK_CONV_HITEMS / MK_NT : 1)
static_assert(!MK_CONV_HALO || MK_CONV_HITEMS % MK_NT == 0 || MK_NT % MK_CONV_HITEMS == 0,
              "conv2d halo tiles: threads and BK*BN/8 must divide one another "
              "(gpu/conv2d.py uses_halo)");

// the halo index of a tap's pixel 0 in output row pl of the tile
inline int mk_conv_halo_at_tap(mk_conv_tap t, int pl, int c0, constant mk_conv_layout& L,
                               int al, constant mk_conv2d_args& a)
{
    return (t.c - c0) * L.PL + (pl * a.stride_h + t.r * a.dil_h) * L.HLD
           + mk_conv_col(t.s * a.dil_w + al, L);
}

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
                               const threadgroup T* Hs, constant mk_conv_layout& L, int al,
                               int c0, int kend, constant mk_conv2d_args& a)
{
    typedef typename mk_vec<T>::v4 V;
    for (int u = 0; u < MK_CONV_ITEMS && it.on; ++u) {
        const int src = mk_conv_halo_at_tap(it.at[u], it.pl[u], c0, L, al, a);
        V lo = V(T(0)), hi = V(T(0));
        if (it.kd[u] < kend) {
            for (int e = 0; e < 4; ++e) {
                lo[e] = Hs[src + e * L.ES];
                hi[e] = Hs[src + (e + 4) * L.ES];
            }
        }
        threadgroup T* d = Bs + it.kk[u] * MK_LDB(T) + 8 * it.pl[u];
        *reinterpret_cast<threadgroup V*>(d) = lo;
        *reinterpret_cast<threadgroup V*>(d + 4) = hi;
        it.kd[u] += MK_BK;
        it.at[u] = mk_conv_tap_next(it.at[u], it.step, a);
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

// The bias of GEMM row m (output channel g*Kg + m, at bias[g*BLD + m]; 0 without bias, past
// Kg, or split: the reduction adds it).
inline float mk_conv_bias(int m, const device float* bias, constant mk_conv2d_args& a,
                          thread const mk_conv_view& v, constant mk_conv_layout& L)
{
    return a.has_bias != 0 && L.SPLIT <= 1 && m < v.Kg ? bias[v.g * L.BLD + m] : 0.0f;
}

// Output element (m, o) of group g's GEMM: channel g*Kg + m of image o.n at pixel o.pq;
// the bias b and the activation are the GEMM's epilogue. Split (L.SPLIT > 1): the float
// partial sum of split s at partial[s][n][k][pq] instead (no bias, no activation: the
// reduction applies them once, after the whole sum).
template <typename T>
inline void mk_conv_store(float acc, float b, int m, mk_conv_out o, device T* y,
                          device float* partial, constant mk_conv2d_args& a,
                          thread const mk_conv_view& v, constant mk_conv_layout& L)
{
    if (m < v.Kg && o.pq >= 0) {
        const int e = (o.n * a.K + v.g * v.Kg + m) * v.PQ + o.pq;
        if (L.SPLIT > 1) {
            partial[v.s * a.N * a.K * v.PQ + e] = acc;
        } else {
            y[e] = T(mk_act(acc + b));
        }
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
                           const threadgroup T* Hs, constant mk_conv_layout& L, int al,
                           int c0, int kend, constant mk_conv2d_args& a,
                           thread const mk_conv_view& v, int k0, int tid)
{
    if (MK_CONV_HALO) {
        mk_conv_halo_slice(Bs, it, Hs, L, al, c0, kend, a);
    } else if (pl.on) {
        // (rows from kend on, the next split's channels, read as 0: 0 * Inf would be NaN)
        const bool vec = MK_VEC_LOADS && k0 + MK_BK <= kend && pl.q0 + MK_BN <= v.PQ
                         && (v.PQ & 3) == 0;
        mk_stage<MK_BK, MK_BN, MK_LDB(T), 1>(Bs, pl.xp, v.PQ, false, vec, k0, pl.q0, kend,
                                             v.PQ, tid);
    } else {
        mk_conv_gather_slice(Bs, g, x, kend, a, v);
    }
}

// Whether the weight slice at k0 can take unchecked vector loads (mk_stage): 4-aligned
// rows and slice. The host pads each weight row to a multiple of 4 (L.WLD, gpu/conv2d.py
// weight_rows: Kd = 147 or an odd C), so a vector holding the channel slice's end kend
// stays inside its row; columns from kend on and rows from Kg on read as 0 (rows past Kg
// and vectors wholly past kend are not loaded).
inline bool mk_conv_vec_a(int k0, constant mk_conv_layout& L)
{
    return MK_VEC_LOADS && ((L.WLD | k0) & 3) == 0;
}

// The K loop both variants share: per channel slice [c0, c0 + CB) of the threadgroup's
// channels [v.c0, v.c1) (one slice of them all without the halo), the halo staged once,
// then BK-deep slices of the weights (As, staged by STAGE_A), of im2col (LOAD_B: into Bs)
// and the variant's STEP over them;
// RESTART: the variant's own state back to the channel slice's first row.
#define MK_CONV_K_LOOP(STAGE_A, LOAD_B, STEP, RESTART)                                      \
    const mk_conv_halo hl = mk_conv_halo_at(a, L, t, int(tid));                             \
    mk_conv_gather g = mk_conv_gather_begin(a, v, t, int(tid));                             \
    mk_conv_hitems it = mk_conv_hitems_at(a, v, int(tid));                                  \
    const mk_conv_plain<T> pl = mk_conv_plain_at(x, a, v, t.j0);                            \
    const int cb = MK_CONV_HALO ? L.CB : max(v.c1 - v.c0, 1);                               \
    for (int c0 = v.c0; c0 < v.c1; c0 += cb) {                                              \
        const int kend = min(c0 + cb, v.c1) * v.RS;                                         \
        mk_conv_gather_restart(g, c0, v);                                                   \
        mk_conv_hitems_restart(it, c0, v);                                                  \
        RESTART;                                                                            \
        if (MK_CONV_HALO) {                                                                 \
            mk_conv_halo_stage(Hs, hl, L, c0, (t.n * a.C + v.g * v.Cg) * a.H * a.W, x, a,   \
                               v, int(tid));                                                \
            threadgroup_barrier(mem_flags::mem_threadgroup);                                \
        }                                                                                   \
        for (int k0 = c0 * v.RS; k0 < kend; k0 += MK_BK) {                                  \
            STAGE_A;                                                                        \
            LOAD_B;                                                                         \
            threadgroup_barrier(mem_flags::mem_threadgroup);                                \
            STEP;                                                                           \
            threadgroup_barrier(mem_flags::mem_threadgroup);                                \
        }                                                                                   \
    }
#define MK_CONV_LOAD_B \
    mk_conv_load_b(Bs, g, pl, it, x, Hs, L, hl.al, c0, kend, a, v, k0, int(tid))

// threadgroup memory for the halo (one element when there is none: arrays are not empty)
#define MK_CONV_HALO_ELEMS (MK_CONV_HALO ? MK_CONV_HALO_CAP : 4)
// the simd kernel's B slice: none with the halo (its fragments come from the halo)
#define MK_CONV_SIMD_B(T) (MK_CONV_HALO ? 4 : MK_SIMD_B(T))
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
                         constant mk_conv_layout& L [[buffer(5)]],
                         device float* partial [[buffer(6)]],
                         uint3 tgp [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]])
{
    threadgroup T As[MK_TILED_A(T)];
    threadgroup T Bs[MK_SIMD_B(T)];
    threadgroup T Hs[MK_CONV_HALO_ELEMS];

    const mk_conv_view v = mk_conv_locate(tgp.z, a, L);
    const mk_conv_tile t = mk_conv_tile_at(tgp.x, a);
    const int m0 = int(tgp.y) * MK_BM;
    const device T* wg = w + v.g * v.Kg * L.WLD;
    const int tr = int(sg) / MK_WN * MK_SG_M + int(lane) / 8;
    const int tc = int(sg) % MK_WN * MK_SG_N + int(lane) % 8;

    mk_acc_tiled acc;
    mk_tiled_zero(acc);
    MK_CONV_K_LOOP((mk_stage<MK_BM, MK_BK, 1, MK_TLDA(T)>(As, wg, L.WLD, false, false, m0, k0,
                                                          v.Kg, kend, int(tid))),
                   MK_CONV_LOAD_B, mk_tiled_step(As, Bs, acc, tr, tc), (void)0)
    mk_conv_out o = mk_conv_out_at(MK_CONV_HALO ? 0 : t.j0 + tc, v);
    for (int j = 0; j < MK_TN; ++j) {
        const mk_conv_out oj = mk_conv_pixel(t, tc + 8 * j, o, a, v);
        for (int i = 0; i < MK_TM; ++i) {
            const int m = m0 + tr + 4 * i;
            mk_conv_store(acc.v[i][j], mk_conv_bias(m, bias, a, v, L), m, oj, y, partial, a,
                          v, L);
        }
        if (!MK_CONV_HALO) {
            o = mk_conv_out_next(o, 8, v);
        }
    }
}

#if MK_CONV_SIMD_FITS
// The simd kernel's B fragments straight from the halo (MK_CONV_HALO 1): no B slice in
// threadgroup memory, no second copy of x. Lane (fr, fc) of an 8-deep step holds im2col row
// kd = k + fr of fragment columns fc and fc+1, which are pixels fc/2 and 4 + fc/2 of the
// fragment's output row (a fixed permutation of the columns, undone by the epilogue:
// mk_conv_lane_px), so the lanes of one read take 4 consecutive pixels of 8 taps. Each lane
// carries its row's tap forward by 8 per step as a halo offset (compares and constant
// deltas, no division); rows past the channel slice (kd >= kend) read as 0.
struct mk_conv_lane {
    int fr, kd, s, r, u;          // fragment row; im2col row; its tap's s, r; s*dil_w + al
    int off;                      // (c - c0)*PL + r*dil_h*HLD + u (+ the first pixel)
    int s0, r0, u0, off0;         // the same for the channel slice's first row
    int ds, du, dr, doff;         // the step by 8 rows: s, s*dil_w, r, its offset
    int du_wrap, doff_s, doff_r;  // the carries: s by S, r by R (and c by 1)
    int rowoff[MK_FN];            // halo offset of fragment column j's output row
};

inline mk_conv_lane mk_conv_lane_at(constant mk_conv2d_args& a, constant mk_conv_layout& L,
                                    thread const mk_conv_view& v, thread const mk_frag_pos& f,
                                    int sc, int al)
{
    mk_conv_lane ln = {};
    if (!MK_CONV_HALO) {
        return ln;
    }
    const int dhH = a.dil_h * L.HLD;
    const mk_conv_tap t0 = mk_conv_split(f.fr, a, v);
    const mk_conv_tap st = mk_conv_split(8, a, v);
    ln.fr = f.fr;
    ln.s0 = t0.s;
    ln.r0 = t0.r;
    ln.u0 = t0.s * a.dil_w + al;
    ln.off0 = t0.c * L.PL + t0.r * dhH + ln.u0 + (f.fc >> 1) * L.ES;
    ln.ds = st.s;
    ln.du = st.s * a.dil_w;
    ln.dr = st.r;
    ln.doff = st.c * L.PL + st.r * dhH + ln.du;
    ln.du_wrap = a.S * a.dil_w;
    ln.doff_s = dhH;                          // s wrapped: one row of taps on
    ln.doff_r = L.PL - a.R * dhH;             // r wrapped: the next channel's first row
    for (int j = 0; j < MK_FN; ++j) {
        ln.rowoff[j] = ((sc >> 3) + j) * a.stride_h * L.HLD;
    }
    return ln;
}

inline void mk_conv_lane_restart(thread mk_conv_lane& ln, int c0, thread const mk_conv_view& v)
{
    ln.kd = c0 * v.RS + ln.fr;
    ln.s = ln.s0;
    ln.r = ln.r0;
    ln.u = ln.u0;
    ln.off = ln.off0;
}

inline void mk_conv_lane_next(thread mk_conv_lane& ln, constant mk_conv2d_args& a)
{
    ln.kd += 8;
    ln.s += ln.ds;
    ln.u += ln.du;
    ln.off += ln.doff;
    if (ln.s >= a.S) {
        ln.s -= a.S;
        ln.u -= ln.du_wrap;
        ln.r += 1;
        ln.off += ln.doff_s - ln.du_wrap;
    }
    ln.r += ln.dr;
    if (ln.r >= a.R) {
        ln.r -= a.R;
        ln.off += ln.doff_r;
    }
}

// The tile column of the lane's element e (0: .x, 1: .y) of fragment column block c8.
inline int mk_conv_lane_px(int c8, int fc, int e)
{
    return MK_CONV_HALO ? c8 + 4 * e + (fc >> 1) : c8 + fc + e;
}

template <typename T>
inline void mk_conv_halo_step(const threadgroup T* As, const threadgroup T* Hs,
                              thread mk_conv_lane& ln, thread mk_acc_simd& acc, int sr,
                              int k0, int kend, constant mk_conv_layout& L,
                              constant mk_conv2d_args& a)
{
    typedef typename mk_vec<T>::v2 V2;
    // each fragment column block's output row in the halo, for pixels 0 and 4 of a row
    const threadgroup T* h0[MK_FN];
    const threadgroup T* h4[MK_FN];
    for (int j = 0; j < MK_FN; ++j) {
        h0[j] = Hs + ln.rowoff[j];
        h4[j] = h0[j] + 4 * L.ES;
    }
    // (8-deep steps wholly past the channel slice are skipped: a slice of 8 channels at 3x3
    // is 72 rows, 4.5 slices of 16)
    for (int k = 0; k < MK_BK && k0 + k < kend; k += 8) {
        simdgroup_matrix<T, 8, 8> am[MK_FM];
        simdgroup_matrix<T, 8, 8> b[MK_FN];
#pragma unroll
        for (int i = 0; i < MK_FM; ++i) {
            simdgroup_load(am[i], As + (sr + 8 * i) * MK_LDA(T) + k, MK_LDA(T));
        }
        const bool live = ln.kd < kend;
        int o = ln.off;
        if (L.H2 != 0) {          // stride 2: the tap column's phase
            o += mk_conv_col(ln.u, L) - ln.u;
        }
#pragma unroll
        for (int j = 0; j < MK_FN; ++j) {
            thread V2& frag = b[j].thread_elements();
            frag = V2(T(0));
            if (live) {
                frag = V2(h0[j][o], h4[j][o]);
            }
        }
#pragma unroll
        for (int i = 0; i < MK_FM; ++i) {
#pragma unroll
            for (int j = 0; j < MK_FN; ++j) {
                simdgroup_multiply_accumulate(acc.v[i][j], am[i], b[j], acc.v[i][j]);
            }
        }
        mk_conv_lane_next(ln, a);
    }
}

// The biases of the lane's fragment rows sm + 8i + fr (sm = m0 + sr: its SIMD-group's first
// row; 0 without bias or from Kg on): the SIMD-group's MK_SG_M rows read once, 4 a lane as
// one float4 (lanes past MK_SG_M/4 read the same again), handed to the lanes that hold them
// by shuffles (was MK_FM scalar loads a lane). Each group's biases start 4-aligned and are
// padded to a multiple of 4 (L.BLD), so every vector holding a row below Kg is whole.
static_assert(MK_SG_M <= 4 * MK_SIMD_WIDTH, "conv2d: a SIMD-group's rows exceed 4 per lane");
inline void mk_conv_biases(thread float* b, int sm, int fr, uint lane,
                           const device float* bias, constant mk_conv2d_args& a,
                           thread const mk_conv_view& v, constant mk_conv_layout& L)
{
    const int r4 = sm + 4 * (int(lane) % (MK_SG_M / 4));
    float4 q = float4(0.0f);
    if (a.has_bias != 0 && L.SPLIT <= 1 && r4 < v.Kg) {
        q = *reinterpret_cast<const device float4*>(bias + v.g * L.BLD + r4);
    }
    for (int i = 0; i < MK_FM; ++i) {
        const int row = fr + 8 * i;
        const float4 t = simd_shuffle(q, ushort(row >> 2));
        b[i] = t[row & 3];
    }
}

template <typename T>
[[max_total_threads_per_threadgroup(MK_NT)]]
kernel void conv2d_simd(const device T* x [[buffer(0)]],
                        const device T* w [[buffer(1)]],
                        const device float* bias [[buffer(2)]],
                        device T* y [[buffer(3)]],
                        constant mk_conv2d_args& a [[buffer(4)]],
                        constant mk_conv_layout& L [[buffer(5)]],
                        device float* partial [[buffer(6)]],
                        uint3 tgp [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]])
{
    threadgroup T As[MK_SIMD_A(T)];                  // As[m*LDA + k]
    threadgroup T Bs[MK_CONV_SIMD_B(T)];             // Bs[k*LDB + j] (1-D tiles)
    threadgroup T Hs[MK_CONV_HALO_ELEMS];            // the halo (MK_CONV_HALO 1)

    const mk_conv_view v = mk_conv_locate(tgp.z, a, L);
    const mk_conv_tile t = mk_conv_tile_at(tgp.x, a);
    const int m0 = int(tgp.y) * MK_BM;
    const device T* wg = w + v.g * v.Kg * L.WLD;
    const int sr = int(sg) / MK_WN * MK_SG_M;
    const int sc = int(sg) % MK_WN * MK_SG_N;
    const mk_frag_pos f = mk_frag_coord(lane);
    mk_conv_lane ln = mk_conv_lane_at(a, L, v, f, sc, mk_conv_halo_al(t, L, a));

    mk_acc_simd acc;
    mk_simd_zero(acc);
    MK_CONV_K_LOOP((mk_stage<MK_BM, MK_BK, MK_LDA(T), 1>(As, wg, L.WLD, false,
                                                         mk_conv_vec_a(k0, L), m0, k0, v.Kg,
                                                         kend, int(tid))),
                   if (!MK_CONV_HALO) { MK_CONV_LOAD_B; },
                   if (MK_CONV_HALO) {
                       mk_conv_halo_step(As, Hs, ln, acc, sr, k0, kend, L, a);
                   } else {
                       mk_simd_step(As, Bs, acc, sr, sc);
                   },
                   mk_conv_lane_restart(ln, c0, v))
    // fragments straight to device memory, each lane its two elements per fragment; the
    // lane's rows' biases read once
    float b[MK_FM];
    mk_conv_biases(b, m0 + sr, f.fr, lane, bias, a, v, L);
    const int jc = sc + f.fc;
    mk_conv_out o = mk_conv_out_at(MK_CONV_HALO ? 0 : t.j0 + jc, v);
    for (int j = 0; j < MK_FN; ++j) {
        const mk_conv_out o0 = mk_conv_pixel(t, mk_conv_lane_px(sc + 8 * j, f.fc, 0), o, a, v);
        mk_conv_out o1 = o;
        if (!MK_CONV_HALO) {
            o1 = mk_conv_out_next(o, 1, v);
        }
        o1 = mk_conv_pixel(t, mk_conv_lane_px(sc + 8 * j, f.fc, 1), o1, a, v);
        for (int i = 0; i < MK_FM; ++i) {
            const float2 e = float2(acc.v[i][j].thread_elements());
            const int m = m0 + sr + 8 * i + f.fr;
            mk_conv_store(e.x, b[i], m, o0, y, partial, a, v, L);
            mk_conv_store(e.y, b[i], m, o1, y, partial, a, v, L);
        }
        if (!MK_CONV_HALO) {
            o = mk_conv_out_next(o, 8, v);
        }
    }
}
#endif

// Split-K second pass (L.SPLIT > 1): one thread per output element (grid: ceil(N*K*P*Q /
// threads)) sums the SPLIT float partials, then adds the bias once and applies the
// activation once (both after the whole sum), rounding to T once. `bias` is the unpadded
// bias[K].
template <typename T>
[[max_total_threads_per_threadgroup(256)]]   // gpu/conv2d.py's REDUCE_THREADS
kernel void conv2d_splitk_reduce(const device float* partial [[buffer(0)]],
                                 const device float* bias [[buffer(1)]],
                                 device T* y [[buffer(2)]],
                                 constant mk_conv2d_args& a [[buffer(3)]],
                                 constant mk_conv_layout& L [[buffer(4)]],
                                 uint gid [[thread_position_in_grid]])
{
    const int PQ = a.P * a.Q;
    const int total = a.N * a.K * PQ;
    const int i = int(gid);
    if (i < total) {
        float v = 0.0f;
        for (int s = 0; s < L.SPLIT; ++s) {
            v += partial[s * total + i];
        }
        if (a.has_bias != 0) {
            const int nk = i / PQ;
            v += bias[nk - nk / a.K * a.K];
        }
        y[i] = T(mk_act(v));
    }
}

// The kernels, one per dtype (mk_common.h): <name>_f32, <name>_f16.
MK_PER_DTYPE(conv2d_splitk_reduce)
MK_PER_DTYPE(conv2d_tiled)
#if MK_CONV_SIMD_FITS
MK_PER_DTYPE(conv2d_simd)
#endif

#endif  // MK_BM
