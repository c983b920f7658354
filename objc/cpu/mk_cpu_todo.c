// TEMPORARY (skeleton commit): replaced by the real CPU kernels in objc/cpu/.
#include "mpskern.h"
#define TODO return mk_set_error(MK_ERR_UNSUPPORTED, "not implemented yet")
void mk_cpu_set_num_threads(int n) { (void)n; }
int mk_cpu_get_num_threads(void) { return 1; }
mk_status mk_cpu_gemm(const mk_gemm_args *a, int dtype, const void *A, const void *B, const void *C, void *out) { TODO; }
mk_status mk_cpu_conv2d(const mk_conv2d_args *a, int dtype, const void *x, const void *w, const float *bias, void *y) { TODO; }
mk_status mk_cpu_pool2d(const mk_pool2d_args *a, int dtype, const void *x, void *y) { TODO; }
mk_status mk_cpu_softmax(const mk_softmax_args *a, int dtype, const void *x, void *y) { TODO; }
mk_status mk_cpu_rownorm(const mk_rownorm_args *a, int dtype, const void *x, const float *weight, const float *bias, void *y) { TODO; }
mk_status mk_cpu_group_norm(const mk_group_norm_args *a, int dtype, const void *x, const float *weight, const float *bias, void *y) { TODO; }
mk_status mk_cpu_batch_norm(const mk_batch_norm_args *a, int dtype, const void *x, float *running_mean, float *running_var, const float *weight, const float *bias, void *y) { TODO; }
