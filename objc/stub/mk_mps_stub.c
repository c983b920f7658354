// mk_mps_stub.c: Apple's MPS primitives exist only on macOS; elsewhere every entry point
// says so. (Compiled off-darwin only; on macOS objc/mk_mps*.m define these.)
#include "mpskern.h"

#define MK_NO_MPS return mk_set_error(MK_ERR_UNAVAILABLE, "mps needs macOS on Apple silicon (Metal Performance Shaders)")

mk_status mk_mps_gemm(mk_device *d, const mk_gemm_args *a, int dtype, mk_buffer *A,
                      mk_buffer *B, mk_buffer *C, mk_buffer *out, mk_timing *t) { MK_NO_MPS; }
mk_status mk_mps_conv2d(mk_device *d, const mk_conv2d_args *a, int dtype, mk_buffer *x,
                        mk_buffer *w, mk_buffer *bias, mk_buffer *y, mk_timing *t) { MK_NO_MPS; }
mk_status mk_mps_pool2d(mk_device *d, const mk_pool2d_args *a, int dtype, mk_buffer *x,
                        mk_buffer *y, mk_buffer *indices, mk_timing *t) { MK_NO_MPS; }
mk_status mk_mps_softmax(mk_device *d, const mk_softmax_args *a, int dtype, mk_buffer *x,
                         mk_buffer *y, mk_timing *t) { MK_NO_MPS; }
mk_status mk_mps_rownorm(mk_device *d, const mk_rownorm_args *a, int dtype, mk_buffer *x,
                         mk_buffer *weight, mk_buffer *bias, mk_buffer *y, mk_timing *t) { MK_NO_MPS; }
mk_status mk_mps_group_norm(mk_device *d, const mk_group_norm_args *a, int dtype,
                            mk_buffer *x, mk_buffer *weight, mk_buffer *bias, mk_buffer *y,
                            mk_timing *t) { MK_NO_MPS; }
mk_status mk_mps_batch_norm(mk_device *d, const mk_batch_norm_args *a, int dtype,
                            mk_buffer *x, mk_buffer *running_mean, mk_buffer *running_var,
                            mk_buffer *weight, mk_buffer *bias, mk_buffer *y, mk_timing *t) { MK_NO_MPS; }
mk_status mk_mps_attention(mk_device *d, const mk_attention_args *a, int dtype, mk_buffer *q,
                           mk_buffer *k, mk_buffer *v, mk_buffer *mask, mk_buffer *out,
                           mk_timing *t) { MK_NO_MPS; }
