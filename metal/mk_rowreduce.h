// mk_rowreduce.h: reductions over one "row" handled by TPR consecutive threads of a
// threadgroup (TPR a multiple of 32, so a SIMD-group never spans two rows; a threadgroup
// holds TG/TPR rows). Used by softmax.metal and norm.metal.
//
// Each call holds one threadgroup barrier, so every thread of the threadgroup must make it
// (threads without a row pass the reduction's identity). `scratch` holds TG/32 floats and
// must not be reused by a later call of the same kernel: a fast thread could overwrite an
// entry a slow thread of another SIMD-group has yet to read (use one array per call).
#ifndef MK_ROWREDUCE_H
#define MK_ROWREDUCE_H

#include <metal_stdlib>
using namespace metal;

// The row's sum (or maximum) of v: a SIMD reduction, then one partial per SIMD-group of the row.
inline float mk_row_reduce(float v, bool is_max, threadgroup float* scratch, uint tid, uint lane,
                           uint sg, uint tpr)
{
    const float s = is_max ? simd_max(v) : simd_sum(v);
    if (lane == 0) {
        scratch[sg] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint per_row = tpr / 32;
    const uint first = (tid / tpr) * per_row;
    float r = scratch[first];
    for (uint k = 1; k < per_row; ++k) {
        r = is_max ? max(r, scratch[first + k]) : r + scratch[first + k];
    }
    return r;
}

inline float mk_row_sum(float v, threadgroup float* scratch, uint tid, uint lane, uint sg,
                        uint tpr)
{
    return mk_row_reduce(v, false, scratch, tid, lane, sg, tpr);
}

inline float mk_row_max(float v, threadgroup float* scratch, uint tid, uint lane, uint sg,
                        uint tpr)
{
    return mk_row_reduce(v, true, scratch, tid, lane, sg, tpr);
}

// Mean and variance of a row from per-thread moments (count c, mean mu, sum of squared
// deviations m2; two-pass or Welford per thread), combined exactly (Chan et al.):
// mean = sum(c*mu)/n, M2 = sum(m2 + c*(mu - mean)^2). centered == false (RMS) takes
// mean = 0 and expects mu = 0 and m2 = the thread's sum of squares (not moments about its
// own mean: an Inf there gives (Inf - Inf)^2 = NaN for the whole row). Two reductions:
// scratch0 and scratch1 must be distinct. Returns (mean, biased variance or mean square).
inline float2 mk_row_moments(float c, float mu, float m2, float n, bool centered,
                             threadgroup float* scratch0, threadgroup float* scratch1,
                             uint tid, uint lane, uint sg, uint tpr)
{
    const float total = mk_row_sum(c * mu, scratch0, tid, lane, sg, tpr);
    const float mean = centered ? total / n : 0.0f;
    const float dev = mu - mean;
    const float ss = mk_row_sum(m2 + c * dev * dev, scratch1, tid, lane, sg, tpr);
    return float2(mean, ss / n);
}

// One Welford step: count c, running mean mu, running sum of squared deviations m2.
inline void mk_welford(thread float& c, thread float& mu, thread float& m2, float x)
{
    c += 1.0f;
    const float d = x - mu;
    mu += d / c;
    m2 += d * (x - mu);
}

#endif
