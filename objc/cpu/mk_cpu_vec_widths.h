// mk_cpu_vec_widths.h: compiles the per-width vector file MK_VEC_IMPL (and MK_VEC_IMPL2 when
// defined) once per vector width, with RV_W, RV_NAME(f) (f suffixed per width) and RV_ATTR
// (its target) defined; MK_VEC_PICK(f) is then &f for this CPU. With MK_VEC_DISPATCH
// (mk_cpu_vecmath.h): 16 floats for x86-64-v4 (AVX-512) and 8 floats as target clones for
// x86-64-v3 and the baseline; elsewhere one set for the compiler's target (16 floats with
// AVX-512, else 8: NEON on the Mac). Included by the .c file after its own includes.
#include "mk_cpu_vecmath.h"

#ifdef MK_VEC_DISPATCH
#define RV_W 16
#define RV_NAME(f) f##_w16
#define RV_ATTR __attribute__((target("arch=x86-64-v4")))
#include MK_VEC_IMPL
#ifdef MK_VEC_IMPL2
#include MK_VEC_IMPL2
#endif
#undef RV_W
#undef RV_NAME
#undef RV_ATTR

#define RV_W 8
#define RV_NAME(f) f##_w8
#define RV_ATTR __attribute__((target_clones("arch=x86-64-v3", "default")))
#include MK_VEC_IMPL
#ifdef MK_VEC_IMPL2
#include MK_VEC_IMPL2
#endif
#define MK_VEC_PICK(f) (mk_vec_wide() ? &f##_w16 : &f##_w8)

#else
#if defined(MK_VEC_W)            /* a test build: -DMK_NO_MULTIVERSION -DMK_VEC_W=16 on AVX2 */
#define RV_W MK_VEC_W
#elif defined(__AVX512F__)
#define RV_W 16
#else
#define RV_W 8
#endif
#define RV_NAME(f) f##_one
#define RV_ATTR
#include MK_VEC_IMPL
#ifdef MK_VEC_IMPL2
#include MK_VEC_IMPL2
#endif
#define MK_VEC_PICK(f) (&f##_one)
#endif
#undef RV_W
#undef RV_NAME
#undef RV_ATTR
