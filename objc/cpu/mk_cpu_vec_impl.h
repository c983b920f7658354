// mk_cpu_vec_impl.h: the vector helpers of the per-width passes (mk_cpu_rowvec_impl.h,
// mk_cpu_attention_tiles_impl.h), for a vector of RV_W floats (GCC/clang vector extensions),
// with RV_NAME(f) naming the per-width types. Included at the top of each impl file, which
// includes mk_cpu_vec_undef.h at its end. No include guard: included once per width and file.

// Helpers are macros, not inline functions: a function taking a vector draws GCC's notes
// that its ABI depends on the ISA.
typedef float RV_NAME(vf) __attribute__((vector_size(RV_W * 4)));
typedef int32_t RV_NAME(vi) __attribute__((vector_size(RV_W * 4)));
#define VF RV_NAME(vf)
#define VI RV_NAME(vi)
#define SPLAT(c) ((VF){0} + (c))

// unaligned vector load / store (memcpy compiles to one move)
#define LD(p) ({ VF v_; memcpy(&v_, (p), sizeof v_); v_; })
#define ST(p, v) do { VF s_ = (v); memcpy((p), &s_, sizeof s_); } while (0)

// exp(x) for x <= 0, lane-wise: NaN -> NaN, -inf and x below ~-87.7 -> exactly 0 (results
// under ~1.2e-38 flush to 0), a few ulp elsewhere. x = n*ln2 + r, |r| <= ln2/2; exp(r) by a
// degree-6 polynomial; 2^n from the exponent bits of the rounding constant's sum.
// (bits(t) + 127) << 23 = (n + 127) << 23 as the high bits of t shift out; n = -127 (x below
// -87.7) gives 0, which is why x is clamped at -88 and not lower. The clamp's test is false
// for NaN: NaN passes through.
#define EXP_NONPOS(xin) ({ \
    VF x_ = (xin); \
    VI lo_ = x_ < SPLAT(-88.0f); \
    x_ = (VF)((lo_ & (VI)SPLAT(-88.0f)) | (~lo_ & (VI)x_)); \
    VF t_ = x_ * 1.44269504088896341f + 12582912.0f;   /* 1.5*2^23 + n */ \
    VF n_ = t_ - 12582912.0f; \
    VF r_ = x_ - n_ * 0.693145751953125f;               /* ln2 in two parts */ \
    r_ = r_ - n_ * 1.428606765330187045e-06f; \
    VF p_ = SPLAT(1.3981999507e-3f); \
    p_ = p_ * r_ + 8.3334519073e-3f; \
    p_ = p_ * r_ + 4.1665795894e-2f; \
    p_ = p_ * r_ + 1.6666665459e-1f; \
    p_ = p_ * r_ + 5.0000001201e-1f; \
    p_ = p_ * r_ + 1.0f; \
    p_ = p_ * r_ + 1.0f; \
    p_ * (VF)(((VI)t_ + 127) << 23); })

// 1 / d lane-wise for finite d >= 1 (the activations' denominators). AVX-512: the 14-bit
// estimate + one Newton step (~2^-27 relative, no divider); elsewhere a division.
#if RV_W == 16 && defined(__x86_64__) && !defined(MK_VEC_W)
#include <immintrin.h>
#define RECIP(din) ({ VF d_ = (din); VF e_ = (VF)_mm512_rcp14_ps((__m512)d_); e_ * (2.0f - d_ * e_); })
#else
#define RECIP(din) (1.0f / (din))
#endif

// horizontal sum as a tree (halves added): log2(RV_W) dependent steps, not RV_W; on short
// rows the reductions are a large part of the work
// lane indices 0..RV_W-1 (for tail masks)
#define RV_LANES ({ VI l_; for (int j_ = 0; j_ < RV_W; j_++) l_[j_] = j_; l_; })

#define HSUM(v) ({ VF h_ = (v); float t_[RV_W]; memcpy(t_, &h_, sizeof t_); \
    for (int w_ = RV_W / 2; w_ > 0; w_ /= 2) \
        for (int j_ = 0; j_ < w_; j_++) t_[j_] += t_[j_ + w_]; \
    t_[0]; })

// NaN-aware lane max: acc keeps the larger value; NaNs are tracked in bad
#define RV_MAXSTEP(acc, bad, v) do { VI g_ = (v) > (acc); \
    acc = (VF)((g_ & (VI)(v)) | (~g_ & (VI)(acc))); bad |= (v) != (v); } while (0)

