// mk_mps_host.c: the MPS ops' host half (see mk_mps_host.h).
#include "mk_mps_host.h"

#include <string.h>

mk_status mk_mps_check_dtype(int dtype, const char *op) {
    if (dtype != MK_F32 && dtype != MK_F16)
        return mk_set_error(MK_ERR_INVALID, "%s: dtype %d is neither float32 (%d) nor float16 (%d)",
                            op, dtype, MK_F32, MK_F16);
    return MK_OK;
}

mk_status mk_mps_check(const mk_device *d, int dtype, const char *op) {
    mk_status st = mk_shim_check_device(d, op);
    return st != MK_OK ? st : mk_mps_check_dtype(dtype, op);
}

mk_status mk_mps_done(mk_status st, mk_timing *t) {
    if (st == MK_OK && t) t->gpu_ms = t->wall_ms = 0;
    return st;
}

size_t mk_mps_span(int batch, int stride, int rows, int cols, int ld) {
    if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

/* ---------------------------------------------------------------- gemm */

#define GEMM "mk_mps_gemm"

mk_status mk_mps_gemm_check(const mk_gemm_args *a, int dtype, mk_mps_gemm_need *need) {
    memset(need, 0, sizeof *need);
    mk_status st = mk_mps_check_dtype(dtype, GEMM);
    if (st != MK_OK) return st;
    if (!a) return mk_set_error(MK_ERR_INVALID, GEMM ": args is NULL");
    if (a->batch < 0 || a->M < 0 || a->N < 0 || a->K < 0)
        return mk_set_error(MK_ERR_INVALID, GEMM ": negative size (batch %d, M %d, N %d, K %d)",
                            a->batch, a->M, a->N, a->K);
    if (a->stride_a < 0 || a->stride_b < 0 || a->stride_c < 0 || a->stride_out < 0)
        return mk_set_error(MK_ERR_INVALID, GEMM ": negative batch stride (A %d, B %d, C %d, out %d)",
                            a->stride_a, a->stride_b, a->stride_c, a->stride_out);
    if (a->activation < MK_ACT_NONE || a->activation > MK_ACT_SILU)
        return mk_set_error(MK_ERR_INVALID, GEMM ": activation %d is not MK_ACT_*", a->activation);
    int ra = a->trans_a ? a->K : a->M, ca = a->trans_a ? a->M : a->K;
    int rb = a->trans_b ? a->N : a->K, cb = a->trans_b ? a->K : a->N;
    if (a->lda < ca || a->ldb < cb || a->ldc < a->N)
        return mk_set_error(MK_ERR_INVALID, GEMM ": leading dimensions lda %d, ldb %d, ldc %d are "
                            "smaller than the rows they hold (%d, %d, %d)", a->lda, a->ldb, a->ldc, ca, cb, a->N);
    size_t es = mk_mps_esize_of(dtype);
    need->out = mk_mps_span(a->batch, a->stride_out, a->M, a->N, a->ldc) * es;
    need->c = a->has_c ? mk_mps_span(a->batch, a->stride_c, a->M, a->N, a->ldc) * es : 0;
    need->a = a->K ? mk_mps_span(a->batch, a->stride_a, ra, ca, a->lda) * es : 0;
    need->b = a->K ? mk_mps_span(a->batch, a->stride_b, rb, cb, a->ldb) * es : 0;
    return MK_OK;
}

static float load(const void *p, size_t i, int dtype) {
    return dtype == MK_F16 ? (float)((const _Float16 *)p)[i] : ((const float *)p)[i];
}

static void store(void *p, size_t i, int dtype, float v) {
    if (dtype == MK_F16) ((_Float16 *)p)[i] = (_Float16)v;
    else ((float *)p)[i] = v;
}

void mk_mps_gemm_k0(const mk_gemm_args *a, int dtype, const void *C, void *out) {
    for (int b = 0; b < a->batch; b++)
        for (int i = 0; i < a->M; i++)
            for (int j = 0; j < a->N; j++) {
                size_t o = (size_t)b * a->stride_out + (size_t)i * a->ldc + j;
                size_t c = (size_t)b * a->stride_c + (size_t)i * a->ldc + j;
                store(out, o, dtype, a->has_c && C ? a->beta * load(C, c, dtype) : 0.0f);
            }
}

mk_status mk_mps_gemm_graph_check(const mk_gemm_args *a) {
    int ra = a->trans_a ? a->K : a->M, ca = a->trans_a ? a->M : a->K;
    int rb = a->trans_b ? a->N : a->K, cb = a->trans_b ? a->K : a->N;
    long mn = (long)a->M * a->N;
    int dense = a->lda == ca && a->ldb == cb && a->ldc == a->N && a->stride_out == mn &&
                (a->stride_a == 0 || a->stride_a == (long)ra * ca) &&
                (a->stride_b == 0 || a->stride_b == (long)rb * cb) &&
                (!a->has_c || a->stride_c == 0 || a->stride_c == mn);
    if (!dense)
        return mk_set_error(MK_ERR_UNSUPPORTED, GEMM ": a fused activation needs dense operands on mps (leading "
                            "dimensions = columns, batch strides 0 or a whole matrix); these have lda %d ldb %d "
                            "ldc %d", a->lda, a->ldb, a->ldc);
    return MK_OK;
}

void mk_mps_gemm_prefill(const mk_gemm_args *a, int dtype, const void *C, void *out, int c_is_out) {
    if (a->has_c && c_is_out && a->stride_c == a->stride_out) return;    // already in place
    size_t es = mk_mps_esize_of(dtype), row = (size_t)a->N * es;
    for (int b = 0; b < a->batch; b++)
        for (int i = 0; i < a->M; i++) {
            char *dst = (char *)out + ((size_t)b * a->stride_out + (size_t)i * a->ldc) * es;
            if (a->has_c && C)
                memmove(dst, (const char *)C + ((size_t)b * a->stride_c + (size_t)i * a->ldc) * es, row);
            else
                memset(dst, 0, row);
        }
}

int mk_mps_gemm_host(mk_device *d, const mk_gemm_args *a, int dtype, mk_buffer *A, mk_buffer *B,
                     mk_buffer *C, mk_buffer *out, int out_shares_a, int out_shares_b, mk_status *st) {
    mk_mps_gemm_need need;
    if ((*st = mk_shim_check_device(d, GEMM)) != MK_OK || (*st = mk_mps_gemm_check(a, dtype, &need)) != MK_OK ||
        (*st = mk_shim_check_buffer(d, out, need.out, GEMM, "out")) != MK_OK ||
        (a->has_c && (*st = mk_shim_check_buffer(d, C, need.c, GEMM, "C")) != MK_OK))
        return 1;
    if (a->batch == 0 || a->M == 0 || a->N == 0) return 1;
    if (a->K == 0) {
        if (a->activation) {   // (mpskern.gemm computes activation(beta * C) itself)
            *st = mk_set_error(MK_ERR_UNSUPPORTED, GEMM ": K == 0 with a fused activation");
            return 1;
        }
        mk_mps_gemm_k0(a, dtype, a->has_c ? C->host : NULL, out->host);
        return 1;
    }
    if ((*st = mk_shim_check_buffer(d, A, need.a, GEMM, "A")) != MK_OK ||
        (*st = mk_shim_check_buffer(d, B, need.b, GEMM, "B")) != MK_OK)
        return 1;
    if (mk_shim_overlap(out, A, out_shares_a) || mk_shim_overlap(out, B, out_shares_b)) {
        *st = mk_set_error(MK_ERR_INVALID, GEMM ": out overlaps A or B; MPS writes the result while "
                           "reading them (pass a separate output array)");
        return 1;
    }
    return 0;
}

void mk_mps_gemm_prefill_buffers(const mk_gemm_args *a, int dtype, const mk_buffer *C, const mk_buffer *out,
                                 const void *c_view, void *out_view) {
    int c_is_out = a->has_c && C && (C == out || (C->host && C->host == out->host));
    mk_mps_gemm_prefill(a, dtype, a->has_c ? c_view : NULL, out_view, c_is_out);
}

void mk_mps_gemm_encodes(const mk_mps_gemm_plan *p, const mk_gemm_args *a, int *encodes, int *per_encode) {
    *encodes = p->batched ? 1 : a->batch;
    *per_encode = p->batched ? a->batch : 1;
}

/* ---------------------------------------------------------------- windows: conv2d, pooling */

mk_status mk_mps_window_plan_make(int H, int W, int P, int Q, int kh, int kw, int sh, int sw,
                                  int dh, int dw, int ph, int pw, mk_mps_window_plan *p, const char *op) {
    memset(p, 0, sizeof *p);
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || ph < 0 || pw < 0)
        return mk_set_error(MK_ERR_INVALID, "%s: invalid window %dx%d, stride %dx%d, dilation %dx%d or "
                            "padding %dx%d", op, kh, kw, sh, sw, dh, dw, ph, pw);
    p->pb = mk_mps_end_pad(H, ph, P, sh, dh, kh);
    p->pr = mk_mps_end_pad(W, pw, Q, sw, dw, kw);
    p->gp = mk_mps_floor_windows((int64_t)H + ph + p->pb, sh, dh, kh);
    p->gq = mk_mps_floor_windows((int64_t)W + pw + p->pr, sw, dw, kw);
    if (p->gp < P || p->gq < Q)
        return mk_set_error(MK_ERR_INVALID, "%s: output %dx%d cannot come from input %dx%d with these "
                            "kernel, stride, dilation and padding", op, P, Q, H, W);
    return MK_OK;
}

#define CONV "mk_mps_conv2d"

mk_status mk_mps_conv2d_check(const mk_conv2d_args *a, const mk_buffer *bias, int *empty) {
    *empty = 0;
    if (!a) return mk_set_error(MK_ERR_INVALID, CONV ": args is NULL");
    if (a->N < 0 || a->C < 0 || a->H < 0 || a->W < 0 || a->K < 0 || a->R < 1 || a->S < 1 ||
        a->P < 0 || a->Q < 0)
        return mk_set_error(MK_ERR_INVALID, CONV ": invalid sizes (N %d, C %d, H %d, W %d, K %d, R %d, "
                            "S %d, P %d, Q %d)", a->N, a->C, a->H, a->W, a->K, a->R, a->S, a->P, a->Q);
    if (a->groups < 1 || a->C % a->groups || a->K % a->groups || a->stride_h < 1 || a->stride_w < 1 ||
        a->dil_h < 1 || a->dil_w < 1 || a->pad_h < 0 || a->pad_w < 0)
        return mk_set_error(MK_ERR_INVALID, CONV ": invalid arguments (C %d, K %d, groups %d, stride %dx%d, "
                            "dilation %dx%d, padding %dx%d)", a->C, a->K, a->groups, a->stride_h, a->stride_w,
                            a->dil_h, a->dil_w, a->pad_h, a->pad_w);
    if (a->has_bias && !bias)
        return mk_set_error(MK_ERR_INVALID, CONV ": has_bias is set but bias is NULL");
    if (a->activation < MK_ACT_NONE || a->activation > MK_ACT_SILU)
        return mk_set_error(MK_ERR_INVALID, CONV ": activation %d is not MK_ACT_*", a->activation);
    *empty = (int64_t)a->N * a->K * a->P * a->Q == 0;
    return MK_OK;
}

mk_status mk_mps_conv2d_plan(const mk_conv2d_args *a, mk_mps_window_plan *p) {
    return mk_mps_window_plan_make(a->H, a->W, a->P, a->Q, a->R, a->S, a->stride_h, a->stride_w, a->dil_h,
                                   a->dil_w, a->pad_h, a->pad_w, p, CONV);
}

mk_status mk_mps_pool2d_plan(const mk_pool2d_args *a, mk_mps_window_plan *p) {
    return mk_mps_window_plan_make(a->H, a->W, a->P, a->Q, a->kh, a->kw, a->stride_h, a->stride_w, a->dil_h,
                                   a->dil_w, a->pad_h, a->pad_w, p, "mk_mps_pool2d");
}

void mk_mps_conv2d_c0(const mk_conv2d_args *a, int dtype, const float *bias, void *y) {
    size_t plane = (size_t)a->P * a->Q, n = (size_t)a->N * a->K * plane;
    for (size_t i = 0; i < n; i++)
        store(y, i, dtype, a->has_bias && bias ? bias[(i / plane) % (size_t)a->K] : 0.0f);
}

int mk_mps_conv2d_host(mk_device *d, const mk_conv2d_args *a, int dtype, mk_buffer *bias, mk_buffer *y,
                       mk_status *st) {
    *st = MK_OK;
    if (a->C != 0) return 0;
    if (a->activation) {       // (mpskern.conv2d computes activation(bias) itself)
        *st = mk_set_error(MK_ERR_UNSUPPORTED, CONV ": C == 0 with a fused activation");
        return 1;
    }
    if ((*st = mk_shim_check_buffer(d, y, (size_t)a->N * a->K * a->P * a->Q * mk_mps_esize_of(dtype), CONV,
                                    "y")) != MK_OK ||
        (a->has_bias && (*st = mk_shim_check_buffer(d, bias, (size_t)a->K * 4, CONV, "bias")) != MK_OK))
        return 1;
    mk_mps_conv2d_c0(a, dtype, a->has_bias ? (const float *)bias->host : NULL, y->host);
    return 1;
}

#define POOL "mk_mps_pool2d"

mk_status mk_mps_pool2d_check(const mk_pool2d_args *a, int *empty) {
    *empty = 0;
    if (!a) return mk_set_error(MK_ERR_INVALID, POOL ": args is NULL");
    if (a->mode != MK_POOL_MAX && a->mode != MK_POOL_AVG && a->mode != MK_POOL_ADAPTIVE_AVG)
        return mk_set_error(MK_ERR_INVALID, POOL ": mode %d is neither max (%d), avg (%d) nor "
                            "adaptive avg (%d)", a->mode, MK_POOL_MAX, MK_POOL_AVG,
                            MK_POOL_ADAPTIVE_AVG);
    if (a->N < 0 || a->C < 0 || a->H < 0 || a->W < 0 || a->P < 0 || a->Q < 0)
        return mk_set_error(MK_ERR_INVALID, POOL ": negative size (N %d, C %d, H %d, W %d, P %d, Q %d)",
                            a->N, a->C, a->H, a->W, a->P, a->Q);
    if (a->kh < 1 || a->kw < 1 || a->stride_h < 1 || a->stride_w < 1 || a->dil_h < 1 || a->dil_w < 1 ||
        a->pad_h < 0 || a->pad_w < 0)
        return mk_set_error(MK_ERR_INVALID, POOL ": invalid kernel %dx%d, stride %dx%d, dilation %dx%d or "
                            "padding %dx%d", a->kh, a->kw, a->stride_h, a->stride_w, a->dil_h, a->dil_w,
                            a->pad_h, a->pad_w);
    *empty = (int64_t)a->N * a->C * a->P * a->Q == 0;
    return MK_OK;
}

int mk_mps_pool2d_is_avg(const mk_pool2d_args *a) { return a->mode == MK_POOL_AVG; }

/* ---------------------------------------------------------------- softmax, norms */

mk_status mk_mps_softmax_check(const mk_softmax_args *a, int *empty) {
    *empty = 0;
    if (!a) return mk_set_error(MK_ERR_INVALID, "mk_mps_softmax: args is NULL");
    if (a->outer < 0 || a->n < 0 || a->inner < 0)
        return mk_set_error(MK_ERR_INVALID, "mk_mps_softmax: negative size (outer %d, n %d, inner %d)",
                            a->outer, a->n, a->inner);
    *empty = (int64_t)a->outer * a->n * a->inner == 0;
    return MK_OK;
}

// The optional weight and bias of a normalisation: a has_* flag needs its buffer.
static mk_status affine_check(const char *op, int has_weight, const mk_buffer *weight, int has_bias,
                              const mk_buffer *bias) {
    if ((has_weight && !weight) || (has_bias && !bias))
        return mk_set_error(MK_ERR_INVALID, "%s: has_weight/has_bias set without the buffer", op);
    return MK_OK;
}

#define ROWNORM "mk_mps_rownorm"

mk_status mk_mps_rownorm_check(const mk_rownorm_args *a, const mk_buffer *have_weight, const mk_buffer *have_bias,
                               int *empty) {
    *empty = 0;
    if (!a) return mk_set_error(MK_ERR_INVALID, ROWNORM ": args is NULL");
    if (a->kind != MK_NORM_LAYER && a->kind != MK_NORM_RMS)
        return mk_set_error(MK_ERR_INVALID, ROWNORM ": kind %d is neither layer (%d) nor rms (%d)", a->kind,
                            MK_NORM_LAYER, MK_NORM_RMS);
    if (a->rows < 0 || a->n < 0)
        return mk_set_error(MK_ERR_INVALID, ROWNORM ": negative size (rows %d, n %d)", a->rows, a->n);
    mk_status st = affine_check(ROWNORM, a->has_weight, have_weight, a->has_bias, have_bias);
    *empty = st == MK_OK && (int64_t)a->rows * a->n == 0;
    return st;
}

#define GROUPNORM "mk_mps_group_norm"

mk_status mk_mps_group_norm_check(const mk_group_norm_args *a, const mk_buffer *have_weight,
                                  const mk_buffer *have_bias, int *empty) {
    *empty = 0;
    if (!a) return mk_set_error(MK_ERR_INVALID, GROUPNORM ": args is NULL");
    if (a->N < 0 || a->C < 0 || a->HW < 0)
        return mk_set_error(MK_ERR_INVALID, GROUPNORM ": negative size (N %d, C %d, HW %d)", a->N, a->C, a->HW);
    if (a->groups < 1 || a->C % a->groups)
        return mk_set_error(MK_ERR_INVALID, GROUPNORM ": %d groups do not divide %d channels", a->groups, a->C);
    mk_status st = affine_check(GROUPNORM, a->has_weight, have_weight, a->has_bias, have_bias);
    *empty = st == MK_OK && (int64_t)a->N * a->C * a->HW == 0;
    return st;
}

#define BATCHNORM "mk_mps_batch_norm"

mk_status mk_mps_batch_norm_check(const mk_batch_norm_args *a, const mk_buffer *have_mean,
                                  const mk_buffer *have_var, const mk_buffer *have_weight,
                                  const mk_buffer *have_bias, int *empty) {
    *empty = 0;
    if (!a) return mk_set_error(MK_ERR_INVALID, BATCHNORM ": args is NULL");
    if (a->N < 0 || a->C < 0 || a->HW < 0)
        return mk_set_error(MK_ERR_INVALID, BATCHNORM ": negative size (N %d, C %d, HW %d)", a->N, a->C, a->HW);
    if (!a->training && !a->has_running)
        return mk_set_error(MK_ERR_INVALID, BATCHNORM ": inference needs running_mean and running_var");
    if ((a->has_running && (!have_mean || !have_var)) || (a->has_weight && !have_weight) ||
        (a->has_bias && !have_bias))
        return mk_set_error(MK_ERR_INVALID, BATCHNORM ": a has_* flag is set without its buffer");
    int64_t count = (int64_t)a->N * a->HW;
    if (a->training && count <= 1 && a->C > 0)
        return mk_set_error(MK_ERR_INVALID, BATCHNORM ": training needs more than 1 value per channel "
                            "(N*H*W = %lld)", (long long)count);
    *empty = (int64_t)a->N * a->C * a->HW == 0;
    return MK_OK;
}

int mk_mps_batch_norm_updates(const mk_batch_norm_args *a) { return a->training && a->has_running; }

int mk_mps_norm_inputs(mk_buffer **in, mk_buffer *x, int has_running, mk_buffer *mean, mk_buffer *var,
                       int has_weight, mk_buffer *weight, int has_bias, mk_buffer *bias) {
    mk_buffer *all[5] = {x, has_running ? mean : NULL, has_running ? var : NULL, has_weight ? weight : NULL,
                         has_bias ? bias : NULL};
    int k = 0;
    for (int i = 0; i < 5; i++)
        if (all[i]) in[k++] = all[i];
    return k;
}

double mk_mps_unbias(const mk_batch_norm_args *a) {
    int64_t count = (int64_t)a->N * a->HW;
    return count > 1 ? (double)count / (double)(count - 1) : 1.0;
}
