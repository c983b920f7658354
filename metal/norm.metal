// norm.metal: layer_norm, rms_norm, group_norm, batch_norm. Statistics accumulate in
// float32 for both storage types; variance is two-pass (rows held in registers) or Welford
// (looped rows), combined exactly across threads (mk_row_moments): never E[x^2]-E[x]^2.
//
//   norm_rownorm_{rows,looped}_<dt>  layer_norm / rms_norm (mk_rownorm_args.kind) of x
//                                    viewed as (rows, n); weight, bias float32[n].
//   norm_group_{rows,looped}_<dt>    x (N, C, HW): the C/groups channels of a group are
//                                    contiguous, so (n, g) is a row of (C/groups)*HW
//                                    elements; weight, bias float32[C].
//   norm_batch_stats_<dt>            training, x (N, C, HW): moments (count, mean, M2) of
//                                    each of `split` chunks per channel;
//   norm_batch_finish_f32            one thread per channel combines them: batch mean and
//                                    biased variance into stats[0:C], stats[C:2C], and the
//                                    running statistics (unbiased variance) when present.
//   norm_batch_apply_<dt>            y = (x - mean[c]) * rsqrt(var[c] + eps) * w[c] + b[c],
//                                    one thread per element: inference binds the running
//                                    statistics as mean/var, training the stats buffer.
//
// Configuration (macros): MK_TPR threads per row (multiple of 32), MK_RPG rows per
// threadgroup, MK_VPT values per thread for the rows variants (n <= MK_TPR*MK_VPT; the
// others ignore it); MK_TPR*MK_RPG <= 1024. Dispatch: rows/looped/stats: ceil(rows /
// MK_RPG) threadgroups of MK_TPR*MK_RPG threads (stats: a row is a chunk of a channel);
// finish: C threads; apply: N*C*HW threads.
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

// Per-thread moments of the values a thread holds in registers (two-pass, exact). RMS
// (centered == false) takes mu = 0 and m2 = the plain sum of squares: moments about a
// running mean would turn one Inf into (Inf - Inf)^2 = NaN for the whole row, where
// torch (and the reference) give 0 for the finite entries and NaN only for the Inf.
inline float3 nm_thread_moments(thread const float* v, int t, int n, bool centered)
{
    float c = 0.0f;
    float s = 0.0f;
    for (int j = 0; j < MK_VPT; ++j) {
        if (t + j * MK_TPR < n) {
            c += 1.0f;
            s += v[j];
        }
    }
    const float mu = c > 0.0f && centered ? s / c : 0.0f;
    float m2 = 0.0f;
    for (int j = 0; j < MK_VPT; ++j) {
        if (t + j * MK_TPR < n) {
            m2 += (v[j] - mu) * (v[j] - mu);
        }
    }
    return float3(c, mu, m2);
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

// ---------------------------------------------------------------- layer_norm / rms_norm

template <typename T>
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
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int n = row < a.rows ? a.n : 0;
    const int base = n > 0 ? row * a.n : 0;
    float v[MK_VPT];
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        v[j] = k < n ? float(x[base + k]) : 0.0f;
    }
    const bool centered = a.kind == MK_NORM_LAYER;
    const float3 tm = nm_thread_moments(v, t, n, centered);
    const float2 mv = mk_row_moments(tm.x, tm.y, tm.z, float(a.n), centered,
                                     red0, red1, tid, lane, sg, MK_TPR);
    const float rstd = rsqrt(mv.y + a.eps);
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        if (k < n) {
            float o = (v[j] - mv.x) * rstd;
            o = a.has_weight != 0 ? o * w[k] : o;
            o = a.has_bias != 0 ? o + b[k] : o;
            y[base + k] = T(o);
        }
    }
}

template <typename T>
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
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int n = row < a.rows ? a.n : 0;
    const int base = n > 0 ? row * a.n : 0;
    const bool centered = a.kind == MK_NORM_LAYER;
    float c = 0.0f;
    float mu = 0.0f;
    float m2 = 0.0f;
    for (int k = t; k < n; k += MK_TPR) {
        nm_step(c, mu, m2, float(x[base + k]), centered);
    }
    const float2 mv = mk_row_moments(c, mu, m2, float(a.n), centered,
                                     red0, red1, tid, lane, sg, MK_TPR);
    const float rstd = rsqrt(mv.y + a.eps);
    for (int k = t; k < n; k += MK_TPR) {
        float o = (float(x[base + k]) - mv.x) * rstd;
        o = a.has_weight != 0 ? o * w[k] : o;
        o = a.has_bias != 0 ? o + b[k] : o;
        y[base + k] = T(o);
    }
}

// ---------------------------------------------------------------- group_norm

template <typename T>
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
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int cg = a.C / a.groups;
    const int len = cg * a.HW;
    const int n = row < a.N * a.groups ? len : 0;
    const int base = n > 0 ? row * len : 0;
    const int c0 = (row % a.groups) * cg;     // first channel of this group
    float v[MK_VPT];
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        v[j] = k < n ? float(x[base + k]) : 0.0f;
    }
    const float3 tm = nm_thread_moments(v, t, n, true);
    const float2 mv = mk_row_moments(tm.x, tm.y, tm.z, float(len), true,
                                     red0, red1, tid, lane, sg, MK_TPR);
    const float rstd = rsqrt(mv.y + a.eps);
    for (int j = 0; j < MK_VPT; ++j) {
        const int k = t + j * MK_TPR;
        if (k < n) {
            const int ch = c0 + k / a.HW;
            float o = (v[j] - mv.x) * rstd;
            o = a.has_weight != 0 ? o * w[ch] : o;
            o = a.has_bias != 0 ? o + b[ch] : o;
            y[base + k] = T(o);
        }
    }
}

template <typename T>
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
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const int cg = a.C / a.groups;
    const int len = cg * a.HW;
    const int n = row < a.N * a.groups ? len : 0;
    const int base = n > 0 ? row * len : 0;
    const int c0 = (row % a.groups) * cg;
    float c = 0.0f;
    float mu = 0.0f;
    float m2 = 0.0f;
    for (int k = t; k < n; k += MK_TPR) {
        mk_welford(c, mu, m2, float(x[base + k]));
    }
    const float2 mv = mk_row_moments(c, mu, m2, float(len), true,
                                     red0, red1, tid, lane, sg, MK_TPR);
    const float rstd = rsqrt(mv.y + a.eps);
    for (int k = t; k < n; k += MK_TPR) {
        const int ch = c0 + k / a.HW;
        float o = (float(x[base + k]) - mv.x) * rstd;
        o = a.has_weight != 0 ? o * w[ch] : o;
        o = a.has_bias != 0 ? o + b[ch] : o;
        y[base + k] = T(o);
    }
}

// ---------------------------------------------------------------- batch_norm

// Moments of one chunk of a channel (split chunks per channel, so that few channels with
// many elements still fill the GPU): partial[3*r .. 3*r+2] = (count, mean, M2) of row r =
// channel * split + chunk. Chunks are never empty (the encoder picks split so).
template <typename T>
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
    const int t = int(tid % MK_TPR);
    const int row = int(group) * MK_RPG + int(tid / MK_TPR);
    const bool live = row < a.C * split;
    const int ch = live ? row / split : 0;
    const int count = a.N * a.HW;
    const int chunk = (count + split - 1) / split;
    const int k0 = live ? (row - ch * split) * chunk : 0;
    const int k1 = live ? min(k0 + chunk, count) : 0;
    float c = 0.0f;
    float mu = 0.0f;
    float m2 = 0.0f;
    for (int k = k0 + t; k < k1; k += MK_TPR) {
        const int img = k / a.HW;
        mk_welford(c, mu, m2, float(x[(img * a.C + ch) * a.HW + (k - img * a.HW)]));
    }
    const float n = float(max(k1 - k0, 1));
    const float2 mv = mk_row_moments(c, mu, m2, n, true, red0, red1, tid, lane, sg, MK_TPR);
    if (t == 0 && live) {
        partial[3 * row] = float(k1 - k0);
        partial[3 * row + 1] = mv.x;
        partial[3 * row + 2] = mv.y * n;
    }
}

// One thread per channel: combine its chunks' moments exactly (Chan et al.), store mean and
// biased variance in stats[0:C], stats[C:2C], update the running statistics (unbiased).
// Statistics are float32 whatever x is: T is unused, only norm_batch_finish_f32 exists.
template <typename T>
kernel void norm_batch_finish(const device float* partial [[buffer(0)]],
                              device float* running_mean [[buffer(1)]],
                              device float* running_var [[buffer(2)]],
                              device float* stats [[buffer(3)]],
                              constant mk_batch_norm_args& a [[buffer(4)]],
                              constant int& split [[buffer(5)]],
                              uint gid [[thread_position_in_grid]])
{
    const int ch = int(gid);
    if (ch < a.C) {
        float n = 0.0f;
        float mean = 0.0f;
        float m2 = 0.0f;
        for (int s = 0; s < split; ++s) {
            const int at = 3 * (ch * split + s);
            const float nb = partial[at];
            const float d = partial[at + 1] - mean;
            const float tot = n + nb;
            mean += d * (nb / tot);
            m2 += partial[at + 2] + d * d * (n * nb / tot);
            n = tot;
        }
        const float var = m2 / n;
        stats[ch] = mean;
        stats[a.C + ch] = var;
        if (a.has_running != 0) {
            const float unbiased = n > 1.0f ? m2 / (n - 1.0f) : var;
            running_mean[ch] = (1.0f - a.momentum) * running_mean[ch] + a.momentum * mean;
            running_var[ch] = (1.0f - a.momentum) * running_var[ch] + a.momentum * unbiased;
        }
    }
}

template <typename T>
kernel void norm_batch_apply(const device T* x [[buffer(0)]],
                             const device float* mean [[buffer(1)]],
                             const device float* var [[buffer(2)]],
                             const device float* w [[buffer(3)]],
                             const device float* b [[buffer(4)]], device T* y [[buffer(5)]],
                             constant mk_batch_norm_args& a [[buffer(6)]],
                             uint gid [[thread_position_in_grid]])
{
    if (int(gid) < a.N * a.C * a.HW) {
        const int ch = (int(gid) / a.HW) % a.C;
        // the weight joins the scale first: (x - mean) * rstd alone can overflow where the
        // result (|w| < 1) is representable
        const float rstd = rsqrt(var[ch] + a.eps);
        float o = (float(x[gid]) - mean[ch]) * (a.has_weight != 0 ? rstd * w[ch] : rstd);
        o = a.has_bias != 0 ? o + b[ch] : o;
        y[gid] = T(o);
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
