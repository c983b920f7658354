// mk_cpu_activation.c: the fused activations of gemm and conv2d (MK_ACT_*), applied to a
// float32 row in place by the pass that writes the output (cache-hot: no second pass over
// memory). Branch-free formulas in straight loops, so each loop vectorises at the ISA its
// multiversioned clone is built for (mk_cpu_vecmath.h's exp). Accuracy against float64, on
// all of float32's range: relu exact; silu and gelu_tanh a few ulp of their exp; gelu (erf)
// within ~2e-7 relative of 0.5 * x * (1 + erf(x / sqrt(2))) for |x| < 4 (see act_erfc_pos).
// NaN stays NaN (relu included, as torch); +-inf give torch's limits.
#include "mk_cpu.h"
#include "mk_cpu_vecmath.h"

// x * sigmoid(x) = x / (1 + exp(-x)): exp overflows to +inf for x < -88.4, giving -0.
MK_INLINE float act_silu(float x) { return x / (1.0f + mk_expf(-x)); }

// 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)): no cancellation where
// tanh(u) is near -1, and the limits x (u -> +inf) and -0 (u -> -inf) come out of exp's
// 0 and +inf; -inf gives NaN (-inf / inf), as torch.
MK_INLINE float act_gelu_tanh(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);   // sqrt(2/pi)
    return x / (1.0f + mk_expf(-2.0f * u));
}

// exp(x) for x <= 0 as mk_expf computes it, without its overflow and NaN selects (callers
// pass -z^2 and keep NaN themselves); below -87.3 it gives ~1e-38 instead of 0.
MK_INLINE float act_exp_nonpos(float x) {
    x = x < -87.3f ? -87.3f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * mk_bits_to_float((uint32_t)((int32_t)n + 127) << 23);
}

// erfc(z) for z >= 0 as t * P(t) * exp(-z^2), t = 1 / (1 + 0.39 z): the form of
// Abramowitz & Stegun 7.1.26 with mpskern's own degree-5 least-squares fit (8e-9 absolute
// in float64; 4e-7 evaluated in float32). Then 1 + erf(x / sqrt 2) is 2 - erfc(z) above
// 0 and erfc(-z) below, without cancellation on the negative side.
MK_INLINE float act_erfc_pos(float z) {
    float t = 1.0f / (1.0f + 0.39f * z);
    float p = -2.275370915e-01f;
    p = p * t + 8.866642338e-01f;
    p = p * t - 6.354000597e-01f;
    p = p * t + 6.495592234e-01f;
    p = p * t + 9.138848423e-02f;
    p = p * t + 2.353252081e-01f;
    return t * p * act_exp_nonpos(-z * z);
}

MK_INLINE float act_gelu(float x) {
    float z = 0.7071067811865476f * x;
    float az = z < 0.0f ? -z : z;
    float c = act_erfc_pos(az);
    return 0.5f * x * (z < 0.0f ? c : 2.0f - c);
}

MK_MULTIVERSION static void act_relu_row(float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = y[i] < 0.0f ? 0.0f : y[i];   // NaN < 0 is false: NaN stays
}

MK_MULTIVERSION static void act_gelu_row(float *y, long n) {
    for (long i = 0; i < n; i++) {
        float x = y[i];
        float g = act_gelu(x);
        y[i] = x != x ? x : g;          // (the clamp in exp would turn NaN into a number)
    }
}

MK_MULTIVERSION static void act_gelu_tanh_row(float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = act_gelu_tanh(y[i]);
}

MK_MULTIVERSION static void act_silu_row(float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = act_silu(y[i]);
}

void mk_activate(float *y, long n, int act) {
    switch (act) {
    case MK_ACT_RELU: act_relu_row(y, n); break;
    case MK_ACT_GELU: act_gelu_row(y, n); break;
    case MK_ACT_GELU_TANH: act_gelu_tanh_row(y, n); break;
    case MK_ACT_SILU: act_silu_row(y, n); break;
    default: break;
    }
}

void mk_activate_tile(void *ep_ctx, float *C, int ldc, int rows, int cols) {
    int act = *(const int *)ep_ctx;
    for (int r = 0; r < rows; r++) mk_activate(C + (long)r * ldc, cols, act);
}
