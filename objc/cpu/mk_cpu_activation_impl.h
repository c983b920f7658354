// mk_cpu_activation_impl.h: the fused activations on whole vectors of RV_W floats, for one
// width (mk_cpu_activation.c includes it once per width with RV_W, RV_NAME, RV_ATTR).
// Explicit vectors, not auto-vectorised loops: no scalar remainder loop (a tail is one
// vector), no NaN fix-up select (NaN passes through every step) and, on AVX-512, exponent
// scaling (vscalefps) and a reciprocal estimate + one Newton step instead of integer exponent
// bits and a division (vdivps zmm occupies the divider ~10 cycles per 16 values). silu and
// gelu_tanh are x * sigmoid, metal/mk_activation.h's forms; gelu is a polynomial here
// (below). Arithmetic operations per vector (AVX-512, gcc 13): relu 1, gelu 23, silu 17,
// gelu_tanh 19 (the previous exp and select forms: 1, 24, 26, 29).
// No include guard.

#include "mk_cpu_vec_impl.h"

#define ACT_SEL(m, a, b) ((VF)(((m) & (VI)(a)) | (~(m) & (VI)(b))))
#define ACT_SIGN ((VI){0} + INT32_MIN)          /* (SPLAT(-0.0f) would be 0 + -0 = +0) */
#define ACT_ABS(v) ((VF)((VI)(v) & ~ACT_SIGN))
#define ACT_RELU(x) ({ VF x_ = (x); ACT_SEL(x_ < SPLAT(0.0f), SPLAT(0.0f), x_); })

// gelu = 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x + |x| h(|x|), h = 0.5 erf(|x| / sqrt 2): h on
// |x| in [0, 5.09] (z = |x| / sqrt 2 in [0, 3.6]) is one degree-14 polynomial in
// t = |x| / 5.09 * 2 - 1 (mpskern's own fit, weighted by what an error in erf does to gelu;
// ACT_ERF_POLY), h = 0.5 above (1 - erf(3.6) = 3.6e-7). Within 1.9e-7 of float64 gelu
// relative to max(1, |x|) in float32, in 15 multiply-adds and no exp or division. The
// polynomial is two Horner halves, p = lo(t) + t^8 hi(t): a 16-value vector's chain of
// dependent multiply-adds is 8 long, not 15 (a vector's 21 operations then fit the
// out-of-order window several vectors deep). NaN stays NaN (the clamp's test is false for
// it); +inf -> +inf, -inf -> NaN, as torch.
#define ACT_ERF_POLY(t) ({ VF t2_ = (t) * (t); VF t4_ = t2_ * t2_; VF t8_ = t4_ * t4_; \
    VF lo_ = SPLAT(-1.783980876e-01f); \
    lo_ = lo_ * (t) + 1.185025349e-01f; \
    lo_ = lo_ * (t) + 8.577502519e-02f; \
    lo_ = lo_ * (t) - 2.423087209e-01f; \
    lo_ = lo_ * (t) + 2.353310585e-01f; \
    lo_ = lo_ * (t) - 1.288557053e-01f; \
    lo_ = lo_ * (t) + 3.977392986e-02f; \
    lo_ = lo_ * (t) + 4.945451915e-01f; \
    VF hi_ = SPLAT(-3.802707652e-03f); \
    hi_ = hi_ * (t) - 1.350921346e-03f; \
    hi_ = hi_ * (t) + 2.687254548e-02f; \
    hi_ = hi_ * (t) - 1.024653483e-02f; \
    hi_ = hi_ * (t) - 7.065679878e-02f; \
    hi_ = hi_ * (t) + 7.911217958e-02f; \
    hi_ = hi_ * (t) + 5.570673570e-02f; \
    t8_ * hi_ + lo_; })
#define ACT_GELU_X 5.091168824543142f                    /* |x| where z = 3.6 */

#if RV_W == 16 && defined(__x86_64__) && !defined(MK_VEC_W)
// AVX-512: the sigmoid's exp is 2^w by exponent scaling (vreduceps gives w - floor(w) in
// [0, 1), a degree-5 polynomial 2^f (1.6e-7 relative), vscalefps multiplies by 2^floor(w),
// underflowing to 0 by itself) and its division a 14-bit reciprocal estimate + one Newton
// step folded into the product: 17 operations a vector for silu (the exp with ln 2 in two
// parts, exponent bits from integer shifts, a compare-select clamp and a select of the two
// halves took 25).
#include <immintrin.h>
#define ACT_M(v) ((__m512)(v))
// x * sigmoid(t) for nw = -|t| log2(e) (the caller folds log2 e into t's constants): with
// e = 2^nw = exp(-|t|), 1 / (1 + e) for x >= 0 and e / (1 + e) below (x and t share their
// sign; no overflow, no cancellation). nw is clamped at -150 (2^-150 = 0 in float32: |t| = inf
// gives e = 0, not 2^-inf's NaN); x = NaN makes NaN, x = -inf gives -inf * 0 = NaN (torch).
#define ACT_XSIG2(x, nwin) ({ VF x_ = (x); \
    VF w_ = (VF)_mm512_max_ps(ACT_M(nwin), ACT_M(SPLAT(-150.0f))); \
    VF f_ = (VF)_mm512_reduce_ps(ACT_M(w_), 0x09);         /* w - floor(w), exact */ \
    VF p_ = SPLAT(1.8775759963e-3f); \
    p_ = p_ * f_ + 8.9893424883e-3f; \
    p_ = p_ * f_ + 5.5826313794e-2f; \
    p_ = p_ * f_ + 2.4015361071e-1f; \
    p_ = p_ * f_ + 6.9315308332e-1f; \
    p_ = p_ * f_ + 9.9999994040e-1f; \
    VF e_ = (VF)_mm512_scalef_ps(ACT_M(p_), ACT_M(w_));   /* p * 2^floor(w) */ \
    VF d_ = 1.0f + e_; \
    VF r_ = (VF)_mm512_rcp14_ps(ACT_M(d_)); \
    VF xe_ = (VF)_mm512_mask_mul_ps(ACT_M(x_), _mm512_cmp_ps_mask(ACT_M(x_), ACT_M(SPLAT(0.0f)), \
                                    _CMP_LT_OQ), ACT_M(x_), ACT_M(e_)); \
    xe_ * (r_ * (2.0f - d_ * r_)); })          /* r (2 - d r) <= 1: no overflow */
// the clamp is vminps (NaN in a passes as the second operand: NaN) and the saturated lanes a
// masked move; 0.5 is folded into the coefficients
#define ACT_GELU(x) ({ VF xe_ = (x); VF a_ = ACT_ABS(xe_); \
    __mmask16 big_ = _mm512_cmp_ps_mask(ACT_M(a_), ACT_M(SPLAT(ACT_GELU_X)), _CMP_GT_OQ); \
    VF t_ = (VF)_mm512_min_ps(ACT_M(SPLAT(ACT_GELU_X)), ACT_M(a_)) * 0.3928371370f - 1.0f; \
    VF h_ = (VF)_mm512_mask_mov_ps(ACT_M(ACT_ERF_POLY(t_)), big_, ACT_M(SPLAT(0.5f))); \
    a_ * h_ + 0.5f * xe_; })

#else
// elsewhere (AVX2, NEON) the same sigmoid with portable vectors: n = round(nw) by the 1.5 * 2^23
// rounding constant, 2^(nw - n) by a degree-5 polynomial on [-0.5, 0.5] (2.1e-7 relative),
// 2^n from the exponent bits of the constant's sum ((bits + 127) << 23: the constant's own
// bits shift out; n = -127 gives 0, hence the clamp there) and one division.
#define ACT_XSIG2(x, nwin) ({ VF x_ = (x); VF w_ = (nwin); \
    w_ = ACT_SEL(w_ < SPLAT(-127.0f), SPLAT(-127.0f), w_); \
    VF t_ = w_ + 12582912.0f; \
    VF f_ = w_ - (t_ - 12582912.0f); \
    VF p_ = SPLAT(1.3276466634e-3f); \
    p_ = p_ * f_ + 9.6755418926e-3f; \
    p_ = p_ * f_ + 5.5507134646e-2f; \
    p_ = p_ * f_ + 2.4022120237e-1f; \
    p_ = p_ * f_ + 6.9314694405e-1f; \
    p_ = p_ * f_ + 1.0000001192e+0f; \
    VF e_ = p_ * (VF)(((VI)t_ + 127) << 23); \
    ACT_SEL(x_ < SPLAT(0.0f), x_ * e_, x_) * (1.0f / (1.0f + e_)); })
#define ACT_GELU(x) ({ VF xe_ = (x); VF a_ = ACT_ABS(xe_); \
    VI big_ = a_ > SPLAT(ACT_GELU_X); \
    VF t_ = ACT_SEL(big_, SPLAT(ACT_GELU_X), a_) * 0.3928371370f - 1.0f; \
    a_ * ACT_SEL(big_, SPLAT(0.5f), ACT_ERF_POLY(t_)) + 0.5f * xe_; })
#endif

#define ACT_SILU(x) ({ VF xs_ = (x); ACT_XSIG2(xs_, ACT_ABS(xs_) * -1.4426950408889634f); })
// gelu_tanh = 0.5 x (1 + tanh(u)) = x sigmoid(2u), 2u = x (1.5957691 + 0.0713548 x^2)
#define ACT_GELU_TANH(x) ({ VF xg_ = (x); \
    ACT_XSIG2(xg_, ACT_ABS(xg_) * (-2.3022081981f - 0.1029432396f * (xg_ * xg_))); })

// rows x cols floats at y (row stride ld), in place. A row of at least RV_W floats ends
// with the vector ending at its last value, computed from the values loaded before the
// row is written (the overlap gets act(x) again, not act(act(x))); a shorter row goes
// through a zeroed vector.
#define ACT_TILE_LOOP(F) \
    for (int r = 0; r < rows; r++) { \
        float *row = y + (long)r * ld; \
        if (cols >= RV_W) { \
            VF last = LD(row + cols - RV_W); \
            long i = 0; \
            for (; i + 2 * RV_W <= cols; i += 2 * RV_W) { \
                VF v0 = LD(row + i), v1 = LD(row + i + RV_W); \
                ST(row + i, F(v0)); \
                ST(row + i + RV_W, F(v1)); \
            } \
            if (i + RV_W <= cols) { ST(row + i, F(LD(row + i))); i += RV_W; } \
            if (i < cols) ST(row + cols - RV_W, F(last)); \
        } else { \
            float b[RV_W] = {0}; \
            for (long i = 0; i < cols; i++) b[i] = row[i]; \
            ST(b, F(LD(b))); \
            for (long i = 0; i < cols; i++) row[i] = b[i]; \
        } \
    }

RV_ATTR static void RV_NAME(act_tile)(float *y, long ld, int rows, long cols, int act) {
    switch (act) {
    case MK_ACT_RELU: ACT_TILE_LOOP(ACT_RELU) break;
    case MK_ACT_GELU: ACT_TILE_LOOP(ACT_GELU) break;
    case MK_ACT_GELU_TANH: ACT_TILE_LOOP(ACT_GELU_TANH) break;
    case MK_ACT_SILU: ACT_TILE_LOOP(ACT_SILU) break;
    default: break;
    }
}

// MK_ACT_KEEP: the including file applies the ACT_* macros to registers itself (the store of
// mk_cpu_sgemm_avx512.c's micro-kernel); they then stay defined to the end of that file.
#ifndef MK_ACT_KEEP
#undef ACT_SEL
#undef ACT_SIGN
#undef ACT_ABS
#undef ACT_ERF_POLY
#undef ACT_GELU_X
#undef ACT_XSIG2
#ifdef ACT_M
#undef ACT_M
#endif
#undef ACT_RELU
#undef ACT_SILU
#undef ACT_GELU_TANH
#undef ACT_GELU
#undef ACT_TILE_LOOP
#include "mk_cpu_vec_undef.h"
#endif
