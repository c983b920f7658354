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
// float32 accumulation for both storage types.
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
    const int o = r.live ? row / a.inner : 0;
    const int i = r.live ? row % a.inner : 0;
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

template <typename T>
inline T sm_out(float x, float m, float s, bool log_out)
{
    return log_out ? T(x - m - log(s)) : T(exp(x - m) / s);
}

template <typename T>
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
            s += exp(v[j] - m);
        }
    }
    s = mk_row_sum(s, red_sum, tid, lane, sg, MK_TPR);
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        if (r.live && k < a.n) {
            y[r.base + k * r.step] = sm_out<T>(v[j], m, s, a.log != 0);
        }
    }
}

template <typename T>
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
    float m = SM_LOWEST;
    float s = 0.0f;
    for (int k = t; k < n; k += MK_TPR) {
        sm_online(m, s, float(x[r.base + k * r.step]));
    }
    const float row_m = mk_row_max(m, red_max, tid, lane, sg, MK_TPR);
    // rescale this thread's sum to the row maximum (a thread without elements has s = 0)
    const float part = s * exp(m - row_m);
    const float row_s = mk_row_sum(part, red_sum, tid, lane, sg, MK_TPR);
    for (int k = t; k < n; k += MK_TPR) {
        const int at = r.base + k * r.step;
        y[at] = sm_out<T>(float(x[at]), row_m, row_s, a.log != 0);
    }
}

template <typename T>
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
        for (int k = 0; k < a.n; ++k) {
            const int at = r.base + k * r.step;
            y[at] = sm_out<T>(float(x[at]), m, s, a.log != 0);
        }
    }
}

MK_PER_DTYPE(softmax_rows)
MK_PER_DTYPE(softmax_looped)
MK_PER_DTYPE(softmax_cols)
