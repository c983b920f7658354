// attention.metal: scaled_dot_product_attention (mk_attention_args), flash-attention style:
// a threadgroup owns MK_BQ query rows of one (batch, head) and walks the keys in blocks of
// MK_BK, folding each block's scores into a running row maximum and sum (online softmax), so
// the L x S score matrix never exists anywhere. docs/attention.md says why it is blocked so.
//
// Kernels (T = float "f32" or half "f16"; half is storage only, accumulation is float):
//   attention_simd_<t>   8x8 simdgroup_matrix products (S = Q K^T and O += P V)
//   attention_tiled_<t>  the same blocking with scalar FMAs, for GPUs without simdgroup
//                        matrices (and as the tuner's second candidate)
// Grid (threadgroups): x = ceil(L / MK_BQ), y = Hq, z = B; MK_BQ / 8 SIMD-groups (4*MK_BQ
// threads) per threadgroup, each owning 8 query rows. Head dimensions E and Ev up to MK_D.
//
// Per threadgroup, in threadgroup memory (float): the query block Qs (MK_BQ x MK_D, zero past
// L and E), one key block Ks and one value block Vs (MK_BK x MK_D each, zero past S, E, Ev);
// the tiled kernel adds the probabilities Ps (MK_BQ x MK_BK). Per key block: load K and V,
// barrier, scores, online-softmax update, O += P V, barrier.
//
// Lanes: every lane holds, for one query row, the scores of MK_BK/4 keys and MK_D/4 output
// columns, at the positions of an 8x8 simdgroup_matrix's thread_elements() (row and first
// column from att_coord; the n-th element at column att_col(col, n)). The tiled kernel uses
// the same positions, so the masking, the softmax and the store are shared. The 4 lanes of
// a row differ in lane bits 0 and 3: row reductions are two simd_shuffle_xor steps.
//
// Semantics (as torch): scores are scale * q.k plus an additive mask, plus -inf for a key
// hidden by a false bool mask or by causal (key j > query i): its weight is exactly 0.
// A row with no visible key gives 0 @ v (sum 0: weights 0, the output never rescaled). NaN in a score makes
// its row NaN; +inf makes it NaN (inf - inf). Running maxima start at -FLT_MAX, not -inf, so
// no expression forms -inf - -inf and nothing compares with infinities (fast math).
#include "mk_common.h"
#include "mk_args.h"

#ifndef MK_BQ
#define MK_BQ 32
#endif
#ifndef MK_BK
#define MK_BK 32
#endif
#ifndef MK_D
#define MK_D 64
#endif

#define ATT_NT (MK_BQ * 4)          // threads per threadgroup: one SIMD-group per 8 rows
#define ATT_NS (MK_BK / 4)          // scores per lane per key block
#define ATT_NO (MK_D / 4)           // output columns per lane
#define ATT_LOWEST (-FLT_MAX)
#define ATT_HIDE (-INFINITY)

static_assert(MK_BQ % 8 == 0 && MK_BQ >= 8, "MK_BQ must be a positive multiple of 8");
static_assert(MK_BK % 8 == 0 && MK_BK >= 8, "MK_BK must be a positive multiple of 8");
static_assert(MK_D % 8 == 0 && MK_D >= 8, "MK_D must be a positive multiple of 8");
static_assert(ATT_NT <= 1024, "at most 1024 threads per threadgroup");
static_assert((MK_BQ * MK_D + 2 * MK_BK * MK_D) * 4 <= 32768, "at most 32 KiB of threadgroup memory");
// the tiled kernel also stages the weights (MK_BQ x MK_BK): compiled only where that fits
#define ATT_TILED_FITS ((MK_BQ * MK_D + 2 * MK_BK * MK_D + MK_BQ * MK_BK) * 4 <= 32768)

// A lane's query row (tile-local) and its first column within each group of 8 columns:
// the element layout of an 8x8 simdgroup_matrix (thread_elements() holds columns col, col+1).
struct att_lane {
    int row;
    int col;
};

inline att_lane att_coord(uint sg, uint lane)
{
    att_lane c;
    c.row = int(sg) * 8 + int((((lane >> 4) & 1u) << 2) | ((lane >> 1) & 3u));
    c.col = int((((lane >> 3) & 1u) << 2) | ((lane & 1u) << 1));
    return c;
}

// The column of a lane's n-th element along a row (8-column groups, two elements in each).
inline int att_col(int col, int n)
{
    return col + 8 * (n >> 1) + (n & 1);
}

// Where a threadgroup works: batch b, head h, first query row q0, and element offsets of
// its q, k, v and out matrices and of its mask plane.
struct att_place {
    int b, h, q0;
    int qo, ko, vo, oo, mo;
};

inline att_place att_locate(uint3 tgp, constant mk_attention_args& a)
{
    att_place p;
    p.q0 = int(tgp.x) * MK_BQ;
    p.h = int(tgp.y);
    p.b = int(tgp.z);
    p.qo = p.b * a.q_sb + p.h * a.q_sh;
    p.ko = p.b * a.k_sb + p.h / (a.Hq / a.Hk) * a.k_sh;
    p.vo = p.b * a.v_sb + p.h / (a.Hq / a.Hv) * a.v_sh;
    p.oo = (p.b * a.Hq + p.h) * a.L * a.Ev;
    p.mo = p.b * a.m_sb + p.h * a.m_sh;
    return p;
}

// One past the last key any row of the block may see: causal rows q0.. see keys <= row.
inline int att_key_end(constant mk_attention_args& a, int q0)
{
    return a.causal != 0 ? min(a.S, q0 + MK_BQ) : a.S;
}

// |x| as bits, ordered as the magnitudes; >= 0x7f800000 for Inf and NaN (compared as
// integers: fast math may drop isfinite and x * 0).
inline uint att_mag(float x)
{
    return as_type<uint>(x) & 0x7fffffffu;
}

// The keys this threadgroup visits: past att_key_end only when leaving them out cannot
// change the result (mk_cpu_attention.c's skippable()): torch adds -inf to their scores
// (+Inf or NaN + -inf = NaN) and multiplies their weight 0 with their values (0 * Inf/NaN =
// NaN). So every value there must be finite, and E max|q| max|k| |scale| < 1e30 (no score
// of theirs can reach +Inf). All threads scan a share of the block's q rows and of those
// keys' k and v rows (no more reads than visiting them, and no arithmetic); the SIMD-groups'
// maxima meet in `red` (Ks, unused until the first key block's barrier).
template <typename T>
inline int att_visit_end(const device T* q, const device T* k, const device T* v,
                         constant mk_attention_args& a, thread const att_place& p,
                         threadgroup float* red, uint tid, uint sg, uint lane)
{
    const int kend = att_key_end(a, p.q0);
    if (kend >= a.S) {
        return a.S;
    }
    const int nq = min(MK_BQ, a.L - p.q0) * a.E;
    const int nk = (a.S - kend) * a.E;
    const int nv = (a.S - kend) * a.Ev;
    uint mq = 0u, mk = 0u, mv = 0u;
    for (int e = int(tid); e < nq; e += ATT_NT) {
        mq = max(mq, att_mag(float(q[p.qo + p.q0 * a.E + e])));
    }
    for (int e = int(tid); e < nk; e += ATT_NT) {
        mk = max(mk, att_mag(float(k[p.ko + kend * a.E + e])));
    }
    for (int e = int(tid); e < nv; e += ATT_NT) {
        mv = max(mv, att_mag(float(v[p.vo + kend * a.Ev + e])));
    }
    mq = simd_max(mq);
    mk = simd_max(mk);
    mv = simd_max(mv);
    if (lane == 0u) {
        red[3 * sg] = as_type<float>(mq);
        red[3 * sg + 1] = as_type<float>(mk);
        red[3 * sg + 2] = as_type<float>(mv);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int g = 0; g < ATT_NT / 32; ++g) {
        mq = max(mq, as_type<uint>(red[3 * g]));
        mk = max(mk, as_type<uint>(red[3 * g + 1]));
        mv = max(mv, as_type<uint>(red[3 * g + 2]));
    }
    const uint inf = 0x7f800000u;
    if (mq >= inf || mk >= inf || mv >= inf) {
        return a.S;
    }
    const float bound = abs(a.scale) * float(a.E) * as_type<float>(mq) * as_type<float>(mk);
    return bound < 1e30f ? kend : a.S;
}

// s[n] holds q.k for (query i, key j0 + att_col(col, n)): scale it, add a float mask, and
// add -inf where the key is hidden (false bool mask, causal), as torch adds its masks, so a
// NaN score stays NaN; keys past S and rows past L (which read no mask) are -inf outright.
template <typename T>
inline void att_scores(thread float* s, constant mk_attention_args& a,
                       const device uchar* mbool, const device T* madd,
                       thread const att_place& p, int i, int j0, int col)
{
    const bool live = i < a.L;
    const int mrow = p.mo + i * a.m_sl;
    for (int n = 0; n < ATT_NS; ++n) {
        const int j = j0 + att_col(col, n);
        const bool in = live && j < a.S;
        float v = a.E > 0 ? a.scale * s[n] : 0.0f;   // E = 0: empty products, scores 0 (torch)
        bool hide = a.causal != 0 && j > i;
        if (in && a.mask == MK_ATTN_MASK_BOOL) {
            hide = hide || mbool[mrow + j * a.m_ss] == 0;
        }
        if (in && a.mask == MK_ATTN_MASK_ADD) {
            v += float(madd[mrow + j * a.m_ss]);
        }
        s[n] = in ? (hide ? v + ATT_HIDE : v) : ATT_HIDE;
    }
}

// The maximum / sum over the 4 lanes that hold one row (lane bits 0 and 3).
inline float att_row_max(float x)
{
    x = max(x, simd_shuffle_xor(x, 1));
    return max(x, simd_shuffle_xor(x, 8));
}

inline float att_row_sum(float x)
{
    x += simd_shuffle_xor(x, 1);
    return x + simd_shuffle_xor(x, 8);
}

// Folds one key block's scores into the row's running maximum m and sum l; leaves the
// normalised weights exp(s - m) / l in s and returns the factor by which the output so far
// must be scaled (l_old exp(m_old - m) / l). The output stays a convex combination of value
// rows, so values near FLT_MAX give their representable weighted mean (an unnormalised sum
// of exp(s - m) v divided by l at the end overflowed). A row with no visible key yet (l = 0)
// keeps its output (0 @ v) and weights 0.
inline float att_online(thread float* s, thread float& m, thread float& l)
{
    float bm = s[0];
    for (int n = 1; n < ATT_NS; ++n) {
        bm = max(bm, s[n]);
    }
    const float mn = max(m, att_row_max(bm));
    const float f = exp(m - mn);
    float sum = 0.0f;
    for (int n = 0; n < ATT_NS; ++n) {
        s[n] = exp(s[n] - mn);
        sum += s[n];
    }
    const float kept = l * f;
    l = kept + att_row_sum(sum);
    m = mn;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int n = 0; n < ATT_NS; ++n) {
        s[n] *= inv;
    }
    return l > 0.0f ? kept * inv : 1.0f;
}

// The lane's outputs o[n] (row i, column att_col(col, n)), normalised already (att_online);
// a row that saw no key is 0 @ v.
template <typename T>
inline void att_store(thread const float* o, device T* out, constant mk_attention_args& a,
                      thread const att_place& p, int i, int col)
{
    if (i < a.L) {
        for (int n = 0; n < ATT_NO; ++n) {
            const int c = att_col(col, n);
            if (c < a.Ev) {
                out[p.oo + i * a.Ev + c] = T(o[n]);
            }
        }
    }
}

// Key block j0's K and V rows into Ks / Vs (row-major, MK_D floats per row, zeros past the ends).
template <typename T>
inline void att_load_kv(threadgroup float* Ks, threadgroup float* Vs, const device T* k,
                        const device T* v, constant mk_attention_args& a,
                        thread const att_place& p, int j0, int tid)
{
    mk_load_tile(Ks, MK_D, 1, k + p.ko, a.E, false, MK_BK, MK_D, j0, 0, a.S, a.E, tid, ATT_NT);
    mk_load_tile(Vs, MK_D, 1, v + p.vo, a.Ev, false, MK_BK, MK_D, j0, 0, a.S, a.Ev, tid, ATT_NT);
}

#if !defined(MK_NO_SIMDGROUP_MATRIX)   // (GPUs without simdgroup matrices: the tiled kernel only)
// ---------------------------------------------------------------- simdgroup_matrix kernel
template <typename T>
kernel void attention_simd(const device T* q [[buffer(0)]],
                           const device T* k [[buffer(1)]],
                           const device T* v [[buffer(2)]],
                           const device uchar* mbool [[buffer(3)]],
                           const device T* madd [[buffer(4)]],
                           device T* out [[buffer(5)]],
                           constant mk_attention_args& a [[buffer(6)]],
                           uint3 tgp [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]],
                           uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float Qs[MK_BQ * MK_D];
    threadgroup float Ks[MK_BK * MK_D];
    threadgroup float Vs[MK_BK * MK_D];

    const att_place p = att_locate(tgp, a);
    const att_lane c = att_coord(sg, lane);
    const int i = p.q0 + c.row;
    const int nd = mk_cdiv(a.E, 8);       // fragments along E and Ev actually used
    const int nv = mk_cdiv(a.Ev, 8);
    mk_load_tile(Qs, MK_D, 1, q + p.qo, a.E, false, MK_BQ, MK_D, p.q0, 0, a.L, a.E, int(tid), ATT_NT);

    simdgroup_matrix<float, 8, 8> O[MK_D / 8];
    for (int f = 0; f < MK_D / 8; ++f) {
        O[f] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    float m = ATT_LOWEST;
    float l = 0.0f;
    const int kend = att_visit_end(q, k, v, a, p, Ks, tid, sg, lane);
    for (int j0 = 0; j0 < kend; j0 += MK_BK) {
        threadgroup_barrier(mem_flags::mem_threadgroup);   // Qs written / last block's K, V read
        att_load_kv(Ks, Vs, k, v, a, p, j0, int(tid));
        threadgroup_barrier(mem_flags::mem_threadgroup);

        simdgroup_matrix<float, 8, 8> S[MK_BK / 8];
        for (int f = 0; f < MK_BK / 8; ++f) {
            S[f] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
        for (int d = 0; d < MK_D / 8; ++d) {
            if (d < nd) {
                simdgroup_matrix<float, 8, 8> qf;
                simdgroup_load(qf, Qs + int(sg) * 8 * MK_D + d * 8, MK_D);
                for (int f = 0; f < MK_BK / 8; ++f) {
                    simdgroup_matrix<float, 8, 8> kf;   // K^T: rows of Ks read as columns
                    simdgroup_load(kf, Ks + f * 8 * MK_D + d * 8, MK_D, ulong2(0, 0), true);
                    simdgroup_multiply_accumulate(S[f], qf, kf, S[f]);
                }
            }
        }
        float s[ATT_NS];
        for (int f = 0; f < MK_BK / 8; ++f) {
            s[2 * f] = S[f].thread_elements()[0];
            s[2 * f + 1] = S[f].thread_elements()[1];
        }
        att_scores(s, a, mbool, madd, p, i, j0, c.col);
        const float fct = att_online(s, m, l);
        for (int f = 0; f < MK_BK / 8; ++f) {
            S[f].thread_elements()[0] = s[2 * f];
            S[f].thread_elements()[1] = s[2 * f + 1];
        }
        for (int e = 0; e < MK_D / 8; ++e) {
            if (e < nv) {
                O[e].thread_elements()[0] *= fct;
                O[e].thread_elements()[1] *= fct;
                for (int f = 0; f < MK_BK / 8; ++f) {
                    simdgroup_matrix<float, 8, 8> vf;
                    simdgroup_load(vf, Vs + f * 8 * MK_D + e * 8, MK_D);
                    simdgroup_multiply_accumulate(O[e], S[f], vf, O[e]);
                }
            }
        }
    }
    float o[ATT_NO];
    for (int e = 0; e < MK_D / 8; ++e) {
        o[2 * e] = O[e].thread_elements()[0];
        o[2 * e + 1] = O[e].thread_elements()[1];
    }
    att_store(o, out, a, p, i, c.col);
}

#endif  // !MK_NO_SIMDGROUP_MATRIX

// ---------------------------------------------------------------- scalar (tiled) kernel
#if ATT_TILED_FITS
template <typename T>
kernel void attention_tiled(const device T* q [[buffer(0)]],
                            const device T* k [[buffer(1)]],
                            const device T* v [[buffer(2)]],
                            const device uchar* mbool [[buffer(3)]],
                            const device T* madd [[buffer(4)]],
                            device T* out [[buffer(5)]],
                            constant mk_attention_args& a [[buffer(6)]],
                            uint3 tgp [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float Qs[MK_BQ * MK_D];
    threadgroup float Ks[MK_BK * MK_D];
    threadgroup float Vs[MK_BK * MK_D];
    threadgroup float Ps[MK_BQ * MK_BK];

    const att_place p = att_locate(tgp, a);
    const att_lane c = att_coord(sg, lane);
    const int i = p.q0 + c.row;
    mk_load_tile(Qs, MK_D, 1, q + p.qo, a.E, false, MK_BQ, MK_D, p.q0, 0, a.L, a.E, int(tid), ATT_NT);

    float o[ATT_NO];
    for (int n = 0; n < ATT_NO; ++n) {
        o[n] = 0.0f;
    }
    float m = ATT_LOWEST;
    float l = 0.0f;
    const threadgroup float* qrow = Qs + c.row * MK_D;
    threadgroup float* prow = Ps + c.row * MK_BK;
    const int kend = att_visit_end(q, k, v, a, p, Ks, tid, sg, lane);
    for (int j0 = 0; j0 < kend; j0 += MK_BK) {
        threadgroup_barrier(mem_flags::mem_threadgroup);   // Qs written / last block's K, V, P read
        att_load_kv(Ks, Vs, k, v, a, p, j0, int(tid));
        threadgroup_barrier(mem_flags::mem_threadgroup);

        float s[ATT_NS];
        for (int n = 0; n < ATT_NS; ++n) {
            const threadgroup float* krow = Ks + att_col(c.col, n) * MK_D;
            float acc = 0.0f;
            for (int d = 0; d < a.E; ++d) {
                acc += qrow[d] * krow[d];
            }
            s[n] = acc;
        }
        att_scores(s, a, mbool, madd, p, i, j0, c.col);
        const float fct = att_online(s, m, l);
        for (int n = 0; n < ATT_NS; ++n) {
            prow[att_col(c.col, n)] = s[n];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);   // the row's weights from all 4 lanes
        for (int n = 0; n < ATT_NO; ++n) {
            const int col = att_col(c.col, n);
            float acc = o[n] * fct;
            if (col < a.Ev) {
                for (int j = 0; j < MK_BK; ++j) {
                    acc += prow[j] * Vs[j * MK_D + col];
                }
            }
            o[n] = acc;
        }
    }
    att_store(o, out, a, p, i, c.col);
}
#endif  // ATT_TILED_FITS

// The kernels, one per dtype (mk_common.h's MK_PER_DTYPE): <name>_f32, <name>_f16.
#if !defined(MK_NO_SIMDGROUP_MATRIX)
MK_PER_DTYPE(attention_simd)
#endif

#if ATT_TILED_FITS
MK_PER_DTYPE(attention_tiled)
#endif
