// mk_cpu_convert.c: float16 <-> float32 blocks (straight loops the compiler vectorises).
#include "mk_cpu.h"

void mk_h2f(const mk_half *src, float *dst, long n) {
    for (long i = 0; i < n; i++) dst[i] = (float)src[i];
}

void mk_f2h(const float *src, mk_half *dst, long n) {
    for (long i = 0; i < n; i++) dst[i] = (mk_half)src[i];
}

typedef struct { const void *src; void *dst; } conv_ctx;

static void h2f_range(void *c, long b, long e) {
    conv_ctx *x = c;
    mk_h2f((const mk_half *)x->src + b, (float *)x->dst + b, e - b);
}

static void f2h_range(void *c, long b, long e) {
    conv_ctx *x = c;
    mk_f2h((const float *)x->src + b, (mk_half *)x->dst + b, e - b);
}

void mk_h2f_par(const mk_half *src, float *dst, long n) {
    conv_ctx c = {src, dst};
    mk_parallel_for(n, 1 << 16, h2f_range, &c);
}

void mk_f2h_par(const float *src, mk_half *dst, long n) {
    conv_ctx c = {src, dst};
    mk_parallel_for(n, 1 << 16, f2h_range, &c);
}
