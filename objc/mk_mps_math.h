// mk_mps_math.h: the shape arithmetic of the MPS ops, in plain C so that it also compiles
// (and is tested, tests/test_mps_math.py) off macOS. Used by objc/mk_mps_conv.m and
// objc/mk_mps_pool.m, mk_mps_pool_windows.m.
#ifndef MK_MPS_MATH_H
#define MK_MPS_MATH_H
#include <stdint.h>
#include "mk_args.h"

// Padding after the input (bottom/right) that makes a floor-mode window count of exactly
// `out` windows (k taps, `dil` apart, `stride` apart, `pad` before the input); 0 if the
// windows fit without any (then the floor count may exceed `out`: slice).
int64_t mk_mps_end_pad(int in, int pad, int out, int stride, int dil, int k);
// Floor-mode window count over `padded` elements.
int64_t mk_mps_floor_windows(int64_t padded, int stride, int dil, int k);
// torch's avg_pool2d divisor of every output position, row-major P x Q: divisor_override,
// else the taps inside [-pad, in + pad_end) (count_include_pad) or inside the input.
// Never 0 (an empty window's sum is 0 anyway).
void mk_mps_avg_divisors(const mk_pool2d_args *a, float *out);
// torch's adaptive window of output i of `out` over `in` elements: [*lo, *hi) =
// [floor(i*in/out), ceil((i+1)*in/out)).
void mk_mps_adaptive_window(int i, int out, int in, int64_t *lo, int64_t *hi);
// Where max_pool2d's index starts for every output position, row-major P x Q: the flat
// index h*W + w of the window's first tap inside the input (a window of -inf only keeps it).
void mk_mps_first_taps(const mk_pool2d_args *a, int32_t *out);

// How mk_mps_gemm hands an mk_gemm_args to MPSMatrixMultiplication. Each operand is a
// stack of row-major matrices as MPSMatrix stores them (A is K x M when transposed), in
// elements; matrix i starts at i * stride.
typedef struct mk_mps_matrix { int64_t rows, cols, ld, stride; } mk_mps_matrix;
typedef struct mk_mps_gemm_plan {
    mk_mps_matrix a, b, out;
    int batched;     // 1: one batched encode (MPS needs matrixBytes >= rows*rowBytes, a multiple
                     //    of it, per operand); 0: one encode per matrix at its offset
    double beta;     // MPS's beta: the caller's with C (out first set to C), else 1.0 over a
                     // zeroed out (MPS documents no "beta 0 ignores the result" rule)
} mk_mps_gemm_plan;
void mk_mps_gemm_plan_make(const mk_gemm_args *a, mk_mps_gemm_plan *p);

#endif
