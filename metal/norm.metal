// norm.metal: layer_norm, rms_norm, group_norm, batch_norm. Statistics accumulate in
// float32 for both storage types; variance is two-pass (rows held in registers) or Welford
// (looped rows), combined exactly across threads (mk_row_moments): never E[x^2]-E[x]^2.
//
//   norm_rownorm_{rows,looped}_<dt>  layer_norm / rms_norm (mk_rownorm_args.kind) of x
//                                    viewed as (rows, n); weight, bias float32[n].
//   norm_group_{rows,looped}_<dt>    x (N, C, HW): the C/groups channels of a group are
//                                    contiguous, so (n, g) is a row of (C/groups)*HW
//                                    elements; weight, bias float32[C].
//   norm_batch_stats_<dt>            training, x (N, C, HW): moments (count, mean, M2,
//                                    scale S) of each of `split` chunks per channel;
//   norm_batch_finish_f32            one thread per channel combines them: batch mean and
//                                    biased variance (of x*Sc) and Sc into the per-channel
//                                    table params (float4 S, mean, k, bias: see apply), and
//                                    the running statistics (unbiased variance) when present.
//   norm_batch_apply_<dt>            y = (x*S - mean) * k + bias from params[c], k =
//                                    rsqrt(var + eps*S^2) * w[c], 4 elements per thread:
//                                    inference binds the host's table of the running
//                                    statistics (S = 1), training finish's.
//
// Configuration (macros): MK_TPR threads per row (multiple of 32), MK_RPG rows per
// threadgroup, MK_VPT values per thread for the rows variants (n <= MK_TPR*MK_VPT; the
// others ignore it); MK_TPR*MK_RPG <= 1024. Dispatch: rows/looped/stats: ceil(rows /
// MK_RPG) threadgroups of MK_TPR*MK_RPG threads (stats: a row is a chunk of a channel);
// finish: C threads; apply: one thread per 4 elements of the flat N*C*HW tensor.
// Absent weight/bias (has_weight/has_bias == 0) may be bound to any buffer: never read.
#include "mk_common.h"
#include "mk_args.h"
#include "mk_rowreduce.h"

#ifndef MK_TPR
#define MK_TPR 256
#endif
#ifndef MK_RPG
#define MK_RPG 1
#endif
#ifndef MK_VPT
#define MK_VPT 8
#endif
#define NM_THREADS (MK_TPR * MK_RPG)

static_assert(MK_TPR % 32 == 0, "MK_TPR must be a multiple of the SIMD width (32)");
static_assert(NM_THREADS <= 1024, "MK_TPR * MK_RPG must be at most 1024 threads");
static_assert(MK_VPT >= 1, "MK_VPT must be at least 1");

#include "mk_rowvec.h"

// Per-thread moments of the values a thread holds in registers (two-pass, exact), over its
// live entries. RMS (centered == false) takes mu = 0 and m2 = the plain sum of squares:
// moments about a running mean would turn one Inf into (Inf - Inf)^2 = NaN for the whole
// row, where torch (and the reference) give 0 for the finite entries and NaN only for the
// Inf.
inline float3 nm_thread_moments(thread const mk_rowvals& v, mk_span sp, int t, bool centered)
{
    float c = 0.0f;
    float s = 0.0f;
    for (int j = 0; j < MK_RV_NV; ++j) {
        if (mk_live_v(sp, t, j)) {
            c += 4.0f;
            s += (v.v[j].x + v.v[j].y) + (v.v[j].z + v.v[j].w);
        }
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        if (mk_live_h(sp, t, j)) {
            c += 1.0f;
            s += v.h[j];
        }
    }
    if (mk_live_t(sp, t)) {
        c += 1.0f;
        s += v.tl;
    }
    const float mu = c > 0.0f && centered ? s / c : 0.0f;
    float m2 = 0.0f;
    for (int j = 0; j < MK_RV_NV; ++j) {
        if (mk_live_v(sp, t, j)) {
            const float4 d = v.v[j] - mu;
            m2 += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
        }
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        if (mk_live_h(sp, t, j)) {
            m2 += (v.h[j] - mu) * (v.h[j] - mu);
        }
    }
    if (mk_live_t(sp, t)) {
        m2 += (v.tl - mu) * (v.tl - mu);
    }
    return float3(c, mu, m2);
}

// The row's values times the power of two S (mk_pow2_scale: 1 for ordinary rows).
inline void nm_scale(thread mk_rowvals& v, float S)
{
    for (int j = 0; j < MK_RV_NV; ++j) {
        v.v[j] *= S;
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        v.h[j] *= S;
    }
    v.tl *= S;
}

// One looped step: Welford (centered) or the sum of squares (RMS; see nm_thread_moments).
inline void nm_step(thread float& c, thread float& mu, thread float& m2, float x, bool centered)
{
    if (centered) {
        mk_welford(c, mu, m2, x);
    } else {
        c += 1.0f;
        m2 += x * x;
    }
}

// The moments of one contiguous row's elements that thread t streams (head scalars, vectors,
// tail: mk_rowvec.h), of the values times `scale` when SCALED (the first pass has none: no
// multiply per element on the common path).
template <typename T, bool SCALED>
inline float3 nm_stream_moments(const device T* x, int base, mk_span sp, int t, bool centered,
                                float scale)
{
    if (!SCALED) {
        scale = 1.0f;
    }
    float c = 0.0f;
    float mu = 0.0f;
    float m2 = 0.0f;
    for (int k = t; k < sp.head; k += MK_TPR) {
        nm_step(c, mu, m2, float(x[base + k]) * scale, centered);
    }
    for (int i = t; i < sp.nvec; i += MK_TPR) {
        const float4 u = mk_load4(x, base + sp.head + 4 * i) * scale;
        nm_step(c, mu, m2, u.x, centered);
        nm_step(c, mu, m2, u.y, centered);
        nm_step(c, mu, m2, u.z, centered);
        nm_step(c, mu, m2, u.w, centered);
    }
    if (t < sp.tail) {
        nm_step(c, mu, m2, float(x[base + sp.head + 4 * sp.nvec + t]) * scale, centered);
    }
    return float3(c, mu, m2);
}

template <typename T>
inline float nm_stream_absmax(const device T* x, int base, mk_span sp, int t)
{
    float m = 0.0f;
    for (int k = t; k < sp.head; k += MK_TPR) {
        m = max(m, abs(float(x[base + k])));
    }
    for (int i = t; i < sp.nvec; i += MK_TPR) {
        const float4 a = abs(mk_load4(x, base + sp.head + 4 * i));
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    if (t < sp.tail) {
        m = max(m, abs(float(x[base + sp.head + 4 * sp.nvec + t])));
    }
    return m;
}

// Whether the row may hold values of 2^48 or more (or overflowed): every value is within
// |mean| + sqrt(n * var) of 0 (RMS: mean 0, var the mean square). Free with one row per
// threadgroup (mean and var are the row's, the same in every thread); with MK_RPG > 1 rows
// one threadgroup-wide max on `red` (the redo holds barriers, so every row takes the same
// branch). Non-finite bounds count as large.
inline bool nm_row_large(float2 mv, float n, threadgroup float* red, uint tid, uint lane,
                         uint sg)
{
    const float bound = abs(mv.x) + sqrt(mv.y * n);
    float large = ((as_type<uint>(bound) >> 23) & 0xffu) >= 127u + 48u ? 1.0f : 0.0f;
    if (MK_RPG > 1) {       // of the flags, not the bounds: simd_max drops a NaN bound
        large = mk_row_max(large, red, tid, lane, sg, NM_THREADS);
    }
    return large != 0.0f;
}

// Row moments, finite wherever the normalised output is representable: computed at scale 1
// (ordinary rows: exactly the plain computation, and with MK_RPG == 1 nothing more); when a
// row (MK_RPG > 1: of the threadgroup) may hold |x| >= 2^48, redone times the row's power of
// two S (mk_pow2_scale of its max |x|). Returns (mean, variance) of the values times S, and
// S. Reductions, each on another array than the one before: red0, red1 (mk_row_moments),
// [red2: the group's test], then the row's max |x| and the moments again.
#define NM_REDO_MAX (MK_RPG > 1 ? red0 : red2)
#define NM_REDO_M0 (MK_RPG > 1 ? red1 : red0)
#define NM_REDO_M1 (MK_RPG > 1 ? red2 : red1)
template <typename T>
inline float3 nm_stream_row(const device T* x, int base, mk_span sp, int t, bool centered,
                            float n, threadgroup float* red0, threadgroup float* red1,
                            threadgroup float* red2, uint tid, uint lane, uint sg)
{
    float3 m = nm_stream_moments<T, false>(x, base, sp, t, centered, 1.0f);
    float2 mv = mk_row_moments(m.x, m.y, m.z, n, centered, red0, red1, tid, lane, sg, MK_TPR);
    float S = 1.0f;
    if (nm_row_large(mv, n, red2, tid, lane, sg)) {
        S = mk_pow2_scale(mk_row_max(nm_stream_absmax(x, base, sp, t), NM_REDO_MAX, tid, lane,
                                     sg, MK_TPR));
        m = nm_stream_moments<T, true>(x, base, sp, t, centered, S);
        mv = mk_row_moments(m.x, m.y, m.z, n, centered, NM_REDO_M0, NM_REDO_M1, tid, lane, sg,
                            MK_TPR);
    }
    return float3(mv.x, mv.y, S);
}

// The same for a row held in registers (scaled in place when S != 1).
inline float3 nm_held_row(thread mk_rowvals& v, mk_span sp, int t, bool centered, float n,
                          threadgroup float* red0, threadgroup float* red1,
                          threadgroup float* red2, uint tid, uint lane, uint sg)
{
    float3 tm = nm_thread_moments(v, sp, t, centered);
    float2 mv = mk_row_moments(tm.x, tm.y, tm.z, n, centered, red0, red1, tid, lane, sg,
                               MK_TPR);
    float S = 1.0f;
    if (nm_row_large(mv, n, red2, tid, lane, sg)) {
        S = mk_pow2_scale(mk_row_max(mk_rv_absmax(v), NM_REDO_MAX, tid, lane, sg, MK_TPR));
        nm_scale(v, S);
        tm = nm_thread_moments(v, sp, t, centered);
        mv = mk_row_moments(tm.x, tm.y, tm.z, n, centered, NM_REDO_M0, NM_REDO_M1, tid, lane,
                            sg, MK_TPR);
    }
    return float3(mv.x, mv.y, S);
}

// ---------------------------------------------------------------- layer_norm / rms_norm

// o = (x*S - mean) * rstd, times w[k] plus b[k] (4 columns from k; w and b shifted by
// mk_param_shift for the row)
inline float4 nm_affine4(float4 v, float mean, float rstd, const device float* w,
                         const device float* b, bool has_w, bool has_b, int k)
{
    float4 o = (v - mean) * rstd;
    if (has_w) {
        o *= mk_load4(w, k);
    }
    if (has_b) {
        o += mk_load4(b, k);
    }
    return o;
}

inline float nm_affine1(float v, float mean, float rstd, const device float* w,
                        const device float* b, bool has_w, bool has_b, int k)
{
    float o = (v - mean) * rstd;
    o = has_w ? o * w[k] : o;
    return has_b ? o + b[k] : o;
}

template <typename T>
[[max_total_threads_per_threadgroup(NM_THREADS)]]
kernel void norm_rownorm_rows(const device T* x [[buffer(0)]], const device float* w [[buffer(1)]],
                              const device float* b [[buffer(2)]], device T* y [[buffer(3)]],
                              constant mk_rownorm_args& a [[buffer(4)]],
                              uint group [[threadgroup_position_in_grid]],
                              uint tid [[thread_position_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float red0[NM_THREADS / 32];
    threadgroup float red1[NM_THREADS / 32];
    threadgroup float red2[NM_THREADS / 32];
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int n = row < a.rows ? a.n : 0;
    const int base = n > 0 ? row * a.n : 0;
    const mk_span sp = mk_row_span<T>(base, n);
    mk_rowvals v;
    mk_rv_load(v, x, base, sp, t, 0.0f);
    const bool centered = a.kind == MK_NORM_LAYER;
    const float3 ms = nm_held_row(v, sp, t, centered, float(a.n), red0, red1, red2, tid, lane,
                                  sg);
    const float rstd = rsqrt(ms.y + a.eps * ms.z * ms.z);
    const bool hw = a.has_weight != 0, hb = a.has_bias != 0;
    const int ps = mk_param_shift(sp.head, a.n);
    const device float* wr = w + ps;
    const device float* br = b + ps;
    for (int j = 0; j < MK_RV_NV; ++j) {
        if (mk_live_v(sp, t, j)) {
            v.v[j] = nm_affine4(v.v[j], ms.x, rstd, wr, br, hw, hb, mk_col_v(sp, t, j));
        }
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        if (mk_live_h(sp, t, j)) {
            v.h[j] = nm_affine1(v.h[j], ms.x, rstd, wr, br, hw, hb, mk_col_h(t, j));
        }
    }
    if (mk_live_t(sp, t)) {
        v.tl = nm_affine1(v.tl, ms.x, rstd, wr, br, hw, hb, mk_col_t(sp, t));
    }
    mk_rv_store(y, base, sp, t, v);
}

template <typename T>
[[max_total_threads_per_threadgroup(NM_THREADS)]]
kernel void norm_rownorm_looped(const device T* x [[buffer(0)]],
                                const device float* w [[buffer(1)]],
                                const device float* b [[buffer(2)]], device T* y [[buffer(3)]],
                                constant mk_rownorm_args& a [[buffer(4)]],
                                uint group [[threadgroup_position_in_grid]],
                                uint tid [[thread_position_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]],
                                uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float red0[NM_THREADS / 32];
    threadgroup float red1[NM_THREADS / 32];
    threadgroup float red2[NM_THREADS / 32];
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int n = row < a.rows ? a.n : 0;
    const int base = n > 0 ? row * a.n : 0;
    const mk_span sp = mk_row_span<T>(base, n);
    const bool centered = a.kind == MK_NORM_LAYER;
    const float3 ms = nm_stream_row(x, base, sp, t, centered, float(a.n), red0, red1, red2, tid,
                                    lane, sg);
    const float S = ms.z;
    const float rstd = rsqrt(ms.y + a.eps * S * S);
    const bool hw = a.has_weight != 0, hb = a.has_bias != 0;
    const int ps = mk_param_shift(sp.head, a.n);
    const device float* wr = w + ps;
    const device float* br = b + ps;
    for (int k = t; k < sp.head; k += MK_TPR) {
        y[base + k] = T(nm_affine1(float(x[base + k]) * S, ms.x, rstd, wr, br, hw, hb, k));
    }
    for (int i = t; i < sp.nvec; i += MK_TPR) {
        const int k = sp.head + 4 * i;
        mk_store4(y, base + k, nm_affine4(mk_load4(x, base + k) * S, ms.x, rstd, wr, br, hw,
                                          hb, k));
    }
    if (t < sp.tail) {
        const int k = sp.head + 4 * sp.nvec + t;
        y[base + k] = T(nm_affine1(float(x[base + k]) * S, ms.x, rstd, wr, br, hw, hb, k));
    }
}

// ---------------------------------------------------------------- group_norm

// A group's row is its C/groups channels of HW elements, back to back; a thread walks its
// columns in increasing order and tracks the channel without a division per element
// (gn_at once, then gn_step / gn_next). The channels' weight and bias are staged in
// threadgroup memory (GN_TAB pairs shared by the MK_RPG rows) when they fit, so that the
// element loop reads only x from device memory; else from device memory.
#define GN_TAB 512

struct gn_chan {
    int c;          // channel within the group
    int off;        // column within the channel
};

inline gn_chan gn_at(int k, int hw)
{
    gn_chan g;
    g.c = k / hw;
    g.off = k - g.c * hw;
    return g;
}

inline void gn_next(thread gn_chan& g, int hw)   // one column on
{
    if (++g.off == hw) {
        g.off = 0;
        ++g.c;
    }
}

inline void gn_step(thread gn_chan& g, int dq, int dr, int hw)   // dq*hw + dr columns on
{
    g.c += dq;
    g.off += dr;
    if (g.off >= hw) {
        g.off -= hw;
        ++g.c;
    }
}

struct gn_params {
    const device float* w;
    const device float* b;
    threadgroup float2* tab;    // this row's (w, b) pairs, or null: read w, b
    int c0;                     // the group's first channel
    bool has_w;
    bool has_b;
};

inline float gn_apply(float v, float mean, float rstd, thread const gn_params& p, int c)
{
    float o = (v - mean) * rstd;
    if (p.tab) {
        const float2 wb = p.tab[c];
        return o * wb.x + wb.y;
    }
    o = p.has_w ? o * p.w[p.c0 + c] : o;
    return p.has_b ? o + p.b[p.c0 + c] : o;
}

inline float4 gn_apply4(float4 v, float mean, float rstd, thread const gn_params& p, gn_chan g,
                        int hw)
{
    float4 o;
    o.x = gn_apply(v.x, mean, rstd, p, g.c);
    gn_next(g, hw);
    o.y = gn_apply(v.y, mean, rstd, p, g.c);
    gn_next(g, hw);
    o.z = gn_apply(v.z, mean, rstd, p, g.c);
    gn_next(g, hw);
    o.w = gn_apply(v.w, mean, rstd, p, g.c);
    return o;
}

// The row's parameters; stages them in `tab` (GN_TAB pairs) when every row's fit. Holds a
// barrier: every thread of the threadgroup calls it.
inline gn_params gn_stage(const device float* w, const device float* b,
                          constant mk_group_norm_args& a, threadgroup float2* tab, int row,
                          int t, uint tid)
{
    const int cg = a.C / a.groups;
    gn_params p;
    p.w = w;
    p.b = b;
    p.has_w = a.has_weight != 0;
    p.has_b = a.has_bias != 0;
    p.c0 = (row % a.groups) * cg;
    p.tab = nullptr;
    if (cg * MK_RPG <= GN_TAB) {
        threadgroup float2* mine = tab + int(tid / MK_TPR) * cg;
        for (int c = t; c < cg; c += MK_TPR) {
            mine[c] = float2(p.has_w ? w[p.c0 + c] : 1.0f, p.has_b ? b[p.c0 + c] : 0.0f);
        }
        p.tab = mine;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return p;
}

template <typename T>
[[max_total_threads_per_threadgroup(NM_THREADS)]]
kernel void norm_group_rows(const device T* x [[buffer(0)]], const device float* w [[buffer(1)]],
                            const device float* b [[buffer(2)]], device T* y [[buffer(3)]],
                            constant mk_group_norm_args& a [[buffer(4)]],
                            uint group [[threadgroup_position_in_grid]],
                            uint tid [[thread_position_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float red0[NM_THREADS / 32];
    threadgroup float red1[NM_THREADS / 32];
    threadgroup float red2[NM_THREADS / 32];
    threadgroup float2 tab[GN_TAB];
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int hw = a.HW;
    const int len = a.C / a.groups * hw;
    const int n = row < a.N * a.groups ? len : 0;
    const int base = n > 0 ? row * len : 0;
    const mk_span sp = mk_row_span<T>(base, n);
    mk_rowvals v;
    mk_rv_load(v, x, base, sp, t, 0.0f);
    const float3 ms = nm_held_row(v, sp, t, true, float(len), red0, red1, red2, tid, lane, sg);
    const float rstd = rsqrt(ms.y + a.eps * ms.z * ms.z);
    const gn_params p = gn_stage(w, b, a, tab, row, t, tid);
    // vector j of this thread starts 4*MK_TPR columns after vector j-1
    const int dq = 4 * MK_TPR / hw, dr = 4 * MK_TPR - dq * hw;
    gn_chan g = gn_at(mk_col_v(sp, t, 0), hw);
    for (int j = 0; j < MK_RV_NV; ++j) {
        if (mk_live_v(sp, t, j)) {
            v.v[j] = gn_apply4(v.v[j], ms.x, rstd, p, g, hw);
        }
        gn_step(g, dq, dr, hw);
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        if (mk_live_h(sp, t, j)) {
            v.h[j] = gn_apply(v.h[j], ms.x, rstd, p, mk_col_h(t, j) / hw);
        }
    }
    if (mk_live_t(sp, t)) {
        v.tl = gn_apply(v.tl, ms.x, rstd, p, mk_col_t(sp, t) / hw);
    }
    mk_rv_store(y, base, sp, t, v);
}

template <typename T>
[[max_total_threads_per_threadgroup(NM_THREADS)]]
kernel void norm_group_looped(const device T* x [[buffer(0)]], const device float* w [[buffer(1)]],
                              const device float* b [[buffer(2)]], device T* y [[buffer(3)]],
                              constant mk_group_norm_args& a [[buffer(4)]],
                              uint group [[threadgroup_position_in_grid]],
                              uint tid [[thread_position_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float red0[NM_THREADS / 32];
    threadgroup float red1[NM_THREADS / 32];
    threadgroup float red2[NM_THREADS / 32];
    threadgroup float2 tab[GN_TAB];
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int hw = a.HW;
    const int len = a.C / a.groups * hw;
    const int n = row < a.N * a.groups ? len : 0;
    const int base = n > 0 ? row * len : 0;
    const mk_span sp = mk_row_span<T>(base, n);
    const float3 ms = nm_stream_row(x, base, sp, t, true, float(len), red0, red1, red2, tid,
                                    lane, sg);
    const float S = ms.z;
    const float rstd = rsqrt(ms.y + a.eps * S * S);
    const gn_params p = gn_stage(w, b, a, tab, row, t, tid);
    for (int k = t; k < sp.head; k += MK_TPR) {
        y[base + k] = T(gn_apply(float(x[base + k]) * S, ms.x, rstd, p, k / hw));
    }
    const int dq = 4 * MK_TPR / hw, dr = 4 * MK_TPR - dq * hw;
    gn_chan g = gn_at(sp.head + 4 * t, hw);
    for (int i = t; i < sp.nvec; i += MK_TPR) {
        const int at = base + sp.head + 4 * i;
        mk_store4(y, at, gn_apply4(mk_load4(x, at) * S, ms.x, rstd, p, g, hw));
        gn_step(g, dq, dr, hw);
    }
    if (t < sp.tail) {
        const int k = sp.head + 4 * sp.nvec + t;
        y[base + k] = T(gn_apply(float(x[base + k]) * S, ms.x, rstd, p, k / hw));
    }
}

// ---------------------------------------------------------------- batch_norm

// Moments of one chunk of a channel (split chunks per channel, so that few channels with
// many elements still fill the GPU): partial[4*r .. 4*r+3] = (count, mean, M2, S) of row r =
// channel * split + chunk, of the chunk's values times the power of two S: 1 for ordinary
// chunks (exactly the plain computation), mk_pow2_scale of the chunk's max |x| when the chunk
// (MK_RPG > 1: a chunk of the threadgroup) may hold |x| >= 2^48 (nm_row_large: float32 M2
// overflows from |x| ~ 1e19). Chunks are never empty (the encoder picks split so).
template <typename T>
inline float3 nm_chunk_welford(const device T* x, constant mk_batch_norm_args& a, int ch,
                               int k0, int k1, int t, float S)
{
    float c = 0.0f;
    float mu = 0.0f;
    float m2 = 0.0f;
    // element k of the channel is column off of image img: stepped by MK_TPR columns
    // without a division per element (gn_chan: "channel" = image here)
    const int dq = MK_TPR / a.HW, dr = MK_TPR - dq * a.HW;
    gn_chan g = gn_at(k0 + t, a.HW);
    for (int k = k0 + t; k < k1; k += MK_TPR) {
        mk_welford(c, mu, m2, float(x[(g.c * a.C + ch) * a.HW + g.off]) * S);
        gn_step(g, dq, dr, a.HW);
    }
    return float3(c, mu, m2);
}

template <typename T>
inline float nm_chunk_absmax(const device T* x, constant mk_batch_norm_args& a, int ch,
                             int k0, int k1, int t)
{
    float m = 0.0f;
    const int dq = MK_TPR / a.HW, dr = MK_TPR - dq * a.HW;
    gn_chan g = gn_at(k0 + t, a.HW);
    for (int k = k0 + t; k < k1; k += MK_TPR) {
        m = max(m, abs(float(x[(g.c * a.C + ch) * a.HW + g.off])));
        gn_step(g, dq, dr, a.HW);
    }
    return m;
}

template <typename T>
[[max_total_threads_per_threadgroup(NM_THREADS)]]
kernel void norm_batch_stats(const device T* x [[buffer(0)]], device float* partial [[buffer(1)]],
                             constant mk_batch_norm_args& a [[buffer(2)]],
                             constant int& split [[buffer(3)]],
                             uint group [[threadgroup_position_in_grid]],
                             uint tid [[thread_position_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float red0[NM_THREADS / 32];
    threadgroup float red1[NM_THREADS / 32];
    threadgroup float red2[NM_THREADS / 32];
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const bool live = row < a.C * split;
    const int ch = live ? row / split : 0;
    const int count = a.N * a.HW;
    const int chunk = (count + split - 1) / split;
    const int k0 = live ? (row - ch * split) * chunk : 0;
    const int k1 = live ? min(k0 + chunk, count) : 0;
    const float n = float(max(k1 - k0, 1));
    float3 m = nm_chunk_welford(x, a, ch, k0, k1, t, 1.0f);
    float2 mv = mk_row_moments(m.x, m.y, m.z, n, true, red0, red1, tid, lane, sg, MK_TPR);
    float S = 1.0f;
    if (nm_row_large(mv, n, red2, tid, lane, sg)) {
        S = mk_pow2_scale(mk_row_max(nm_chunk_absmax(x, a, ch, k0, k1, t), NM_REDO_MAX, tid,
                                     lane, sg, MK_TPR));
        m = nm_chunk_welford(x, a, ch, k0, k1, t, S);
        mv = mk_row_moments(m.x, m.y, m.z, n, true, NM_REDO_M0, NM_REDO_M1, tid, lane, sg,
                            MK_TPR);
    }
    if (t == 0 && live) {
        partial[4 * row] = float(k1 - k0);
        partial[4 * row + 1] = mv.x;
        partial[4 * row + 2] = mv.y * n;
        partial[4 * row + 3] = S;
    }
}

// One thread per channel: combine its chunks' moments exactly (Chan et al.) at the
// channel's scale Sc, the smallest of its chunks' (the others' moments times Sc/S, a power
// of two: exact, and 1 for ordinary channels); store (Sc, mean*Sc, rsqrt(var*Sc^2 +
// eps*Sc^2) * w, b) in params[ch] (norm_batch_apply normalises x*Sc with them: finite where
// the result is, though var itself may pass FLT_MAX) and update the running statistics
// (unbiased; unscaled, so they overflow to inf exactly where float32 must).
template <typename T>
[[max_total_threads_per_threadgroup(32)]]   // gpu/norm.py: helper_threads(fin, 32)
kernel void norm_batch_finish(const device float* partial [[buffer(0)]],
                              device float* running_mean [[buffer(1)]],
                              device float* running_var [[buffer(2)]],
                              device float4* params [[buffer(3)]],
                              constant mk_batch_norm_args& a [[buffer(4)]],
                              constant int& split [[buffer(5)]],
                              const device float* w [[buffer(6)]],
                              const device float* b [[buffer(7)]],
                              uint gid [[thread_position_in_grid]])
{
    const int ch = int(gid);
    if (ch < a.C) {
        float Sc = 1.0f;
        for (int s = 0; s < split; ++s) {
            Sc = min(Sc, partial[4 * (ch * split + s) + 3]);
        }
        float n = 0.0f;
        float mean = 0.0f;
        float m2 = 0.0f;
        for (int s = 0; s < split; ++s) {
            const int at = 4 * (ch * split + s);
            const float r = Sc / partial[at + 3];
            const float nb = partial[at];
            const float d = partial[at + 1] * r - mean;
            const float tot = n + nb;
            mean += d * (nb / tot);
            m2 += partial[at + 2] * (r * r) + d * d * (n * nb / tot);
            n = tot;
        }
        const float var = m2 / n;
        const float rstd = rsqrt(var + a.eps * (Sc * Sc));
        params[ch] = float4(Sc, mean, a.has_weight != 0 ? rstd * w[ch] : rstd,
                            a.has_bias != 0 ? b[ch] : 0.0f);
        if (a.has_running != 0) {
            const float unbiased = (n > 1.0f ? m2 / (n - 1.0f) : var) / Sc / Sc;
            running_mean[ch] = (1.0f - a.momentum) * running_mean[ch] + a.momentum * (mean / Sc);
            running_var[ch] = (1.0f - a.momentum) * running_var[ch] + a.momentum * unbiased;
        }
    }
}

// One float4 per channel (S, mean, k, bias): y = (x*S - mean) * k + bias, k = rsqrt(var +
// eps*S^2) * w (the weight joins the scale first: (x - mean) * rstd alone can overflow where
// the result, |w| < 1, is representable). Statistics of x*S (norm_batch_finish; inference: the
// host's table of the running statistics, S = 1) give (x - mean/S) * rsqrt(var/S^2 + eps)
// without forming var/S^2 (it may pass FLT_MAX).
inline float bn_one(float v, float4 p)
{
    return (v * p.x - p.y) * p.z + p.w;
}

// Four consecutive elements of the flat N*C*HW tensor per thread (gid*4 ..), one float4/half4
// load and store (in bounds: the tensor's last partial vector goes one by one). The channel
// is found once a thread (two divisions) and each channel's parameters are one float4 load:
// at most two channels where HW >= 4 (HW % 4 == 0: one), else a channel per element.
template <typename T>
[[max_total_threads_per_threadgroup(1024)]]   // the batch_norm space's largest `threads`
kernel void norm_batch_apply(const device T* x [[buffer(0)]],
                             const device float4* params [[buffer(1)]],
                             device T* y [[buffer(2)]],
                             constant mk_batch_norm_args& a [[buffer(3)]],
                             uint gid [[thread_position_in_grid]])
{
    const int total = a.N * a.C * a.HW;
    const int i0 = 4 * int(gid);
    if (i0 >= total) {
        return;
    }
    const int plane = i0 / a.HW;
    gn_chan g;
    g.c = plane % a.C;
    g.off = i0 - plane * a.HW;
    const int left = a.HW - g.off;        // elements of this thread's first channel
    if (i0 + 4 <= total) {
        const float4 v = mk_load4(x, i0);
        const float4 p0 = params[g.c];
        float4 o = (v * p0.x - p0.y) * p0.z + p0.w;
        if (left < 4 && a.HW >= 4) {      // the rest in the next channel (C wraps to 0)
            const float4 p1 = params[g.c + 1 == a.C ? 0 : g.c + 1];
            const float4 o1 = (v * p1.x - p1.y) * p1.z + p1.w;
            o = select(o, o1, int4(0, 1, 2, 3) >= int4(left));
        } else if (left < 4) {            // planes of 1-3 elements: a channel each step
            for (int e = 1; e < 4; ++e) {
                if (++g.off == a.HW) {
                    g.off = 0;
                    g.c = g.c + 1 == a.C ? 0 : g.c + 1;
                }
                o[e] = bn_one(v[e], params[g.c]);
            }
        }
        mk_store4(y, i0, o);
        return;
    }
    for (int e = 0; e < 4 && i0 + e < total; ++e) {
        y[i0 + e] = T(bn_one(float(x[i0 + e]), params[g.c]));
        if (++g.off == a.HW) {
            g.off = 0;
            g.c = g.c + 1 == a.C ? 0 : g.c + 1;
        }
    }
}


// The kernels, one per dtype (mk_common.h): <name>_f32, <name>_f16.
MK_PER_DTYPE(norm_rownorm_rows)
MK_PER_DTYPE(norm_rownorm_looped)
MK_PER_DTYPE(norm_group_rows)
MK_PER_DTYPE(norm_group_looped)
MK_PER_DTYPE(norm_batch_stats)
MK_PER_DTYPE(norm_batch_apply)
MK_INSTANTIATE(norm_batch_finish, float, f32)     // serves both dtypes (float32 statistics)
