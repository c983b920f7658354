// softmax.metal: softmax and log_softmax along n of x viewed as (outer, n, inner).
// Row (o, i) holds the n elements x[o*n*inner + k*inner + i], k = 0..n-1.
//
//   softmax_rows_<dt>    MK_TPR threads per row, MK_RPG rows per threadgroup, the row held in
//                        registers (MK_VPT values per thread, so n <= MK_TPR*MK_VPT):
//                        one read of x, a max and a sum reduction, one write.
//   softmax_looped_<dt>  any n: an online (single pass) max/sum per thread, the partial
//                        (max, sum) pairs combined over the row, then a pass that writes.
//   softmax_cols_<dt>    inner > 1 with many rows: one thread per row, so neighbouring
//                        threads read neighbouring addresses (the rows are strided).
//
// Configuration (macros): MK_TPR threads per row (multiple of 32), MK_RPG rows per
// threadgroup, MK_VPT values per thread for the rows variant; MK_TPR*MK_RPG <= 1024.
// Dispatch: rows/looped: ceil(outer*inner / MK_RPG) threadgroups of MK_TPR*MK_RPG threads;
// cols: outer*inner threads (any threadgroup size).
// Contiguous rows (inner == 1) are read and written as float4/half4 vectors (mk_rowvec.h);
// exp(x - max) is kept and multiplied by 1/sum (rows), or computed once more in the
// writing pass (looped, cols: the row is not held). float32 accumulation for both storage
// types.
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
#define SM_THREADS (MK_TPR * MK_RPG)

static_assert(MK_TPR % 32 == 0, "MK_TPR must be a multiple of the SIMD width (32)");
static_assert(SM_THREADS <= 1024, "MK_TPR * MK_RPG must be at most 1024 threads");
static_assert(MK_VPT >= 1, "MK_VPT must be at least 1");

#include "mk_rowvec.h"

// The row a thread works on, where it starts and how far apart its elements are.
struct sm_row {
    int base;
    int step;
    bool live;
};

inline sm_row sm_locate(constant mk_softmax_args& a, int row)
{
    sm_row r;
    r.live = row < a.outer * a.inner;
    // contiguous rows (inner == 1) need no division (no Apple GPU has an integer divide)
    const int o = !r.live ? 0 : (a.inner == 1 ? row : row / a.inner);
    const int i = !r.live || a.inner == 1 ? 0 : row - o * a.inner;
    r.base = o * a.n * a.inner + i;
    r.step = a.inner;
    return r;
}

// Maxima start at -FLT_MAX, not -inf: then no expression ever forms exp(-inf - -inf), and
// nothing depends on comparisons with infinities, which Metal's default fast math may fold.
// -inf inputs (masks) add exp(-inf) = 0; a row of only -inf ends with a sum of 0 and gives
// NaN, and a NaN input poisons its row, both as in torch (under IEEE semantics).
#define SM_LOWEST (-FLT_MAX)

// Fold x into an online (max m, sum s of exp(. - m)) pair. A new maximum adds its own
// term as exp(x - x), not 1: for x = +inf that is NaN, so the row becomes NaN, as torch
// (and the register-resident variant) give.
inline void sm_online(thread float& m, thread float& s, float x)
{
    if (x > m) {
        s = s * exp(m - x) + exp(x - x);
        m = x;
    } else {
        s += exp(x - m);
    }
}

// A contiguous row (inner == 1) in registers (mk_rowvec.h: float4/half4 reads and writes,
// whole 128-byte lines per SIMD-group); exp(x - max) is computed once, kept, and multiplied
// by the reciprocal of the row sum.
template <typename T>
inline void softmax_rows_vec(const device T* x, device T* y, constant mk_softmax_args& a,
                             sm_row r, threadgroup float* red_max, threadgroup float* red_sum,
                             int t, uint tid, uint lane, uint sg)
{
    const mk_span sp = mk_row_span<T>(r.base, r.live ? a.n : 0);
    mk_rowvals v;
    mk_rv_load(v, x, r.base, sp, t, SM_LOWEST);
    float m = SM_LOWEST;
    for (int j = 0; j < MK_RV_NV; ++j) {
        m = max(m, max(max(v.v[j].x, v.v[j].y), max(v.v[j].z, v.v[j].w)));
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        m = max(m, v.h[j]);
    }
    m = mk_row_max(max(m, v.tl), red_max, tid, lane, sg, MK_TPR);
    // log_softmax keeps x (x - m - log(s)); softmax replaces it by exp(x - m)
    const bool keep = a.log != 0;
    float s = 0.0f;
    for (int j = 0; j < MK_RV_NV; ++j) {
        if (mk_live_v(sp, t, j)) {
            const float4 e = exp(v.v[j] - m);
            s += (e.x + e.y) + (e.z + e.w);
            v.v[j] = keep ? v.v[j] : e;
        }
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        if (mk_live_h(sp, t, j)) {
            const float e = exp(v.h[j] - m);
            s += e;
            v.h[j] = keep ? v.h[j] : e;
        }
    }
    if (mk_live_t(sp, t)) {
        const float e = exp(v.tl - m);
        s += e;
        v.tl = keep ? v.tl : e;
    }
    s = mk_row_sum(s, red_sum, tid, lane, sg, MK_TPR);
    // y = e * (1/s), or (x - m) - log s: never x - (m + log s), which rounds log s to the
    // float spacing of m (|m| = 1e4: 1e-3)
    const float mul = keep ? 1.0f : 1.0f / s;
    const float sub = keep ? m : 0.0f;
    const float lsum = keep ? log(s) : 0.0f;
    for (int j = 0; j < MK_RV_NV; ++j) {
        v.v[j] = (v.v[j] - sub - lsum) * mul;
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        v.h[j] = (v.h[j] - sub - lsum) * mul;
    }
    v.tl = (v.tl - sub - lsum) * mul;
    mk_rv_store(y, r.base, sp, t, v);
}

// Strided rows (inner > 1, too few for the cols variant): one element per thread and step.
template <typename T>
inline void softmax_rows_strided(const device T* x, device T* y, constant mk_softmax_args& a,
                                 sm_row r, threadgroup float* red_max,
                                 threadgroup float* red_sum, int t, uint tid, uint lane,
                                 uint sg)
{
    float v[MK_VPT];
    float m = SM_LOWEST;
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        v[j] = (r.live && k < a.n) ? float(x[r.base + k * r.step]) : SM_LOWEST;
        m = max(m, v[j]);
    }
    m = mk_row_max(m, red_max, tid, lane, sg, MK_TPR);
    float s = 0.0f;
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        if (r.live && k < a.n) {
            v[j] = exp(v[j] - m);
            s += v[j];
        }
    }
    s = mk_row_sum(s, red_sum, tid, lane, sg, MK_TPR);
    const float inv = 1.0f / s;
    const float lsum = log(s);
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        if (r.live && k < a.n) {
            const int at = r.base + k * r.step;
            // log_softmax from x again, not log(exp): exp(x - m) may underflow to 0
            y[at] = a.log != 0 ? T(float(x[at]) - m - lsum) : T(v[j] * inv);
        }
    }
}

template <typename T>
[[max_total_threads_per_threadgroup(SM_THREADS)]]
kernel void softmax_rows(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                         constant mk_softmax_args& a [[buffer(2)]],
                         uint group [[threadgroup_position_in_grid]],
                         uint tid [[thread_position_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float red_max[SM_THREADS / 32];
    threadgroup float red_sum[SM_THREADS / 32];
    const int t = int(tid % MK_TPR);
    const sm_row r = sm_locate(a, int(group) * MK_RPG + int(tid / MK_TPR));
    if (a.inner == 1) {
        softmax_rows_vec<T>(x, y, a, r, red_max, red_sum, t, tid, lane, sg);
    } else {
        softmax_rows_strided<T>(x, y, a, r, red_max, red_sum, t, tid, lane, sg);
    }
}

// Fold the 4 values of a vector into the online pair: one rescale per new maximum.
inline void sm_online4(thread float& m, thread float& s, float4 x)
{
    const float mx = max(max(x.x, x.y), max(x.z, x.w));
    if (mx > m) {
        s *= exp(m - mx);
        m = mx;
    }
    const float4 e = exp(x - m);
    s += (e.x + e.y) + (e.z + e.w);
}

template <typename T>
[[max_total_threads_per_threadgroup(SM_THREADS)]]
kernel void softmax_looped(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                           constant mk_softmax_args& a [[buffer(2)]],
                           uint group [[threadgroup_position_in_grid]],
                           uint tid [[thread_position_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]],
                           uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float red_max[SM_THREADS / 32];
    threadgroup float red_sum[SM_THREADS / 32];
    const int t = int(tid % MK_TPR);
    const sm_row r = sm_locate(a, int(group) * MK_RPG + int(tid / MK_TPR));
    const int n = r.live ? a.n : 0;
    // contiguous rows: scalar head and tail, vectors between (mk_rowvec.h); strided rows:
    // all of it "head", one element per step
    const bool contiguous = a.inner == 1;
    mk_span sp = {n, 0, 0};
    if (contiguous) {
        sp = mk_row_span<T>(r.base, n);
    }
    float m = SM_LOWEST;
    float s = 0.0f;
    for (int k = t; k < sp.head; k += MK_TPR) {
        sm_online(m, s, float(x[r.base + k * r.step]));
    }
    for (int i = t; i < sp.nvec; i += MK_TPR) {
        sm_online4(m, s, mk_load4(x, r.base + sp.head + 4 * i));
    }
    if (t < sp.tail) {
        sm_online(m, s, float(x[r.base + sp.head + 4 * sp.nvec + t]));
    }
    const float row_m = mk_row_max(m, red_max, tid, lane, sg, MK_TPR);
    // rescale this thread's sum to the row maximum (a thread without elements has s = 0)
    const float part = s * exp(m - row_m);
    const float row_s = mk_row_sum(part, red_sum, tid, lane, sg, MK_TPR);
    // y = exp(x - m) * (1/s) or (x - m) - log s (not x - (m + log s): see softmax_rows)
    const bool lg = a.log != 0;
    const float mul = lg ? 1.0f : 1.0f / row_s;
    const float sub = row_m;
    const float lsum = lg ? log(row_s) : 0.0f;
    for (int k = t; k < sp.head; k += MK_TPR) {
        const int at = r.base + k * r.step;
        const float d = float(x[at]) - sub - lsum;
        y[at] = T(lg ? d : exp(d) * mul);
    }
    for (int i = t; i < sp.nvec; i += MK_TPR) {
        const int at = r.base + sp.head + 4 * i;
        float4 d = mk_load4(x, at) - sub - lsum;
        if (!lg) {
            d = exp(d) * mul;
        }
        mk_store4(y, at, d);
    }
    if (t < sp.tail) {
        const int at = r.base + sp.head + 4 * sp.nvec + t;
        const float d = float(x[at]) - sub - lsum;
        y[at] = T(lg ? d : exp(d) * mul);
    }
}

template <typename T>
[[max_total_threads_per_threadgroup(1024)]]   // the softmax_cols space's largest threadgroup
kernel void softmax_cols(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                         constant mk_softmax_args& a [[buffer(2)]],
                         uint gid [[thread_position_in_grid]])
{
    const sm_row r = sm_locate(a, int(gid));
    if (r.live) {
        float m = SM_LOWEST;
        float s = 0.0f;
        for (int k = 0; k < a.n; ++k) {
            sm_online(m, s, float(x[r.base + k * r.step]));
        }
        const bool lg = a.log != 0;
        const float mul = lg ? 1.0f : 1.0f / s;
        const float sub = m;
        const float lsum = lg ? log(s) : 0.0f;      // (x - m) - log s: see softmax_rows
        for (int k = 0; k < a.n; ++k) {
            const int at = r.base + k * r.step;
            const float d = float(x[at]) - sub - lsum;
            y[at] = T(lg ? d : exp(d) * mul);
        }
    }
}

MK_PER_DTYPE(softmax_rows)
MK_PER_DTYPE(softmax_looped)
MK_PER_DTYPE(softmax_cols)
