// mk_cpu_activation.c: the fused activations of gemm and conv2d (MK_ACT_*), applied in place
// to float32 rows or tiles by the pass that writes the output, while they are in cache (no
// second pass over memory). The vector code is mk_cpu_activation_impl.h, compiled per width
// like the row passes (mk_cpu_vec_widths.h): AVX-512, AVX2 / baseline, and
// the compiler's own target elsewhere (NEON on the Mac). Accuracy against float64, on all
// of float32's range: relu exact; silu and gelu_tanh a few ulp of their exp; gelu (erf)
// within 2e-7 absolute of 0.5 * x * (1 + erf(x / sqrt(2))) relative to max(1, |x|).
// NaN stays NaN (relu included, as torch); +-inf give torch's limits.
#include "mk_cpu.h"
#include <string.h>

#define MK_VEC_IMPL "mk_cpu_activation_impl.h"
#include "mk_cpu_vec_widths.h"
#define act_tile MK_VEC_PICK(act_tile)

void mk_activate(float *y, long n, int act) {
    if (act != MK_ACT_NONE && n > 0) act_tile(y, n, 1, n, act);
}

void mk_activate_tile(void *ep_ctx, float *C, int ldc, int rows, int cols) {
    int act = *(const int *)ep_ctx;
    if (act != MK_ACT_NONE && rows > 0 && cols > 0) act_tile(C, ldc, rows, cols, act);
}
