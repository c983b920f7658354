// mk_cpu_convert.c: float16 <-> float32 blocks. On x86-64 with F16C (checked at run time)
// 8 values per instruction; otherwise the compiler's conversion (a libgcc call per value
// on baseline x86-64, a vectorised fcvt on arm64).
#include "mk_cpu.h"

static void h2f_plain(const mk_half *src, float *dst, long n) {
    for (long i = 0; i < n; i++) dst[i] = (float)src[i];
}

static void f2h_plain(const float *src, mk_half *dst, long n) {
    for (long i = 0; i < n; i++) dst[i] = (mk_half)src[i];
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MK_NO_F16C)
#include <immintrin.h>
#define MK_HAVE_F16C_PATH 1

__attribute__((target("avx,f16c")))
static void h2f_f16c(const mk_half *src, float *dst, long n) {
    long i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = (float)src[i];
}

__attribute__((target("avx,f16c")))
static void f2h_f16c(const float *src, mk_half *dst, long n) {
    long i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = (mk_half)src[i];
}

static int have_f16c(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    }
    return v;
}
#endif

void mk_h2f(const mk_half *src, float *dst, long n) {
#ifdef MK_HAVE_F16C_PATH
    if (have_f16c()) { h2f_f16c(src, dst, n); return; }
#endif
    h2f_plain(src, dst, n);
}

void mk_f2h(const float *src, mk_half *dst, long n) {
#ifdef MK_HAVE_F16C_PATH
    if (have_f16c()) { f2h_f16c(src, dst, n); return; }
#endif
    f2h_plain(src, dst, n);
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
