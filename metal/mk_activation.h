// mk_activation.h: the fused activations (MK_ACT_* in mk_args.h) of gemm and conv2d, one
// definition for both languages: the MSL kernels apply mk_act to each final output value in
// their own store (no extra dispatch). torch's functions; MSL has no erf, so gelu uses
// mpskern's own erfc fit, 4e-7 absolute in float32. A C file may include this header with
// MK_ACT_FN / MK_ACT_EXP / MK_ACT_EXP_NONPOS defined first (its own exp); the cpu backend
// evaluates the same activations on whole vectors instead (objc/cpu/mk_cpu_activation_impl.h:
// the sigmoid forms below, and gelu as a polynomial in |x| without exp or division).
// In MSL, MK_ACT selects the activation at compile time (the encoders add it to the kernel's
// macros), so a kernel without an activation compiles exactly as before.
#ifndef MK_ACTIVATION_H
#define MK_ACTIVATION_H

#include "mk_args.h"

#ifndef MK_ACT_FN
#define MK_ACT_FN inline
#define MK_ACT_EXP(x) exp(x)
#define MK_ACT_EXP_NONPOS(x) exp(x)
#endif

MK_ACT_FN float mk_act_relu(float x) { return x < 0.0f ? 0.0f : x; }   // NaN stays, as torch

// x * sigmoid(x) = x / (1 + exp(-x)): exp overflows to +inf for x < -88.4, giving -0.
MK_ACT_FN float mk_act_silu(float x) { return x / (1.0f + MK_ACT_EXP(-x)); }

// 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)): no cancellation where
// tanh(u) is near -1, and the limits x (u -> +inf) and -0 (u -> -inf) come out of exp's
// 0 and +inf; -inf gives NaN (-inf / inf), as torch.
MK_ACT_FN float mk_act_gelu_tanh(float x)
{
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);   // sqrt(2/pi)
    return x / (1.0f + MK_ACT_EXP(-2.0f * u));
}

// erfc(z) for z >= 0 as t * P(t) * exp(-z^2), t = 1 / (1 + 0.39 z): the form of
// Abramowitz & Stegun 7.1.26 with mpskern's own degree-5 least-squares fit (8e-9 absolute
// in float64; 4e-7 evaluated in float32).
MK_ACT_FN float mk_act_erfc_pos(float z)
{
    const float t = 1.0f / (1.0f + 0.39f * z);
    float p = -2.275370915e-01f;
    p = p * t + 8.866642338e-01f;
    p = p * t - 6.354000597e-01f;
    p = p * t + 6.495592234e-01f;
    p = p * t + 9.138848423e-02f;
    p = p * t + 2.353252081e-01f;
    return t * p * MK_ACT_EXP_NONPOS(-z * z);
}

// 1 + erf(x / sqrt 2) is 2 - erfc(z) above 0 and erfc(-z) below: no cancellation on the
// negative side. (C: the caller keeps NaN, which the clamp in its exp would turn into a number.)
MK_ACT_FN float mk_act_gelu(float x)
{
    const float z = 0.7071067811865476f * x;
    const float c = mk_act_erfc_pos(z < 0.0f ? -z : z);
    return 0.5f * x * (z < 0.0f ? c : 2.0f - c);
}

#ifdef __METAL_VERSION__
#ifndef MK_ACT
#define MK_ACT MK_ACT_NONE
#endif

inline float mk_act(float x)
{
#if MK_ACT == MK_ACT_RELU
    return mk_act_relu(x);
#elif MK_ACT == MK_ACT_GELU
    return mk_act_gelu(x);
#elif MK_ACT == MK_ACT_GELU_TANH
    return mk_act_gelu_tanh(x);
#elif MK_ACT == MK_ACT_SILU
    return mk_act_silu(x);
#else
    return x;
#endif
}
#endif

#endif
