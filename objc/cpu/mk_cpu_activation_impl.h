// mk_cpu_activation_impl.h: the fused activations on whole vectors of RV_W floats, for one
// width (mk_cpu_activation.c includes it once per width with RV_W, RV_NAME, RV_ATTR).
// Explicit vectors, not auto-vectorised loops: no scalar remainder loop (a tail is one
// vector), no NaN fix-up select (EXP_NONPOS passes NaN through) and, on AVX-512, a
// reciprocal estimate + one Newton step instead of a division (vdivps zmm occupies the
// divider ~10 cycles per 16 values). silu and gelu_tanh are metal/mk_activation.h's
// sigmoid forms; gelu is a polynomial here (below). No include guard.

#include "mk_cpu_vec_impl.h"

#define ACT_SEL(m, a, b) ((VF)(((m) & (VI)(a)) | (~(m) & (VI)(b))))
#define ACT_SIGN ((VI){0} + INT32_MIN)          /* (SPLAT(-0.0f) would be 0 + -0 = +0) */
#define ACT_NEG_ABS(v) ((VF)((VI)(v) | ACT_SIGN))
// x * sigmoid(t) from e = exp(-|t|): 1 / (1 + e) for t >= 0, e / (1 + e) below (no
// overflow, no cancellation). NaN in t stays NaN; t = -inf gives x * 0.
#define ACT_XSIG(x, tin) ({ VF t_ = (tin); VF e_ = EXP_NONPOS(ACT_NEG_ABS(t_)); \
    VF r_ = RECIP(1.0f + e_); (x) * ACT_SEL(t_ >= SPLAT(0.0f), r_, e_ * r_); })

#define ACT_RELU(x) ({ VF x_ = (x); ACT_SEL(x_ < SPLAT(0.0f), SPLAT(0.0f), x_); })
#define ACT_SILU(x) ({ VF xs_ = (x); ACT_XSIG(xs_, xs_); })
#define ACT_GELU_TANH(x) ({ VF xg_ = (x); \
    ACT_XSIG(xg_, xg_ * (1.5957691216057308f + 0.0713548162726f * (xg_ * xg_))); })   /* 2u */
// gelu = 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x + 0.5 |x| erf(z), z = |x| / sqrt 2: erf on
// [0, 3.6] as one degree-14 polynomial in t = z / 1.8 - 1 (mpskern's own fit, weighted by
// what an error in erf does to gelu), erf = 1 above (1 - erf(3.6) = 3.6e-7). Within 1.9e-7
// of float64 gelu relative to max(1, |x|) in float32 (metal/mk_activation.h's erfc form:
// 4e-7), in 15 multiply-adds and no exp or division (that form took ~33 operations and a
// division per vector). The sum is 0.5 x + (0.5 |x|) erf: finite up to float32's max.
// NaN stays NaN (the clamp's test is false for it); +inf -> +inf, -inf -> NaN, as torch.
#define ACT_GELU(x) ({ VF xe_ = (x); \
    VF a_ = (VF)((VI)xe_ & ~ACT_SIGN); \
    VI big_ = a_ > SPLAT(5.091168824543142f);            /* z > 3.6 */ \
    VF t_ = ACT_SEL(big_, SPLAT(5.091168824543142f), a_) * 0.3928371370f - 1.0f; \
    VF p_ = SPLAT(-7.605415303e-03f); \
    p_ = p_ * t_ - 2.701842692e-03f; \
    p_ = p_ * t_ + 5.374509096e-02f; \
    p_ = p_ * t_ - 2.049306966e-02f; \
    p_ = p_ * t_ - 1.413135976e-01f; \
    p_ = p_ * t_ + 1.582243592e-01f; \
    p_ = p_ * t_ + 1.114134714e-01f; \
    p_ = p_ * t_ - 3.567961752e-01f; \
    p_ = p_ * t_ + 2.370050699e-01f; \
    p_ = p_ * t_ + 1.715500504e-01f; \
    p_ = p_ * t_ - 4.846174419e-01f; \
    p_ = p_ * t_ + 4.706621170e-01f; \
    p_ = p_ * t_ - 2.577114105e-01f; \
    p_ = p_ * t_ + 7.954785973e-02f; \
    p_ = p_ * t_ + 9.890903831e-01f; \
    (0.5f * a_) * ACT_SEL(big_, SPLAT(1.0f), p_) + 0.5f * xe_; })

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

#undef ACT_SEL
#undef ACT_SIGN
#undef ACT_NEG_ABS
#undef ACT_XSIG
#undef ACT_RELU
#undef ACT_SILU
#undef ACT_GELU_TANH
#undef ACT_GELU
#undef ACT_TILE_LOOP
#include "mk_cpu_vec_undef.h"
