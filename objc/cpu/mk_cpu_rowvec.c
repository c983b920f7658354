// mk_cpu_rowvec.c: instantiates the row passes (mk_cpu_rowvec_impl.h) and the attention
// micro-kernels (mk_cpu_attention_tiles_impl.h) per vector width and picks one set at run time. x86-64 with GCC: 16 floats compiled for x86-64-v4 (AVX-512),
// used when the CPU has it; else 8 floats as target clones for x86-64-v3 and the baseline.
// Elsewhere (or -DMK_NO_MULTIVERSION): one set for the compiler's target, 16 floats when it
// has AVX-512, else 8.
#include "mk_cpu.h"
#include "mk_cpu_rowvec.h"
#include "mk_cpu_vecmath.h"
#include "mk_cpu_attention_tiles.h"
#include <string.h>

#ifdef MK_VEC_DISPATCH   /* mk_cpu_vecmath.h */
#define RV_W 16
#define RV_NAME(f) f##_w16
#define RV_ATTR __attribute__((target("arch=x86-64-v4")))
#include "mk_cpu_rowvec_impl.h"
#include "mk_cpu_attention_tiles_impl.h"
#undef RV_W
#undef RV_NAME
#undef RV_ATTR

#define RV_W 8
#define RV_NAME(f) f##_w8
#define RV_ATTR __attribute__((target_clones("arch=x86-64-v3", "default")))
#include "mk_cpu_rowvec_impl.h"
#include "mk_cpu_attention_tiles_impl.h"

const mk_rowvec_t *mk_rowvec(void) { return mk_vec_wide() ? &rowvec_w16 : &rowvec_w8; }
const mk_attn_tiles_t *mk_attn_tiles(void) { return mk_vec_wide() ? &attn_tiles_w16 : &attn_tiles_w8; }

#else
#if defined(__AVX512F__)
#define RV_W 16
#else
#define RV_W 8
#endif
#define RV_NAME(f) f##_one
#define RV_ATTR
#include "mk_cpu_rowvec_impl.h"
#include "mk_cpu_attention_tiles_impl.h"

const mk_rowvec_t *mk_rowvec(void) { return &rowvec_one; }
const mk_attn_tiles_t *mk_attn_tiles(void) { return &attn_tiles_one; }
#endif

void mk_segment_range(void *vp, long b, long e) {
    mk_segment_pass *s = vp;
    long n = s->n;
    float *buf = s->dtype == MK_F16 ? mk_alloc((size_t)(n / s->segs + 32) * 4) : NULL;
    if (s->dtype == MK_F16 && !buf) { s->failed = 1; return; }
    for (long p = b; p < e; p++) {
        long i = p % s->segs, lo = mk_segment_start(i, s->segs, n);
        mk_segment g = {p, p / s->segs, lo, mk_segment_start(i + 1, s->segs, n) - lo, NULL, NULL};
        g.x = mk_row_piece(s->dtype, s->x, n, g.row, lo, g.len, buf);
        if (s->y) g.y = s->dtype == MK_F32 ? (float *)s->y + g.row * n + lo : buf;
        s->piece(s->ctx, &g);
        if (s->y && s->dtype == MK_F16) mk_f2h(buf, (mk_half *)s->y + g.row * n + lo, g.len);
    }
    mk_free(buf);
}
