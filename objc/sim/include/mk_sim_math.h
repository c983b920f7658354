// mk_sim_math.h: MSL math, common, integer, geometric and relational functions for
// scalars and vectors (part of the simulator's <metal_stdlib>). Computed in float for
// half (as the GPU's half ALUs round each result to half); fast:: and precise:: name the
// same functions (the CPU cannot reproduce the GPU's fast-math errors; tests use
// tolerances). Built on compiler builtins so <cmath> never enters the global namespace.
#ifndef MK_SIM_MATH_H
#define MK_SIM_MATH_H

namespace metal {

// The float type a math function of T returns: half stays half, integers and double
// literals become float (MSL has no double).
template <class T> struct mfloat { typedef float type; };
template <> struct mfloat<half> { typedef half type; };
template <class T> using mfloat_t = typename mfloat<mk_plain_t<T>>::type;

// Result type of a two-argument function: vectors win, then half/float; a literal of
// another floating type adapts (max(h, 0.0) is half).
template <class A, class B> struct mcommon {
    typedef typename std::conditional<std::is_same<A, B>::value, A,
        typename std::conditional<std::is_floating_point<A>::value || std::is_same<A, half>::value,
            typename std::conditional<std::is_same<A, double>::value &&
                                          (std::is_floating_point<B>::value || std::is_same<B, half>::value), B, A>::type,
            typename std::conditional<std::is_floating_point<B>::value || std::is_same<B, half>::value, B,
                                      typename std::common_type<A, B>::type>::type>::type>::type type;
};
template <class A, class B, bool AV = vtraits_t<A>::is_vec, bool BV = vtraits_t<B>::is_vec>
struct mcommon_v { typedef typename vtraits_t<A>::type type; };
template <class A, class B> struct mcommon_v<A, B, false, true> { typedef typename vtraits_t<B>::type type; };
template <class A, class B> struct mcommon_v<A, B, false, false> { typedef typename mcommon<A, B>::type type; };
template <class A, class B> using mcommon_t = typename mcommon_v<mk_plain_t<A>, mk_plain_t<B>>::type;
template <class A, class B, class C> using mcommon3_t = mcommon_t<mcommon_t<A, B>, C>;

template <class T, class A> inline auto mget(const A &a, int i) {
    if constexpr (vtraits_t<T>::is_vec) return typename vtraits_t<T>::elem(vget<typename vtraits_t<T>::elem>(a, i));
    else return T(a);
}
template <class T> struct mlen { static constexpr int n = 1; };
template <class T, int N> struct mlen<vec<T, N>> { static constexpr int n = N; };

template <class X> using mk_if_any = typename std::enable_if<vtraits_t<X>::is_vec || is_mk_scalar<X>::value, int>::type;

// unary float functions
#define MK_UNARY(name, fexpr)                                                                      \
    template <class X, mk_if_any<X> = 0> inline auto name(const X &x) {                           \
        if constexpr (vtraits_t<X>::is_vec) {                                                      \
            auto v = to_vec(x); typedef typename vtraits_t<X>::elem E; vec<mfloat_t<E>, vtraits_t<X>::n> r; \
            for (int i = 0; i < vtraits_t<X>::n; i++) r.v[i] = name(v.v[i]);                       \
            return r;                                                                              \
        } else { float f = float(x); (void)f; return mfloat_t<X>(fexpr); }                       \
    }
MK_UNARY(sqrt, __builtin_sqrtf(f)) MK_UNARY(rsqrt, 1.0f / __builtin_sqrtf(f))
MK_UNARY(exp, __builtin_expf(f)) MK_UNARY(exp2, __builtin_exp2f(f)) MK_UNARY(exp10, __builtin_powf(10.0f, f))
MK_UNARY(log, __builtin_logf(f)) MK_UNARY(log2, __builtin_log2f(f)) MK_UNARY(log10, __builtin_log10f(f))
MK_UNARY(sin, __builtin_sinf(f)) MK_UNARY(cos, __builtin_cosf(f)) MK_UNARY(tan, __builtin_tanf(f))
MK_UNARY(asin, __builtin_asinf(f)) MK_UNARY(acos, __builtin_acosf(f)) MK_UNARY(atan, __builtin_atanf(f))
MK_UNARY(sinh, __builtin_sinhf(f)) MK_UNARY(cosh, __builtin_coshf(f)) MK_UNARY(tanh, __builtin_tanhf(f))
MK_UNARY(asinh, __builtin_asinhf(f)) MK_UNARY(acosh, __builtin_acoshf(f)) MK_UNARY(atanh, __builtin_atanhf(f))
MK_UNARY(floor, __builtin_floorf(f)) MK_UNARY(ceil, __builtin_ceilf(f)) MK_UNARY(round, __builtin_roundf(f))
MK_UNARY(rint, __builtin_rintf(f)) MK_UNARY(trunc, __builtin_truncf(f))
MK_UNARY(fract, __builtin_fminf(f - __builtin_floorf(f), 0x1.fffffep-1f)) MK_UNARY(fabs, __builtin_fabsf(f))
MK_UNARY(sign, f > 0 ? 1.0f : f < 0 ? -1.0f : f == f ? 0.0f * f : 0.0f)
MK_UNARY(saturate, __builtin_fminf(__builtin_fmaxf(f, 0.0f), 1.0f))
MK_UNARY(cbrt, __builtin_cbrtf(f)) MK_UNARY(erf, __builtin_erff(f))
MK_UNARY(sinpi, __builtin_sinf(f * 3.14159265358979f)) MK_UNARY(cospi, __builtin_cosf(f * 3.14159265358979f))
#undef MK_UNARY

// binary / ternary float functions
#define MK_BINARY(name, fexpr)                                                                     \
    template <class X, class Y, mk_if_any<X> = 0, mk_if_any<Y> = 0>                                \
    inline auto name(const X &x, const Y &y) {                                                     \
        typedef mcommon_t<X, Y> R;                                                                 \
        if constexpr (vtraits_t<R>::is_vec) {                                                      \
            R r; for (int i = 0; i < mlen<R>::n; i++) r.v[i] = name(mget<R>(x, i), mget<R>(y, i)); return r; \
        } else { float a = float(x), b = float(y); return mfloat_t<R>(fexpr); }                  \
    }
MK_BINARY(pow, __builtin_powf(a, b)) MK_BINARY(powr, __builtin_powf(a, b))
MK_BINARY(fmin, __builtin_fminf(a, b)) MK_BINARY(fmax, __builtin_fmaxf(a, b))
MK_BINARY(fmod, __builtin_fmodf(a, b)) MK_BINARY(atan2, __builtin_atan2f(a, b))
MK_BINARY(copysign, __builtin_copysignf(a, b)) MK_BINARY(fdim, __builtin_fdimf(a, b))
MK_BINARY(step, b < a ? 0.0f : 1.0f) MK_BINARY(divide, a / b)
#undef MK_BINARY

#define MK_TERNARY(name, fexpr)                                                                    \
    template <class X, class Y, class Z, mk_if_any<X> = 0, mk_if_any<Y> = 0, mk_if_any<Z> = 0>    \
    inline auto name(const X &x, const Y &y, const Z &z) {                                         \
        typedef mcommon3_t<X, Y, Z> R;                                                             \
        if constexpr (vtraits_t<R>::is_vec) {                                                      \
            R r; for (int i = 0; i < mlen<R>::n; i++) r.v[i] = name(mget<R>(x, i), mget<R>(y, i), mget<R>(z, i)); return r; \
        } else { float a = float(x), b = float(y), c = float(z); return mfloat_t<R>(fexpr); }    \
    }
MK_TERNARY(fma, __builtin_fmaf(a, b, c)) MK_TERNARY(mad, a * b + c)
MK_TERNARY(mix, a + (b - a) * c)
MK_TERNARY(smoothstep, ([&] { float t = __builtin_fminf(__builtin_fmaxf((c - a) / (b - a), 0.0f), 1.0f); return t * t * (3.0f - 2.0f * t); })())
#undef MK_TERNARY

// functions defined for integers too: abs, min, max, clamp (integers stay integers)
template <class X, mk_if_any<X> = 0> inline auto abs(const X &x) {
    if constexpr (vtraits_t<X>::is_vec) {
        auto v = to_vec(x); for (auto &e : v.v) e = abs(e); return v;
    } else if constexpr (std::is_integral<mk_plain_t<X>>::value) return mk_plain_t<X>(x < 0 ? -x : x);
    else return mfloat_t<X>(__builtin_fabsf(float(x)));
}
#define MK_MINMAX(name, iexpr, fexpr)                                                              \
    template <class X, class Y, mk_if_any<X> = 0, mk_if_any<Y> = 0>                                \
    inline auto name(const X &x, const Y &y) {                                                     \
        typedef mcommon_t<X, Y> R;                                                                 \
        if constexpr (vtraits_t<R>::is_vec) {                                                      \
            R r; for (int i = 0; i < mlen<R>::n; i++) r.v[i] = name(mget<R>(x, i), mget<R>(y, i)); return r; \
        } else if constexpr (std::is_integral<R>::value) { R a = R(x), b = R(y); return R(iexpr); } \
        else { float a = float(x), b = float(y); return mfloat_t<R>(fexpr); }                    \
    }
MK_MINMAX(min, a < b ? a : b, __builtin_fminf(a, b))
MK_MINMAX(max, a > b ? a : b, __builtin_fmaxf(a, b))
MK_MINMAX(absdiff, a > b ? a - b : b - a, __builtin_fabsf(a - b))
MK_MINMAX(mulhi, (R)(((long long)a * (long long)b) >> (8 * sizeof(R))), a * b)
#undef MK_MINMAX
template <class X, class L, class H, mk_if_any<X> = 0, mk_if_any<L> = 0, mk_if_any<H> = 0>
inline auto clamp(const X &x, const L &lo, const H &hi) {
    typedef mcommon3_t<X, L, H> R;
    return min(max(R(x), R(lo)), R(hi));
}

// integer bit functions
template <class X> inline X popcount(X x) {
    if constexpr (vtraits_t<X>::is_vec) { for (auto &e : x.v) e = popcount(e); return x; }
    else return X(__builtin_popcountll((unsigned long long)(typename std::make_unsigned<X>::type)x));
}
template <class X> inline X clz(X x) {
    if constexpr (vtraits_t<X>::is_vec) { for (auto &e : x.v) e = clz(e); return x; }
    else {
        unsigned long long u = (typename std::make_unsigned<X>::type)x;
        return X(u ? __builtin_clzll(u) - (64 - 8 * (int)sizeof(X)) : 8 * sizeof(X));
    }
}
template <class X> inline X ctz(X x) {
    if constexpr (vtraits_t<X>::is_vec) { for (auto &e : x.v) e = ctz(e); return x; }
    else {
        unsigned long long u = (typename std::make_unsigned<X>::type)x;
        return X(u ? __builtin_ctzll(u) : 8 * sizeof(X));
    }
}

// geometric
template <class A, class B> inline auto dot(const A &a, const B &b) {
    auto x = to_vec(a), y = to_vec(b);
    typename vtraits_t<A>::elem s = 0;
    for (int i = 0; i < vtraits_t<A>::n; i++) s += x.v[i] * y.v[i];
    return s;
}
template <class A> inline auto length(const A &a) { return sqrt(dot(a, a)); }
template <class A> inline auto length_squared(const A &a) { return dot(a, a); }
template <class A, class B> inline auto distance(const A &a, const B &b) { return length(to_vec(a) - to_vec(b)); }
template <class A> inline auto normalize(const A &a) { return to_vec(a) * rsqrt(dot(a, a)); }
template <class T> inline vec<T, 3> cross(const vec<T, 3> &a, const vec<T, 3> &b) {
    return vec<T, 3>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

// relational
#define MK_REL(name, expr)                                                                         \
    template <class X, mk_if_any<X> = 0> inline auto name(const X &x) {                           \
        if constexpr (vtraits_t<X>::is_vec) {                                                      \
            auto v = to_vec(x); vec<bool, vtraits_t<X>::n> r;                                      \
            for (int i = 0; i < vtraits_t<X>::n; i++) r.v[i] = name(v.v[i]);                       \
            return r;                                                                              \
        } else { float f = float(x); return bool(expr); }                                          \
    }
MK_REL(isnan, f != f) MK_REL(isinf, __builtin_isinf(f)) MK_REL(isfinite, __builtin_isfinite(f))
MK_REL(isnormal, __builtin_isnormal(f)) MK_REL(signbit, __builtin_signbit(f))
#undef MK_REL
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }
template <int N> inline bool all(const vec<bool, N> &v) { for (int i = 0; i < N; i++) if (!v.v[i]) return false; return true; }
template <int N> inline bool any(const vec<bool, N> &v) { for (int i = 0; i < N; i++) if (v.v[i]) return true; return false; }
template <class A, typename std::enable_if<vtraits_t<A>::is_vec && !std::is_same<typename vtraits_t<A>::elem, bool>::value, int>::type = 0>
inline bool all(const A &a) { return all(to_vec(a) != 0); }
template <class A, typename std::enable_if<vtraits_t<A>::is_vec && !std::is_same<typename vtraits_t<A>::elem, bool>::value, int>::type = 0>
inline bool any(const A &a) { return any(to_vec(a) != 0); }

// select(a, b, c): c ? b : a, per component
template <class A, class B, class C> inline auto select(const A &a, const B &b, const C &c) {
    typedef mcommon_t<A, B> R;
    if constexpr (vtraits_t<R>::is_vec) {
        R r;
        for (int i = 0; i < mlen<R>::n; i++) r.v[i] = vget<bool>(c, i) ? mget<R>(b, i) : mget<R>(a, i);
        return r;
    } else return bool(c) ? R(b) : R(a);
}

namespace fast {
using metal::sqrt; using metal::rsqrt; using metal::exp; using metal::exp2; using metal::exp10;
using metal::log; using metal::log2; using metal::log10; using metal::sin; using metal::cos;
using metal::tan; using metal::asin; using metal::acos; using metal::atan; using metal::sinh;
using metal::cosh; using metal::tanh; using metal::floor; using metal::ceil; using metal::round;
using metal::rint; using metal::trunc; using metal::fract; using metal::fabs; using metal::abs;
using metal::pow; using metal::powr; using metal::fmin; using metal::fmax; using metal::min;
using metal::max; using metal::fmod; using metal::atan2; using metal::clamp; using metal::mix;
using metal::fma; using metal::saturate; using metal::sign; using metal::divide;
using metal::normalize; using metal::length; using metal::distance; using metal::step;
using metal::smoothstep; using metal::copysign; using metal::sinpi; using metal::cospi;
}
namespace precise {
using namespace fast;
}

template <class T> struct numeric_limits : std::numeric_limits<T> {};
template <> struct numeric_limits<half> {
    static constexpr bool is_specialized = true;
    static constexpr half min() { return half(6.103515625e-05f); }
    static constexpr half max() { return half(65504.0f); }
    static constexpr half lowest() { return half(-65504.0f); }
    static constexpr half epsilon() { return half(0.0009765625f); }
    static constexpr half infinity() { return half(__builtin_inff()); }
    static constexpr half quiet_NaN() { return half(__builtin_nanf("")); }
    static constexpr int digits = 11;
};

}  // namespace metal

#ifndef MAXFLOAT
#define MAXFLOAT 3.40282346638528859812e+38F
#endif
#define FLT_MAX_MSL_ 3.40282346638528859812e+38F
#ifndef FLT_MAX
#define FLT_MAX 3.40282346638528859812e+38F
#endif
#ifndef FLT_MIN
#define FLT_MIN 1.17549435082228750797e-38F
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 1.1920928955078125e-07F
#endif
#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#ifndef HUGE_VALF
#define HUGE_VALF (__builtin_huge_valf())
#endif
#define HALF_MAX (::metal::half(65504.0f))
#define HALF_MIN (::metal::half(6.103515625e-05f))
#define HALF_EPSILON (::metal::half(0.0009765625f))
#define M_PI_F 3.14159265358979323846264338327950288f
#define M_PI_2_F 1.57079632679489661923132169163975144f
#define M_PI_4_F 0.785398163397448309615660845819875721f
#define M_1_PI_F 0.318309886183790671537767526745028724f
#define M_2_PI_F 0.636619772367581343075535053490057448f
#define M_2_SQRTPI_F 1.12837916709551257389615890312154517f
#define M_SQRT2_F 1.41421356237309504880168872420969808f
#define M_SQRT1_2_F 0.707106781186547524400844362104849039f
#define M_E_F 2.71828182845904523536028747135266250f
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#define M_LOG10E_F 0.434294481903251827651128918916605082f
#define M_LN2_F 0.693147180559945309417232121458176568f
#define M_LN10_F 2.30258509299404568401799145468436421f
#endif
