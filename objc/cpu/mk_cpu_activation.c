// mk_cpu_activation.c: the fused activations of gemm and conv2d (MK_ACT_*), applied to a
// float32 row in place by the pass that writes the output (cache-hot: no second pass over
// memory). Branch-free formulas in straight loops, so each loop vectorises at the ISA its
// multiversioned clone is built for (mk_cpu_vecmath.h's exp). Accuracy against float64, on
// all of float32's range: relu exact; silu and gelu_tanh a few ulp of their exp; gelu (erf)
// within ~2e-7 relative of 0.5 * x * (1 + erf(x / sqrt(2))) for |x| < 4 (see mk_act_erfc_pos).
// NaN stays NaN (relu included, as torch); +-inf give torch's limits.
#include "mk_cpu.h"
#include "mk_cpu_vecmath.h"
#include <string.h>

// the formulas are metal/mk_activation.h's (one definition for C and MSL), with this side's exp
#define MK_ACT_FN MK_INLINE
#define MK_ACT_EXP(x) mk_expf(x)
#define MK_ACT_EXP_NONPOS(x) mk_exp_nonpos(x)
#include "mk_activation.h"

MK_MULTIVERSION static void act_relu_row(float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = mk_act_relu(y[i]);
}

MK_MULTIVERSION static void act_gelu_row(float *y, long n) {
    for (long i = 0; i < n; i++) {
        float x = y[i];
        float g = mk_act_gelu(x);
        y[i] = x != x ? x : g;          // (the clamp in exp would turn NaN into a number)
    }
}

MK_MULTIVERSION static void act_gelu_tanh_row(float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = mk_act_gelu_tanh(y[i]);
}

MK_MULTIVERSION static void act_silu_row(float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = mk_act_silu(y[i]);
}

static void act_rows(float *y, long n, int act) {
    switch (act) {
    case MK_ACT_RELU: act_relu_row(y, n); break;
    case MK_ACT_GELU: act_gelu_row(y, n); break;
    case MK_ACT_GELU_TANH: act_gelu_tanh_row(y, n); break;
    case MK_ACT_SILU: act_silu_row(y, n); break;
    default: break;
    }
}

// The loops above in multiples of 16 only: the last n % 16 values go through a 16-float
// buffer, so that no value takes a clone's scalar remainder loop (a scalar erf or division
// per element; short rows such as Winograd's output rows of 28 spent half their time there).
void mk_activate(float *y, long n, int act) {
    if (act == MK_ACT_NONE || n <= 0) return;
    long body = n & ~15L;
    if (body) act_rows(y, body, act);
    if (body < n) {
        float t[16] = {0};
        memcpy(t, y + body, (size_t)(n - body) * 4);
        act_rows(t, 16, act);
        memcpy(y + body, t, (size_t)(n - body) * 4);
    }
}

void mk_activate_tile(void *ep_ctx, float *C, int ldc, int rows, int cols) {
    int act = *(const int *)ep_ctx;
    for (int r = 0; r < rows; r++) mk_activate(C + (long)r * ldc, cols, act);
}
