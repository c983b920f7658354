// mk_common.h: MSL helpers shared by mpskern's kernels (metal/*.metal).
// Included with `#include "mk_common.h"`; mpskern.paths.metal_source inlines it, because
// Metal's run-time compiler cannot open include files (the simulator gets the same text).
#ifndef MK_COMMON_H
#define MK_COMMON_H

#include <metal_stdlib>
using namespace metal;

#define MK_SIMD_WIDTH 32

// Per-dtype kernels, one style in every file: a template kernel `fn` over the storage type T
// (named <family>_<variant>), then MK_PER_DTYPE(fn), which instantiates it as fn_f32
// (T = float) and fn_f16 (T = half): the names mpskern.paths.kernel_name builds. The
// instantiation `template [[host_name("fn_f32")]] [[kernel]] decltype(fn<float>) fn<float>;`
// does not repeat the parameter list (Apple's compiler takes this form); the simulator's
// front-end reads the parameters' roles from the template's definition.
#define MK_STR_(x) #x
#define MK_STR(x) MK_STR_(x)
#define MK_INSTANTIATE(fn, T, sfx) \
    template [[host_name(MK_STR(fn##_##sfx))]] [[kernel]] decltype(fn<T>) fn<T>;
#define MK_PER_DTYPE(fn) MK_INSTANTIATE(fn, float, f32) MK_INSTANTIATE(fn, half, f16)

// Number of b-sized pieces covering a (a >= 0, b > 0).
inline int mk_cdiv(int a, int b) { return (a + b - 1) / b; }

// Copy a rows x cols tile of a logical matrix into threadgroup memory as float.
// The matrix element (r, c) lives at src[r*ld + c], or at src[c*ld + r] when `trans`;
// the tile starts at (r0, c0); elements outside the R x C matrix read as 0 (edge tiles).
// Tile element (r, c) goes to dst[r*rs + c*cs]. All `nt` threads of the group take part
// (thread `tid`); the walk follows the source's contiguous dimension so loads coalesce.
// TRANS is a template parameter so each loop keeps its division by a compile-time extent.
template <bool TRANS, typename T>
inline void mk_load_tile_walk(threadgroup float* dst, int rs, int cs,
                              const device T* src, int ld,
                              int rows, int cols, int r0, int c0, int R, int C,
                              int tid, int nt)
{
    const int run = TRANS ? rows : cols;      // the source's contiguous extent
    for (int i = tid; i < rows * cols; i += nt) {
        const int q = i / run;
        const int r = TRANS ? i - q * run : q;
        const int c = TRANS ? q : i - q * run;
        const int gr = r0 + r;
        const int gc = c0 + c;
        float v = 0.0f;
        if (gr < R && gc < C) {
            v = float(src[TRANS ? gc * ld + gr : gr * ld + gc]);
        }
        dst[r * rs + c * cs] = v;
    }
}

template <typename T>
inline void mk_load_tile(threadgroup float* dst, int rs, int cs,
                         const device T* src, int ld, bool trans,
                         int rows, int cols, int r0, int c0, int R, int C,
                         int tid, int nt)
{
    if (trans) {
        mk_load_tile_walk<true>(dst, rs, cs, src, ld, rows, cols, r0, c0, R, C, tid, nt);
    } else {
        mk_load_tile_walk<false>(dst, rs, cs, src, ld, rows, cols, r0, c0, R, C, tid, nt);
    }
}

#endif
