// mk_args.h: kernel argument structs, the one layout shared by the .metal kernels, the
// C ABI (objc/mpskern.h), the CPU kernels, the simulator and the Cython layer.
// Rules: only 4-byte fields (int32 / uint32 / float) so MSL and C agree on size and
// alignment without padding surprises; counts are int32 (the Python layer rejects arrays
// of 2^31 elements or more with a clear error).
#ifndef MK_ARGS_H
#define MK_ARGS_H

#ifdef __METAL_VERSION__
typedef int mk_i32;
typedef float mk_f32;
#else
#include <stdint.h>
typedef int32_t mk_i32;
typedef float mk_f32;
#endif

// dtypes
#define MK_F32 0
#define MK_F16 1

// Fused activations of gemm and conv2d, applied to the final value (after alpha/beta/C or
// after the bias): relu, gelu with erf (torch's default), gelu's tanh approximation, silu.
#define MK_ACT_NONE 0
#define MK_ACT_RELU 1
#define MK_ACT_GELU 2
#define MK_ACT_GELU_TANH 3
#define MK_ACT_SILU 4

// C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b];  row-major, leading dims in elements.
// Batch strides of 0 broadcast one operand over the batch.
typedef struct mk_gemm_args {
    mk_i32 batch, M, N, K;
    mk_i32 lda, ldb, ldc;          // ldc is also the output's leading dim
    mk_i32 stride_a, stride_b, stride_c, stride_out;   // batch strides in elements
    mk_i32 trans_a, trans_b;       // 0/1
    mk_i32 has_c;                  // beta*C term present (C may alias out)
    mk_f32 alpha, beta;
    mk_i32 split_k;                // >1: K split over that many partial sums (GPU only)
    mk_i32 activation;             // MK_ACT_*, applied to every final output element
} mk_gemm_args;

// NCHW input, weight (K, C/groups, R, S), output (N, K, P, Q).
// pad_h/pad_w are the top/left padding; bottom/right padding is implied by P/Q
// (this is how "same" with an even kernel works).
typedef struct mk_conv2d_args {
    mk_i32 N, C, H, W;
    mk_i32 K, R, S;
    mk_i32 P, Q;
    mk_i32 stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    mk_i32 groups, has_bias;
    mk_i32 activation;             // MK_ACT_*, applied after the bias
} mk_conv2d_args;

#define MK_POOL_MAX 0
#define MK_POOL_AVG 1
#define MK_POOL_ADAPTIVE_AVG 2     // torch's adaptive_avg_pool2d: output (p, q) averages rows
                                   // [p*H/P, ceil((p+1)*H/P)) x columns [q*W/Q, ceil((q+1)*W/Q))
                                   // (kh, kw, strides, padding, dilation, divisor unused)
// Windows start at p*stride - pad; a window is clipped to the input for max and for the
// count_include_pad=False divisor; the count_include_pad=True divisor clips the window to
// the padded extent (H + pad_h_end), as torch does. Arrays x, y (N, C, P, Q) and indices: NULL,
// or int64 (N, C, P, Q) for MK_POOL_MAX: where each maximum came from, as a flat index h*W + w
// into its (H, W) plane (torch's return_indices: the first of equal maxima, the last NaN of a
// window; a window of -inf only: its first element inside the input).
typedef struct mk_pool2d_args {
    mk_i32 N, C, H, W, P, Q;
    mk_i32 kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    mk_i32 mode;                   // MK_POOL_MAX / MK_POOL_AVG / MK_POOL_ADAPTIVE_AVG
    mk_i32 count_include_pad;
    mk_i32 divisor;                // >0: divisor_override
    mk_i32 pad_h_end, pad_w_end;   // padded extent limits: H + pad_h_end, W + pad_w_end
} mk_pool2d_args;

// x viewed as (outer, n, inner); softmax along n.
typedef struct mk_softmax_args {
    mk_i32 outer, n, inner;
    mk_i32 log;                    // 1: log_softmax
} mk_softmax_args;

#define MK_NORM_LAYER 0
#define MK_NORM_RMS 1
// layer_norm / rms_norm: x viewed as (rows, n); weight, bias: float32[n].
typedef struct mk_rownorm_args {
    mk_i32 rows, n;
    mk_i32 kind;                   // MK_NORM_LAYER / MK_NORM_RMS
    mk_i32 has_weight, has_bias;
    mk_f32 eps;
} mk_rownorm_args;

// group_norm: x (N, C, HW); weight, bias: float32[C].
typedef struct mk_group_norm_args {
    mk_i32 N, C, HW, groups;
    mk_i32 has_weight, has_bias;
    mk_f32 eps;
} mk_group_norm_args;

// batch_norm: x (N, C, HW); running_mean/var, weight, bias: float32[C].
// training: normalise with batch statistics (biased variance) and, when has_running,
// update running stats in place: r = (1-momentum)*r + momentum*stat (unbiased variance).
typedef struct mk_batch_norm_args {
    mk_i32 N, C, HW;
    mk_i32 training, has_running, has_weight, has_bias;
    mk_f32 eps, momentum;
} mk_batch_norm_args;

#define MK_ATTN_MASK_NONE 0
#define MK_ATTN_MASK_BOOL 1        // uint8, nonzero: the query may attend to the key
#define MK_ATTN_MASK_ADD 2         // the query's dtype, added to the scaled scores
// scaled_dot_product_attention: out[b, h, i, :] = softmax_j(scale * q[b,h,i,:] . k[b,hk,j,:]
// (+ mask)) @ v[b, hv, j, :], hk = h / (Hq / Hk), hv = h / (Hq / Hv) (grouped-query heads;
// Hk = 1 broadcasts one head). q (B, Hq, L, E), k (., Hk, S, E), v (., Hv, S, Ev) with
// contiguous rows at batch/head strides in elements (0 broadcasts); out (B, Hq, L, Ev).
// Row strides q_sl, k_sl, v_sl and the output's o_sb, o_sh, o_sl (elements): the cpu kernel
// reads and writes through them (head splits of one qkv projection, heads merged in place);
// the GPU and MPS paths are given dense operands (rows of E / Ev, out contiguous). Mask element (b, h, i, j) at b*m_sb + h*m_sh + i*m_sl + j*m_ss (0 broadcasts).
// causal: key j is visible to query i only when j <= i (torch's top-left triangle). A row
// with no visible key (l = 0) gives 0 @ v, as torch. The CPU kernel's scratch is O(block),
// never O(L * S); on mps, MPSGraph's own attention op where the OS has it (macOS 15), else
// matmul, mask, softmax and matmul in one graph.
typedef struct mk_attention_args {
    mk_i32 B, Hq, Hk, Hv, L, S, E, Ev;
    mk_i32 q_sb, q_sh, k_sb, k_sh, v_sb, v_sh;
    mk_i32 mask;                   // MK_ATTN_MASK_*
    mk_i32 m_sb, m_sh, m_sl, m_ss;
    mk_i32 causal;                 // 0/1
    mk_f32 scale;
    mk_i32 q_sl, k_sl, v_sl;       // row strides (dense: E, E, Ev)
    mk_i32 o_sb, o_sh, o_sl;       // out's strides (dense: Hq L Ev, L Ev, Ev)
} mk_attention_args;

// The kernel families, one line each: K(name, "what serves it on mps", arrays). Everything
// per family besides its struct mk_<name>_args comes from this list:
//   objc/mpskern.h           mk_status mk_cpu_<name>(const mk_<name>_args *a, int dtype, <arrays>);
//                            mk_status mk_mps_<name>(mk_device *d, const mk_<name>_args *a,
//                                                    int dtype, <arrays as mk_buffer *>, mk_timing *t);
//   objc/stub/mk_mps_stub.c  the off-macOS mk_mps_<name> (says unavailable)
//   mpskern/_kernels.pxi     Cython's declarations and op-table row (_native.OPS[name]), written
//                            by setup.py (objc/cython_kernels.py; tests/test_abi_drift.py checks)
// Arrays in ABI order: IN(type, name) is read (const type *), OUT(type, name) written (type *).
// The label is what backend "mps" reports having run (objc/mk_mps_<name>.m).
#define MK_KERNELS(K, IN, OUT) \
    K(gemm, "MPSMatrixMultiplication", IN(void, A) IN(void, B) IN(void, C) OUT(void, out)) \
    K(conv2d, "MPSGraph convolution2D", IN(void, x) IN(void, w) IN(float, bias) OUT(void, y)) \
    K(pool2d, "MPSGraph pooling2D", IN(void, x) OUT(void, y) OUT(int64_t, indices)) \
    K(softmax, "MPSGraph softMax", IN(void, x) OUT(void, y)) \
    K(rownorm, "MPSGraph normalization", IN(void, x) IN(float, weight) IN(float, bias) OUT(void, y)) \
    K(group_norm, "MPSGraph normalization", \
      IN(void, x) IN(float, weight) IN(float, bias) OUT(void, y)) \
    K(batch_norm, "MPSGraph normalization", IN(void, x) OUT(float, running_mean) \
      OUT(float, running_var) IN(float, weight) IN(float, bias) OUT(void, y)) \
    K(attention, "MPSGraph attention (scaledDotProductAttention on macOS 15, else matmul/softmax)", \
      IN(void, q) IN(void, k) IN(void, v) IN(void, mask) OUT(void, out))

#endif
