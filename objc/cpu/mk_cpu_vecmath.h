// mk_cpu_vecmath.h: branch-free float math that the compiler vectorises inside straight
// loops (libm's expf is a call per element and blocks vectorisation). The contiguous-row
// passes (max, exp-sum, sums) are explicit vectors in mk_cpu_rowvec.h.
#ifndef MK_CPU_VECMATH_H
#define MK_CPU_VECMATH_H
#include <stdint.h>
#include <string.h>

// always inlined: they must be compiled into each multiversioned caller with its ISA
// (an out-of-line copy would use the baseline one and pass vectors through memory)
#define MK_INLINE static inline __attribute__((always_inline))

MK_INLINE float mk_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// e^xc for xc in [-87.3, 88.37] (callers clamp): xc = n*ln2 + r with |r| <= ln2/2; exp(r) by
// a degree-6 polynomial; 2^n from the exponent bits. A few ulp.
MK_INLINE float mk_exp_core(float xc) {
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   // round to nearest
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * mk_bits_to_float((uint32_t)((int32_t)n + 127) << 23);
}

// exp(x) on all of float: 0 below -87.3 (values under ~1.2e-38 flush to 0), +inf above 88.37
// (exact exp overflows only past 88.72: callers here pass x <= 0), NaN -> NaN.
MK_INLINE float mk_expf(float x) {
    float v = mk_exp_core(x < -87.3f ? -87.3f : (x > 88.37f ? 88.37f : x));
    v = x < -87.3f ? 0.0f : v;
    return x > 88.37f ? __builtin_inff() : v;
}

// exp(x) for x <= 0 without mk_expf's overflow and NaN selects (callers keep NaN
// themselves): below -87.3 it gives ~1e-38 instead of 0.
MK_INLINE float mk_exp_nonpos(float x) { return mk_exp_core(x < -87.3f ? -87.3f : x); }

// The per-width vector code (mk_cpu_vec_widths.h): x86-64 GCC on Linux
// builds a 16-float set for x86-64-v4 (AVX-512) and an 8-float set (target clones for
// x86-64-v3 and the baseline), and mk_vec_wide() picks one at run time; elsewhere (or
// -DMK_NO_MULTIVERSION) one set for the compiler's target.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) \
    && !defined(MK_NO_MULTIVERSION)
#define MK_VEC_DISPATCH 1
// 1 when the CPU has x86-64-v4. Each including file caches its own answer (a race only
// computes it twice).
static inline int mk_vec_wide(void) {
    static int chosen;                   // 1: AVX-512 (x86-64-v4), 2: not; 0: not asked yet
    int c = __atomic_load_n(&chosen, __ATOMIC_RELAXED);
    if (!c) {
        __builtin_cpu_init();
        c = __builtin_cpu_supports("x86-64-v4") ? 1 : 2;
        __atomic_store_n(&chosen, c, __ATOMIC_RELAXED);
    }
    return c == 1;
}
#endif

#endif
