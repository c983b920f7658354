// mk_cpu_conv_direct_impl.h: mk_cpu_conv_direct.c's micro-kernel for a vector of RV_W
// floats; mk_cpu_conv_direct.c includes it once per width (mk_cpu_vec_widths.h).
// A tile is mr output channels x nv vectors of RV_W output columns: mr * nv accumulators
// and nv input vectors stay in registers over all taps (DC_MR * DC_NV + DC_NV <= 27 of
// AVX-512's 32 registers, 15 of AVX2's 16); per tap nv loads (one per vector, shared by
// the mr channels) and mr broadcasts of packed weights feed mr * nv FMAs.
// No include guard: included once per width.
#include "mk_cpu_vec_impl.h"

#define DC_MR (RV_W == 16 ? 8 : 4)
#define DC_NV 3
#define DC_BCAST(x) ((x) - (VF){0})   // a broadcast load (0 + x is not x for -0: an add more)

// The tile: output channel i's vector v at dst[v] + i * ldo, its input at src[v] + off[t]
// for tap t; weights wp[t * DC_MR + i]; lanes[v] < RV_W: only that many columns are stored
// (GCC warns that acc may be used uninitialized where a vector wider than the clone's
// target is split into pieces; every accumulator used is set first)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
static inline __attribute__((always_inline)) void RV_NAME(dc_tile)(
        const float *wp, const long *off, int taps, const float *const *src, float *const *dst,
        long ldo, const float *bias, const int *lanes, const int mr, const int nv) {
    VF acc[DC_MR][DC_NV];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        VF b = DC_BCAST(bias ? bias[i] : 0.0f);
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[i][v] = b;
    }
    for (int t = 0; t < taps; t++) {
        long o = off[t];
        VF x[DC_NV];
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) x[v] = LD(src[v] + o);
        const float *w = wp + (long)t * DC_MR;
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            VF wi = DC_BCAST(w[i]);
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[i][v] += wi * x[v];
        }
    }
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) {
        if (lanes[v] == RV_W) {
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) ST(dst[v] + i * ldo, acc[i][v]);
        } else {
            for (int i = 0; i < mr; i++) {
                float tmp[RV_W];
                ST(tmp, acc[i][v]);
                memcpy(dst[v] + i * ldo, tmp, (size_t)lanes[v] * 4);
            }
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// mr (1..DC_MR) and nv (1..DC_NV) as constants: each case is its own inlined tile
#define DC_CALL(M, N) RV_NAME(dc_tile)(wp, off, taps, src, dst, ldo, bias, lanes, M, N)
#define DC_NVS(M) switch (nv) { case 1: DC_CALL(M, 1); break; case 2: DC_CALL(M, 2); break; \
                                default: DC_CALL(M, DC_NV); break; }

// Vectors [v0, v1) of one image's output rows (vector v: row v / qv, columns from
// (v % qv) * RV_W) for output channels [k0, k0 + mr): the geometry in g (mk_cpu_conv_direct.c)
RV_ATTR static void RV_NAME(dc_run)(const mk_dc_geom *g, const float *wp, const float *bias,
                                     const float *in, float *out, long p0, long v0, long v1,
                                     int mr) {
    const long *off = g->off;
    int taps = g->taps;
    long ldo = g->ldo;
    for (long v = v0; v < v1; v += DC_NV) {
        int nv = v1 - v < DC_NV ? (int)(v1 - v) : DC_NV;
        const float *src[DC_NV];
        float *dst[DC_NV];
        int lanes[DC_NV];
        for (int j = 0; j < DC_NV; j++) {
            long vj = v + (j < nv ? j : 0), p = vj / g->qv, q = vj % g->qv * RV_W;
            src[j] = in + p * g->row_step + q;
            dst[j] = out + (p - p0) * g->Q + q;
            lanes[j] = g->Q - q < RV_W ? (int)(g->Q - q) : RV_W;
        }
        switch (mr) {
        case 1: DC_NVS(1); break;
        case 2: DC_NVS(2); break;
        case 3: DC_NVS(3); break;
#if DC_MR > 4
        case 4: DC_NVS(4); break;
        case 5: DC_NVS(5); break;
        case 6: DC_NVS(6); break;
        case 7: DC_NVS(7); break;
#endif
        default: DC_NVS(DC_MR); break;
        }
    }
}
#undef DC_CALL
#undef DC_NVS

static const mk_dc_kernel RV_NAME(dc_kernel) = {RV_NAME(dc_run), DC_MR, DC_NV, RV_W};
#undef DC_MR
#undef DC_NV
#undef DC_BCAST
#include "mk_cpu_vec_undef.h"
