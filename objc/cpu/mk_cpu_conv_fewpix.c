// mk_cpu_conv_fewpix.c: the GEMM y = act(w @ col + bias) of a conv2d whose images have few
// output pixels (PQ <= 64 on AVX-512: ResNet's 512->512 3x3 @7 and 1x1 @7 layers at batch
// 1), one output-channel block per task, all of an image's pixels in registers
// (mk_cpu_conv_fewpix_impl.h). As one GEMM over output channels (K x 49 x 4608 at 512 @7),
// OpenBLAS packs the whole weight matrix (9.4 MB) again on every call and runs its N = 49
// edge at a fraction of its rate: 2 threads 1.7 ms, torch 1.6. Here the weights are read
// once, in place, with broadcasts (a prefetch runs ahead of each row), and the im2col
// (CRS rows of PQ pixels padded to whole vectors) stays in L2 for every block.
#include "mk_cpu.h"
#include <string.h>

#define FP_NV 4                  // vectors of pixels per tile (64 pixels at AVX-512)

typedef struct {
    void (*run)(const float *w, long ldw, const float *col, long ldc, long taps, float *y,
                long ldy, const float *bias, int pq, int mr);
    int mr, width;               // output channels per tile, floats per vector
} mk_fp_kernel;

#define MK_VEC_IMPL "mk_cpu_conv_fewpix_impl.h"
#include "mk_cpu_vec_widths.h"

int mk_conv_fewpix_max_pixels(void) {
    const mk_fp_kernel *k = MK_VEC_PICK(fp_kernel);
    return k->width == 16 ? FP_NV * k->width : 0;   // 8-wide: 2-row tiles, not worth it
}

typedef struct {
    const mk_fp_kernel *kern;
    int N, K, PQ, act;
    long CRS, ldc, col_img;
    const float *w, *col, *bias;
    float *y;
} fp_ctx;

// output-channel blocks [b, e): every image's tile, then its rows activated (in L1)
static void fp_blocks(void *vc, long b, long e) {
    const fp_ctx *t = vc;
    int mr = t->kern->mr;
    for (long blk = b; blk < e; blk++) {
        long k0 = blk * mr;
        int m = t->K - k0 < mr ? (int)(t->K - k0) : mr;
        for (long n = 0; n < t->N; n++) {
            float *y = t->y + (n * t->K + k0) * t->PQ;
            t->kern->run(t->w + k0 * t->CRS, t->CRS, t->col + n * t->col_img, t->ldc, t->CRS,
                         y, t->PQ, t->bias ? t->bias + k0 : NULL, t->PQ, m);
            if (t->act != MK_ACT_NONE) mk_activate(y, (long)m * t->PQ, t->act);
        }
    }
}

void mk_conv_fewpix(int N, int K, int PQ, long CRS, const float *w, const float *col,
                    long ldc, long col_img, const float *bias, int act, float *y) {
    fp_ctx t = {MK_VEC_PICK(fp_kernel), N, K, PQ, act, CRS, ldc, col_img, w, col, bias, y};
    long blocks = (K + t.kern->mr - 1) / t.kern->mr;
    mk_parallel_for(blocks, mk_grain((long)t.kern->mr * N * PQ * CRS), fp_blocks, &t);
}
