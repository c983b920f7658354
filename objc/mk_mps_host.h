// mk_mps_host.h: the MPS ops' host half in plain C (compiled and unit-tested off macOS,
// tests/test_shim_host.py): argument checks with the messages users see, the window plan
// conv2d and pooling hand to MPSGraph, and the paths that never reach the GPU (K == 0 gemm,
// C == 0 conv2d, gemm's out <- C before MPS accumulates). objc/mk_mps_*.m call these.
#ifndef MK_MPS_HOST_H
#define MK_MPS_HOST_H
#include "mk_shim_host.h"
#include "mk_mps_math.h"

#ifdef __cplusplus
extern "C" {
#endif

// MK_OK for dtype MK_F32 / MK_F16; else the error, naming `op`.
mk_status mk_mps_check_dtype(int dtype, const char *op);
// MK_OK for a Metal device and dtype MK_F32 / MK_F16; else the error, naming `op`.
mk_status mk_mps_check(const mk_device *d, int dtype, const char *op);
static inline size_t mk_mps_esize_of(int dtype) { return dtype == MK_F16 ? 2 : 4; }

// An op that ends on the host (nothing to run, or done there): st, with zero timing when MK_OK.
mk_status mk_mps_done(mk_status st, mk_timing *t);
// Elements a strided batch of row-major matrices spans (0 if empty).
size_t mk_mps_span(int batch, int stride, int rows, int cols, int ld);

// The op checks: MK_OK or the error users see; *empty = 1 when the output has no element
// (nothing to run). Buffers are passed where a has_* flag needs one.

// gemm: sizes and leading dimensions, and the bytes each operand must hold.
typedef struct mk_mps_gemm_need { size_t a, b, c, out; } mk_mps_gemm_need;
mk_status mk_mps_gemm_check(const mk_gemm_args *a, int dtype, mk_mps_gemm_need *need);
// The gemm's host half: device and arguments checked, every buffer against what it must
// hold, out overlapping A or B refused (`out_shares_a/b`: the same Metal buffer), empty
// outputs and K == 0 done. 1 when nothing is left for the GPU (*st says how it went).
int mk_mps_gemm_host(mk_device *d, const mk_gemm_args *a, int dtype, mk_buffer *A, mk_buffer *B,
                     mk_buffer *C, mk_buffer *out, int out_shares_a, int out_shares_b, mk_status *st);
// K == 0: out = beta * C (or 0), on the host memory (refused with an activation: the
// Python layer computes that case).
void mk_mps_gemm_k0(const mk_gemm_args *a, int dtype, const void *C, void *out);
// Before MPS accumulates into out (result = alpha*AB + beta*result): out <- C, or 0 without
// C, row by row (the gaps of ldc > N belong to someone else); nothing when C is out.
void mk_mps_gemm_prefill(const mk_gemm_args *a, int dtype, const void *C, void *out, int c_is_out);
// The same for our buffers, whose device views are c_view / out_view.
void mk_mps_gemm_prefill_buffers(const mk_gemm_args *a, int dtype, const mk_buffer *C, const mk_buffer *out,
                                 const void *c_view, void *out_view);
// A fused activation: MPSMatrixMultiplication has no epilogue, so the gemm runs as one
// MPSGraph (matmul, alpha, beta*C and the activation), for dense operands (leading
// dimensions = columns, batch strides 0 or a whole matrix, as the public op passes);
// anything else is MK_ERR_UNSUPPORTED.
mk_status mk_mps_gemm_graph_check(const mk_gemm_args *a);
// How many encodes the plan takes and how many matrices each covers.
void mk_mps_gemm_encodes(const mk_mps_gemm_plan *p, const mk_gemm_args *a, int *encodes, int *per_encode);

// The padding MPSGraph gets so that an explicitly padded floor-mode window count gives
// exactly P x Q (bottom/right `pb`, `pr`), and the count it gives (`gp` x `gq` >= P x Q: the
// extra rows and columns are sliced off).
typedef struct mk_mps_window_plan { int64_t pb, pr, gp, gq; } mk_mps_window_plan;
mk_status mk_mps_window_plan_make(int H, int W, int P, int Q, int kh, int kw, int sh, int sw,
                                  int dh, int dw, int ph, int pw, mk_mps_window_plan *p, const char *op);

mk_status mk_mps_conv2d_check(const mk_conv2d_args *a, const mk_buffer *bias, int *empty);
// The window plan of a conv2d / pool2d (checked arguments).
mk_status mk_mps_conv2d_plan(const mk_conv2d_args *a, mk_mps_window_plan *p);
mk_status mk_mps_pool2d_plan(const mk_pool2d_args *a, mk_mps_window_plan *p);
// C == 0: an empty sum; y is the bias (or 0). MPSGraph has no empty convolution (refused
// with an activation: the Python layer computes that case).
void mk_mps_conv2d_c0(const mk_conv2d_args *a, int dtype, const float *bias, void *y);
// The conv2d's host half: C == 0 done (buffers checked first). 1 when done (*st).
int mk_mps_conv2d_host(mk_device *d, const mk_conv2d_args *a, int dtype, mk_buffer *bias, mk_buffer *y,
                       mk_status *st);
mk_status mk_mps_pool2d_check(const mk_pool2d_args *a, int *empty);
int mk_mps_pool2d_is_avg(const mk_pool2d_args *a);
mk_status mk_mps_softmax_check(const mk_softmax_args *a, int *empty);
mk_status mk_mps_rownorm_check(const mk_rownorm_args *a, const mk_buffer *weight, const mk_buffer *bias,
                               int *empty);
mk_status mk_mps_group_norm_check(const mk_group_norm_args *a, const mk_buffer *weight,
                                  const mk_buffer *bias, int *empty);
mk_status mk_mps_batch_norm_check(const mk_batch_norm_args *a, const mk_buffer *mean, const mk_buffer *var,
                                  const mk_buffer *weight, const mk_buffer *bias, int *empty);
// The graph inputs of a norm, in the order its placeholders are made: x, then the running
// mean and variance (has_running), weight (has_weight), bias (has_bias). Returns how many.
int mk_mps_norm_inputs(mk_buffer **in, mk_buffer *x, int has_running, mk_buffer *mean, mk_buffer *var,
                       int has_weight, mk_buffer *weight, int has_bias, mk_buffer *bias);
// batch_norm updates the running stats (training with them).
int mk_mps_batch_norm_updates(const mk_batch_norm_args *a);
// torch's unbiased-variance factor for the running stats: count / (count - 1).
double mk_mps_unbias(const mk_batch_norm_args *a);

#ifdef __cplusplus
}
#endif
#endif
