// mk_cpu_vecmath.h: branch-free float math that the compiler vectorises inside straight
// loops (libm's expf is a call per element and blocks vectorisation).
#ifndef MK_CPU_VECMATH_H
#define MK_CPU_VECMATH_H
#include <stdint.h>
#include <string.h>

// always inlined: they must be compiled into each multiversioned caller with its ISA
// (an out-of-line copy would use the baseline one and pass vectors through memory)
#define MK_INLINE static inline __attribute__((always_inline))

MK_INLINE float mk_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// exp(x) with a few ulp error on [-87.3, 88.37]; 0 below (values under ~1.2e-38 flush to 0),
// +inf above (exact exp overflows only past 88.72: callers here pass x <= 0), NaN -> NaN.
// x = n*ln2 + r with |r| <= ln2/2; exp(r) by a degree-6 polynomial; 2^n from the exponent bits.
MK_INLINE float mk_expf(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.37f ? 88.37f : x);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   // round to nearest
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    float scale = mk_bits_to_float((uint32_t)((int32_t)n + 127) << 23);
    float v = p * scale;
    v = x < -87.3f ? 0.0f : v;
    return x > 88.37f ? __builtin_inff() : v;
}


/* 8-float vectors (GCC/clang vector extensions) for the NaN-aware max, which the compilers
   do not vectorise from a scalar loop: one AVX2 register, two SSE/NEON ones. (16-float
   vectors run badly on AVX2-only machines, split into scalar code.) */
typedef float mk_v8f __attribute__((vector_size(32)));
typedef int32_t mk_v8i __attribute__((vector_size(32)));

// Reductions keep MK_LANES independent partial sums: float addition is not associative,
// so the compiler vectorises a reduction only when the source spells the lanes out.
#define MK_LANES 16

MK_INLINE float mk_vsum(const float *x, long n) {
    float acc[MK_LANES] = {0};
    long i = 0;
    for (; i + MK_LANES <= n; i += MK_LANES)
        for (int j = 0; j < MK_LANES; j++) acc[j] += x[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += x[i];
    for (int j = 0; j < MK_LANES; j++) s += acc[j];
    return s;
}

// sum of (x - c)^2
MK_INLINE float mk_vsumsq_dev(const float *x, long n, float c) {
    float acc[MK_LANES] = {0};
    long i = 0;
    for (; i + MK_LANES <= n; i += MK_LANES)
        for (int j = 0; j < MK_LANES; j++) { float d = x[i + j] - c; acc[j] += d * d; }
    float s = 0.0f;
    for (; i < n; i++) { float d = x[i] - c; s += d * d; }
    for (int j = 0; j < MK_LANES; j++) s += acc[j];
    return s;
}

// maximum; NaN if any element is NaN
MK_INLINE float mk_vmax(const float *x, long n) {
    mk_v8f acc0 = (mk_v8f){0} - __builtin_inff(), acc1 = acc0;
    mk_v8i bad = {0};
    long i = 0;
    for (; i + 16 <= n; i += 16) {
        mk_v8f v0, v1;
        memcpy(&v0, x + i, sizeof v0);
        memcpy(&v1, x + i + 8, sizeof v1);
        mk_v8i g0 = v0 > acc0, g1 = v1 > acc1;
        acc0 = (mk_v8f)((g0 & (mk_v8i)v0) | (~g0 & (mk_v8i)acc0));
        acc1 = (mk_v8f)((g1 & (mk_v8i)v1) | (~g1 & (mk_v8i)acc1));
        bad |= (v0 != v0) | (v1 != v1);
    }
    if (i < n && n >= 16) {       // the tail: the last 16 elements again (max is idempotent)
        mk_v8f v0, v1;
        memcpy(&v0, x + n - 16, sizeof v0);
        memcpy(&v1, x + n - 8, sizeof v1);
        mk_v8i g0 = v0 > acc0, g1 = v1 > acc1;
        acc0 = (mk_v8f)((g0 & (mk_v8i)v0) | (~g0 & (mk_v8i)acc0));
        acc1 = (mk_v8f)((g1 & (mk_v8i)v1) | (~g1 & (mk_v8i)acc1));
        bad |= (v0 != v0) | (v1 != v1);
        i = n;
    }
    float m = -__builtin_inff();
    int b = 0;
    for (; i < n; i++) { m = x[i] > m ? x[i] : m; b |= x[i] != x[i]; }
    for (int j = 0; j < 8; j++) {
        m = acc0[j] > m ? acc0[j] : m;
        m = acc1[j] > m ? acc1[j] : m;
        b |= bad[j];
    }
    return b ? __builtin_nanf("") : m;
}

// sum of exp(x - m); when y is not NULL also stores the terms there
MK_INLINE float mk_vexp_sum(const float *x, float *y, long n, float m) {
    float acc[MK_LANES] = {0};
    long i = 0;
    if (y) {
        for (; i + MK_LANES <= n; i += MK_LANES)
            for (int j = 0; j < MK_LANES; j++) {
                float e = mk_expf(x[i + j] - m);
                y[i + j] = e;
                acc[j] += e;
            }
    } else {
        for (; i + MK_LANES <= n; i += MK_LANES)
            for (int j = 0; j < MK_LANES; j++) acc[j] += mk_expf(x[i + j] - m);
    }
    if (i < n && n >= MK_LANES) {
        // the tail as one vector step over the last MK_LANES elements; lanes before `skip`
        // were done above and are masked (y may alias x: those lanes are not stored either)
        long o = n - MK_LANES;
        int skip = (int)(i - o);
        for (int j = 0; j < MK_LANES; j++) {
            float e = mk_expf(x[o + j] - m);
            acc[j] += j >= skip ? e : 0.0f;
            if (y) y[o + j] = j >= skip ? e : y[o + j];
        }
        i = n;
    }
    float s = 0.0f;
    for (; i < n; i++) { float e = mk_expf(x[i] - m); if (y) y[i] = e; s += e; }
    for (int j = 0; j < MK_LANES; j++) s += acc[j];
    return s;
}

// y = exp(x - m) * scale
MK_INLINE void mk_vexp_scale(const float *x, float *y, long n, float m, float scale) {
    for (long i = 0; i < n; i++) y[i] = mk_expf(x[i] - m) * scale;
}

#endif
