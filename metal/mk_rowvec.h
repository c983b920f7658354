// mk_rowvec.h: a contiguous row read and written as whole vectors (float4 / half4), for the
// row kernels of softmax.metal and norm.metal. Include after MK_TPR / MK_VPT are defined.
//
// A row of n elements starting at element `base` of its buffer is cut (mk_row_span) into
//   head  scalar elements up to the first 128-byte line boundary (buffers start on one),
//   nvec  naturally aligned 4-element vectors, so a SIMD-group's 32 vector accesses fill
//         whole lines (4 lines of float4, 2 of half4: coalescing 100%),
//   tail  (< 4) scalar elements.
// Thread t of the row's MK_TPR handles vectors t, t + MK_TPR, ... and head elements t,
// t + MK_TPR, ..., and tail element t. The "rows" variants hold these in an mk_rowvals
// (MK_VPT values per thread round up to whole vectors; the fits rule n <= MK_TPR*MK_VPT
// is enough: nvec <= n/4).
//
// Huge rows: statistics of values near FLT_MAX overflow float (sums of x, of squares);
// mk_pow2_scale gives the power of two that brings a row's max |x| to [2^8, 2^9) when it is
// at least 2^48 (then n * x^2 cannot overflow), else exactly 1, so ordinary rows compute
// exactly what they did without it. Built from the float's bits: no comparison with
// infinity for fast math to fold; a non-finite max gives 1.
#ifndef MK_ROWVEC_H
#define MK_ROWVEC_H

#include <metal_stdlib>
using namespace metal;

#define MK_RV_NV ((MK_VPT + 3) / 4)             // vectors per thread
#define MK_RV_HEADS ((64 + MK_TPR - 1) / MK_TPR) // head elements per thread (a line of half)

struct mk_span {
    int head;
    int nvec;
    int tail;
};

template <typename T>
inline mk_span mk_row_span(int base, int n)
{
    const int line = 128 / int(sizeof(T));      // elements per 128-byte line
    mk_span s;
    s.head = min(n, (line - (base & (line - 1))) & (line - 1));
    s.nvec = (n - s.head) >> 2;
    s.tail = n - s.head - 4 * s.nvec;
    return s;
}

// Column (index in the row) of a thread's j-th vector, j-th head element, tail element.
inline int mk_col_v(mk_span s, int t, int j) { return s.head + 4 * (t + j * MK_TPR); }
inline int mk_col_h(int t, int j) { return t + j * MK_TPR; }
inline int mk_col_t(mk_span s, int t) { return s.head + 4 * s.nvec + t; }
inline bool mk_live_v(mk_span s, int t, int j) { return t + j * MK_TPR < s.nvec; }
inline bool mk_live_h(mk_span s, int t, int j) { return t + j * MK_TPR < s.head; }
inline bool mk_live_t(mk_span s, int t) { return t < s.tail; }

template <typename T>
inline float4 mk_load4(const device T* p, int at)
{
    return float4(*((const device vec<T, 4>*)(p + at)));
}

template <typename T>
inline void mk_store4(device T* p, int at, float4 v)
{
    *((device vec<T, 4>*)(p + at)) = vec<T, 4>(v);
}

// Where a row's float32 parameters (weight / bias, n columns) start so that its vector
// columns k (head + 4i) load 4-wide: the host passes them as they are when n % 4 == 0 (every
// row 4-aligned), else 4 copies, copy h (a row's head mod 4) at h*C + (4 - h) % 4, C =
// n rounded up to 4 plus 4 (gpu/norm.py params4). (Realigning one copy in the kernel, or 4
// scalar loads on unaligned rows, made clang scalarise the aligned rows' loads too.)
inline int mk_param_shift(int head, int n)
{
    const int h = head & 3;
    return h == 0 ? 0 : h * (((n + 3) & ~3) + 4) + 4 - h;
}

// The values of one row a thread holds ("rows" variants); dead entries hold `fill`.
struct mk_rowvals {
    float4 v[MK_RV_NV];
    float h[MK_RV_HEADS];
    float tl;
};

template <typename T>
inline void mk_rv_load(thread mk_rowvals& r, const device T* x, int base, mk_span s, int t,
                       float fill)
{
    for (int j = 0; j < MK_RV_NV; ++j) {
        r.v[j] = float4(fill);
        if (mk_live_v(s, t, j)) {
            r.v[j] = mk_load4(x, base + mk_col_v(s, t, j));
        }
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        r.h[j] = mk_live_h(s, t, j) ? float(x[base + mk_col_h(t, j)]) : fill;
    }
    r.tl = mk_live_t(s, t) ? float(x[base + mk_col_t(s, t)]) : fill;
}

template <typename T>
inline void mk_rv_store(device T* y, int base, mk_span s, int t, thread const mk_rowvals& r)
{
    for (int j = 0; j < MK_RV_NV; ++j) {
        if (mk_live_v(s, t, j)) {
            mk_store4(y, base + mk_col_v(s, t, j), r.v[j]);
        }
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        if (mk_live_h(s, t, j)) {
            y[base + mk_col_h(t, j)] = T(r.h[j]);
        }
    }
    if (mk_live_t(s, t)) {
        y[base + mk_col_t(s, t)] = T(r.tl);
    }
}

// max |x| over the live values (fill them with 0)
inline float mk_rv_absmax(thread const mk_rowvals& r)
{
    float m = 0.0f;
    for (int j = 0; j < MK_RV_NV; ++j) {
        const float4 a = abs(r.v[j]);
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    for (int j = 0; j < MK_RV_HEADS; ++j) {
        m = max(m, abs(r.h[j]));
    }
    return max(m, abs(r.tl));
}

inline float mk_pow2_scale(float amax)
{
    const uint e = (as_type<uint>(amax) >> 23) & 0xffu;      // biased exponent
    return (e >= 127u + 48u && e < 255u) ? as_type<float>((262u - e) << 23) : 1.0f;
}

#endif
