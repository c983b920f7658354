// mk_activation.h: the fused activation of the gemm and conv2d kernels, applied to each final
// output value in the kernel's own store (no extra dispatch). MK_ACT selects it at compile
// time (one of MK_ACT_* in mk_args.h; the encoders add it to the kernel's macros), so a
// kernel without an activation compiles exactly as before. The formulas are those of
// objc/cpu/mk_cpu_activation.c (torch's functions; MSL has no erf, so gelu uses mpskern's
// own erfc fit there, 4e-7 absolute in float32).
#ifndef MK_ACTIVATION_H
#define MK_ACTIVATION_H

#include "mk_args.h"

#ifndef MK_ACT
#define MK_ACT MK_ACT_NONE
#endif

// erfc(z) for z >= 0: t * P(t) * exp(-z^2), t = 1 / (1 + 0.39 z) (mk_cpu_activation.c).
inline float mk_act_erfc_pos(float z)
{
    const float t = 1.0f / (1.0f + 0.39f * z);
    float p = -2.275370915e-01f;
    p = p * t + 8.866642338e-01f;
    p = p * t - 6.354000597e-01f;
    p = p * t + 6.495592234e-01f;
    p = p * t + 9.138848423e-02f;
    p = p * t + 2.353252081e-01f;
    return t * p * exp(-z * z);
}

inline float mk_act(float x)
{
#if MK_ACT == MK_ACT_RELU
    return x < 0.0f ? 0.0f : x;                     // NaN stays NaN, as torch
#elif MK_ACT == MK_ACT_GELU
    const float z = 0.7071067811865476f * x;
    const float c = mk_act_erfc_pos(abs(z));
    return 0.5f * x * (z < 0.0f ? c : 2.0f - c);    // 1 + erf(z), no cancellation below 0
#elif MK_ACT == MK_ACT_GELU_TANH
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + exp(-2.0f * u));             // 0.5 x (1 + tanh u) = x sigmoid(2u)
#elif MK_ACT == MK_ACT_SILU
    return x / (1.0f + exp(-x));
#else
    return x;
#endif
}

#endif
