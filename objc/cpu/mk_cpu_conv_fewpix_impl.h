// mk_cpu_conv_fewpix_impl.h: mk_cpu_conv_fewpix.c's micro-kernel for a vector of RV_W
// floats; included once per width (mk_cpu_vec_widths.h). A tile is mr output channels x nv
// vectors of output pixels (all of an image's, PQ <= FP_NV * RV_W): mr * nv accumulators and
// nv im2col vectors in registers over all CRS taps; per tap nv loads of the im2col row and
// mr broadcasts read straight from the weights' own rows (K x CRS, no packing: each weight
// is read once per image from L2, once per call from memory, prefetched ahead).
// No include guard: included once per width.
#include "mk_cpu_vec_impl.h"

#define FP_MR (RV_W == 16 ? 6 : 2)
#define FP_BCAST(x) ((x) - (VF){0})   // a broadcast load (0 + x is not x for -0)
#define FP_AHEAD 256                  // taps the weight prefetch runs ahead (1 KiB a row)

// y rows [0, mr) (ldy apart) = act(bias + w rows (ldw apart) @ col (rows ldc apart)), the
// first pq columns; col's rows hold nv * RV_W floats (past pq: anything finite or not, those
// lanes are never stored)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
static inline __attribute__((always_inline)) void RV_NAME(fp_tile)(
        const float *w, long ldw, const float *col, long ldc, long taps, float *y, long ldy,
        const float *bias, int pq, const int mr, const int nv) {
    VF acc[FP_MR][FP_NV];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        VF b = FP_BCAST(bias ? bias[i] : 0.0f);
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[i][v] = b;
    }
    for (long t0 = 0; t0 < taps; t0 += 16) {
        long t1 = t0 + 16 < taps ? t0 + 16 : taps;
        if (t0 + FP_AHEAD < taps)
            for (int i = 0; i < mr; i++) __builtin_prefetch(w + i * ldw + t0 + FP_AHEAD, 0, 1);
        for (long t = t0; t < t1; t++) {
            const float *c = col + t * ldc;
            VF x[FP_NV];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) x[v] = LD(c + v * RV_W);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                VF wi = FP_BCAST(w[i * ldw + t]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) acc[i][v] += wi * x[v];
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        float *yr = y + i * ldy;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            int lanes = pq - v * RV_W < RV_W ? pq - v * RV_W : RV_W;
            if (lanes == RV_W) ST(yr + v * RV_W, acc[i][v]);
            else if (lanes > 0) {
                float tmp[RV_W];
                ST(tmp, acc[i][v]);
                memcpy(yr + v * RV_W, tmp, (size_t)lanes * 4);
            }
        }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#define FP_CALL(M, N) RV_NAME(fp_tile)(w, ldw, col, ldc, taps, y, ldy, bias, pq, M, N)
#define FP_NVS(M) switch (nv) { case 1: FP_CALL(M, 1); break; case 2: FP_CALL(M, 2); break; \
                                case 3: FP_CALL(M, 3); break; default: FP_CALL(M, 4); break; }

// mr (1..FP_MR) and nv (1..FP_NV) as constants: each case its own inlined tile
RV_ATTR static void RV_NAME(fp_run)(const float *w, long ldw, const float *col, long ldc,
                                     long taps, float *y, long ldy, const float *bias, int pq,
                                     int mr) {
    int nv = (pq + RV_W - 1) / RV_W;
    switch (mr) {
    case 1: FP_NVS(1); break;
#if FP_MR > 2
    case 2: FP_NVS(2); break;
    case 3: FP_NVS(3); break;
    case 4: FP_NVS(4); break;
    case 5: FP_NVS(5); break;
#endif
    default: FP_NVS(FP_MR); break;
    }
}
#undef FP_CALL
#undef FP_NVS

static const mk_fp_kernel RV_NAME(fp_kernel) = {RV_NAME(fp_run), FP_MR, RV_W};
#undef FP_MR
#undef FP_BCAST
#undef FP_AHEAD
#include "mk_cpu_vec_undef.h"
