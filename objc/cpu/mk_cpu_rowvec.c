// mk_cpu_rowvec.c: instantiates the row passes (mk_cpu_rowvec_impl.h) and the attention
// micro-kernels (mk_cpu_attention_tiles_impl.h) per vector width (mk_cpu_vec_widths.h:
// AVX-512 and AVX2/baseline on x86-64 Linux, the compiler's target elsewhere) and picks one
// set at run time.
#include "mk_cpu.h"
#include "mk_cpu_rowvec.h"
#include "mk_cpu_attention_tiles.h"
#include <string.h>

#define MK_VEC_IMPL "mk_cpu_rowvec_impl.h"
#define MK_VEC_IMPL2 "mk_cpu_attention_tiles_impl.h"
#include "mk_cpu_vec_widths.h"

const mk_rowvec_t *mk_rowvec(void) { return MK_VEC_PICK(rowvec); }
const mk_attn_tiles_t *mk_attn_tiles(void) { return MK_VEC_PICK(attn_tiles); }

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
