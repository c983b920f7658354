// mk_sim_vec.h: MSL scalar and vector types in C++ (part of the simulator's <metal_stdlib>).
// vec<T,N> has MSL's size and alignment (a 3-vector occupies 4 elements), component
// members x y z w / r g b a, swizzles (mk_sim_swizzles.h), element-wise operators and
// explicit conversions between element types; packed_vec<T,N> is the unaligned form.
#ifndef MK_SIM_VEC_H
#define MK_SIM_VEC_H

namespace metal {

#if !defined(__OPENCL_CPP_VERSION__)
typedef _Float16 half;   // C++ for OpenCL (the strict check) has `half` built in
#endif
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;   // 64-bit on every host the simulator supports (LP64)

template <class T, int N> struct vec;
template <class T, int N> struct packed_vec;
template <class T, int S, int... I> struct swz;

// The type of a value without reference, cv or (in the strict check) address space:
// template deduction keeps OpenCL's address spaces in the deduced type.
template <class T> struct mk_noas { typedef T type; };
#if defined(__OPENCL_CPP_VERSION__)
template <class T> struct mk_noas<__private T> { typedef T type; };
template <class T> struct mk_noas<__global T> { typedef T type; };
template <class T> struct mk_noas<__local T> { typedef T type; };
template <class T> struct mk_noas<__constant T> { typedef T type; };
template <class T> struct mk_noas<__generic T> { typedef T type; };
#endif
template <class A> using mk_plain_t =
    typename std::remove_cv<typename mk_noas<typename std::remove_cv<typename std::remove_reference<A>::type>::type>::type>::type;

template <class T> struct is_mk_scalar
    : std::integral_constant<bool, std::is_arithmetic<mk_plain_t<T>>::value || std::is_same<mk_plain_t<T>, half>::value> {};

// vtraits: what a value is as a vector (its vector type, element, size)
template <class A> struct vtraits { static constexpr bool is_vec = false; };
template <class T, int N> struct vtraits<vec<T, N>> {
    static constexpr bool is_vec = true; typedef vec<T, N> type; typedef T elem; static constexpr int n = N;
};
template <class T, int N> struct vtraits<packed_vec<T, N>> {
    static constexpr bool is_vec = true; typedef vec<T, N> type; typedef T elem; static constexpr int n = N;
};
template <class T, int S, int... I> struct vtraits<swz<T, S, I...>> {
    static constexpr bool is_vec = true; typedef vec<T, (int)sizeof...(I)> type; typedef T elem;
    static constexpr int n = (int)sizeof...(I);
};
template <class A> using vtraits_t = vtraits<mk_plain_t<A>>;

// component count of a constructor argument and the k-th component
template <class A, class = void> struct ncomp { static constexpr int value = 1; };
template <class A> struct ncomp<A, typename std::enable_if<vtraits_t<A>::is_vec>::type> {
    static constexpr int value = vtraits_t<A>::n;
};

template <class T, int S, int... I> struct swz {
    T v[S];
    typedef vec<T, (int)sizeof...(I)> V;
    operator V() const { return V(v[I]...); }
    swz &operator=(const V &o) {
        int k = 0;
        ((void)(v[I] = o.v[k++]), ...);
        return *this;
    }
    swz &operator=(const swz &o) { return *this = V(o); }
    template <int S2, int... J> swz &operator=(const swz<T, S2, J...> &o) { return *this = V(o); }
    T operator[](int i) const { const int idx[] = {I...}; return v[idx[i]]; }
    template <class U> swz &operator+=(const U &o) { return *this = V(*this) + o; }
    template <class U> swz &operator-=(const U &o) { return *this = V(*this) - o; }
    template <class U> swz &operator*=(const U &o) { return *this = V(*this) * o; }
    template <class U> swz &operator/=(const U &o) { return *this = V(*this) / o; }
};

#include "mk_sim_swizzles.h"

template <class T, int N> struct vec_base;

// Copies. The profiling build (mpskern/sim/profile_ir.py) joins the element accesses made
// inside these headers into one vector access. A defaulted copy is trivial: clang lowers
// `float4 v = *p` (or the copy of a struct holding a vector, or any packed_vec copy) to
// element loads at the kernel's own line, which counted as scalar loads while `v = *p`
// (vec's operator=, below) counted as one vector load. So that build spells every copy
// out here; the others keep the trivial copy constructor (the same bits either way).
#if defined(__MPSKERN_PROFILE__)
#define MK_COPY_CTOR(V, N_) V(const V &o) { for (int i = 0; i < N_; i++) v[i] = o.v[i]; }
#define MK_PACKED_COPY(N_)                                                                     \
    MK_COPY_CTOR(packed_vec, N_)                                                               \
    packed_vec &operator=(const packed_vec &o) { for (int i = 0; i < N_; i++) v[i] = o.v[i]; return *this; }
#else
#define MK_COPY_CTOR(V, N_) V(const V &) = default;
#define MK_PACKED_COPY(N_)
#endif
#define MK_VEC_COPY                                                                            \
    MK_COPY_CTOR(vec, size)                                                                    \
    vec &operator=(const vec &o) { for (int i = 0; i < size; i++) v[i] = o.v[i]; return *this; }

// MSL's vectors are trivially copyable, so a union (or a struct with an anonymous union)
// holding one can be assigned: `U b; b = a;`. Ours need that operator= above (a defaulted
// one would be deleted: the swizzle members' assignment writes only their components), and
// a union member with a non-trivial operator= deletes the union's. The front-end
// (mpskern/sim/frontend.py: _union_assign) puts this byte copy into each such aggregate.
#define __mk_union_assign(U)                                                                   \
    U &operator=(const U &o) { __builtin_memcpy((void *)this, (const void *)&o, sizeof(U)); return *this; }


#define MK_VEC_COMMON(N_, S_)                                                                  \
    typedef T value_type;                                                                      \
    static constexpr int size = N_;                                                            \
    vec() = default;                                                                           \
    template <class U, typename std::enable_if<is_mk_scalar<U>::value, int>::type = 0>         \
    vec(U s) { for (int i = 0; i < N_; i++) v[i] = T(s); }                                     \
    template <class A, class B, class... R>                                                    \
    vec(const A &a, const B &b, const R &...r) {                                               \
        static_assert(ncomp<A>::value + ncomp<B>::value + (0 + ... + ncomp<R>::value) == N_,   \
                      "vector constructor: wrong number of components");                      \
        int k = 0; put(k, a); put(k, b); (put(k, r), ...);                                     \
    }                                                                                          \
    /* explicit conversion from any N_-vector of another element type (vector, packed,    \
       swizzle: half2(x.xy)); the swizzle and packed ones recursed through packed_vec's   \
       constructor forever (a stack overflow at run time) */                             \
    template <class A, typename std::enable_if<vtraits_t<A>::is_vec && vtraits_t<A>::n == N_ && \
        !std::is_same<typename vtraits_t<A>::elem, T>::value, int>::type = 0>              \
    explicit vec(const A &a) {                                                                 \
        typename vtraits_t<A>::type t = a;                                                     \
        for (int i = 0; i < N_; i++) v[i] = T(t.v[i]);                                         \
    }                                                                                          \
    vec(const packed_vec<T, N_> &o) { for (int i = 0; i < N_; i++) v[i] = o.v[i]; }            \
    template <int S2, int... I> vec(const swz<T, S2, I...> &o) {                               \
        static_assert(sizeof...(I) == N_, "swizzle size differs from the vector's");          \
        const int idx[] = {I...};                                                              \
        for (int i = 0; i < N_; i++) v[i] = o.v[idx[i]];                                       \
    }                                                                                          \
    T &operator[](int i) { return v[i]; }                                                      \
    const T &operator[](int i) const { return v[i]; }                                          \
  private:                                                                                     \
    template <class A> void put(int &k, const A &a) {                                          \
        if constexpr (vtraits_t<A>::is_vec) {                                                    \
            typename vtraits_t<A>::type t = a;                                                   \
            for (int i = 0; i < vtraits_t<A>::n; i++) v[k++] = T(t.v[i]);                        \
        } else v[k++] = T(a);                                                                  \
    }                                                                                          \
  public:

template <class T> struct alignas(2 * sizeof(T)) vec<T, 2> {
    union { T v[2]; struct { T x, y; }; struct { T r, g; }; MK_SWIZZLES2(T, 2) };
    MK_VEC_COMMON(2, 2)
    MK_VEC_COPY
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 3> {
    union { T v[4]; struct { T x, y, z; }; struct { T r, g, b; }; MK_SWIZZLES3(T, 4) };
    MK_VEC_COMMON(3, 4)
    MK_VEC_COPY
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 4> {
    union { T v[4]; struct { T x, y, z, w; }; struct { T r, g, b, a; }; MK_SWIZZLES4(T, 4) };
    MK_VEC_COMMON(4, 4)
    MK_VEC_COPY
};

// packed_float3 etc.: element alignment, N elements, converts to and from vec<T,N> (one way
// each: vec's constructor from packed_vec and packed_vec's from vec; a conversion operator
// as well made `float4 v = packed` ambiguous, which MSL accepts).
// packed_vec's element-wise constructor: several parts, or one scalar or vector (anything
// else as one argument is no vector's constructor, as in MSL; taking it made vec's
// constructor from packed_vec and this one call each other)
#define MK_PACKED_ARGS(A, R) typename std::enable_if<(sizeof...(R) > 0) || is_mk_scalar<A>::value || \
    vtraits_t<A>::is_vec, int>::type = 0
template <class T, int N> struct packed_vec {
    union { T v[N]; struct { T x, y, z, w; } ; };
    packed_vec() = default;
    MK_PACKED_COPY(N)
    packed_vec(const vec<T, N> &o) { for (int i = 0; i < N; i++) v[i] = o.v[i]; }
    template <class A, class... R, MK_PACKED_ARGS(A, R)> packed_vec(const A &a, const R &...r) : packed_vec(vec<T, N>(a, r...)) {}
    T &operator[](int i) { return v[i]; }
    const T &operator[](int i) const { return v[i]; }
};
template <class T> struct packed_vec<T, 2> {
    union { T v[2]; struct { T x, y; }; };
    packed_vec() = default;
    MK_PACKED_COPY(2)
    packed_vec(const vec<T, 2> &o) { v[0] = o.v[0]; v[1] = o.v[1]; }
    template <class A, class... R, MK_PACKED_ARGS(A, R)> packed_vec(const A &a, const R &...r) : packed_vec(vec<T, 2>(a, r...)) {}
    T &operator[](int i) { return v[i]; }
    const T &operator[](int i) const { return v[i]; }
};
template <class T> struct packed_vec<T, 3> {
    union { T v[3]; struct { T x, y, z; }; };
    packed_vec() = default;
    MK_PACKED_COPY(3)
    packed_vec(const vec<T, 3> &o) { for (int i = 0; i < 3; i++) v[i] = o.v[i]; }
    template <class A, class... R, MK_PACKED_ARGS(A, R)> packed_vec(const A &a, const R &...r) : packed_vec(vec<T, 3>(a, r...)) {}
    T &operator[](int i) { return v[i]; }
    const T &operator[](int i) const { return v[i]; }
};

template <class A> inline typename vtraits_t<A>::type to_vec(const A &a) { return a; }

// ---- element-wise operators (vectors, swizzles, packed vectors, with scalars) ----------
template <class A, class B> struct vop_ok
    : std::integral_constant<bool, (vtraits_t<A>::is_vec || vtraits_t<B>::is_vec) &&
                                       (vtraits_t<A>::is_vec || is_mk_scalar<A>::value) &&
                                       (vtraits_t<B>::is_vec || is_mk_scalar<B>::value)> {};
template <class A, class B> struct vop_type {
    typedef typename std::conditional<vtraits_t<A>::is_vec, vtraits_t<A>, vtraits_t<B>>::type tr;
    typedef typename tr::elem elem;
    static constexpr int n = tr::n;
};
template <class T, class A> inline T vget(const A &a, int i) {
    if constexpr (vtraits_t<A>::is_vec) return T(to_vec(a).v[i]);
    else return T(a);
}

#define MK_VBINOP(op)                                                                             \
    template <class A, class B, typename std::enable_if<vop_ok<A, B>::value, int>::type = 0>     \
    inline auto operator op(const A &a, const B &b) {                                            \
        typedef vop_type<A, B> VT; typedef typename VT::elem T;                                  \
        vec<T, VT::n> r;                                                                          \
        for (int i = 0; i < VT::n; i++) r.v[i] = T(vget<T>(a, i) op vget<T>(b, i));              \
        return r;                                                                                 \
    }
MK_VBINOP(+) MK_VBINOP(-) MK_VBINOP(*) MK_VBINOP(/) MK_VBINOP(%)
MK_VBINOP(&) MK_VBINOP(|) MK_VBINOP(^) MK_VBINOP(<<) MK_VBINOP(>>)
#undef MK_VBINOP

#define MK_VCMPOP(op)                                                                             \
    template <class A, class B, typename std::enable_if<vop_ok<A, B>::value, int>::type = 0>     \
    inline auto operator op(const A &a, const B &b) {                                            \
        typedef vop_type<A, B> VT; typedef typename VT::elem T;                                  \
        vec<bool, VT::n> r;                                                                       \
        for (int i = 0; i < VT::n; i++) r.v[i] = vget<T>(a, i) op vget<T>(b, i);                  \
        return r;                                                                                 \
    }
MK_VCMPOP(==) MK_VCMPOP(!=) MK_VCMPOP(<) MK_VCMPOP(>) MK_VCMPOP(<=) MK_VCMPOP(>=) MK_VCMPOP(&&) MK_VCMPOP(||)
#undef MK_VCMPOP

#define MK_VASSIGN(op)                                                                            \
    template <class T, int N, class B> inline vec<T, N> &operator op##=(vec<T, N> &a, const B &b) { \
        return a = vec<T, N>(a op b);                                                             \
    }
MK_VASSIGN(+) MK_VASSIGN(-) MK_VASSIGN(*) MK_VASSIGN(/) MK_VASSIGN(%)
MK_VASSIGN(&) MK_VASSIGN(|) MK_VASSIGN(^) MK_VASSIGN(<<) MK_VASSIGN(>>)
#undef MK_VASSIGN

template <class A, typename std::enable_if<vtraits_t<A>::is_vec, int>::type = 0>
inline auto operator-(const A &a) { auto v = to_vec(a); for (auto &e : v.v) e = -e; return v; }
template <class A, typename std::enable_if<vtraits_t<A>::is_vec, int>::type = 0>
inline auto operator+(const A &a) { return to_vec(a); }
template <class A, typename std::enable_if<vtraits_t<A>::is_vec, int>::type = 0>
inline auto operator~(const A &a) { auto v = to_vec(a); for (auto &e : v.v) e = ~e; return v; }
template <class A, typename std::enable_if<vtraits_t<A>::is_vec, int>::type = 0>
inline auto operator!(const A &a) {
    auto v = to_vec(a);
    vec<bool, vtraits_t<A>::n> r;
    for (int i = 0; i < vtraits_t<A>::n; i++) r.v[i] = !v.v[i];
    return r;
}
template <class T, int N> inline vec<T, N> &operator++(vec<T, N> &a) { return a += T(1); }
template <class T, int N> inline vec<T, N> &operator--(vec<T, N> &a) { return a -= T(1); }

#define MK_VEC_TYPES(T, name)                                                                   \
    typedef vec<T, 2> name##2; typedef vec<T, 3> name##3; typedef vec<T, 4> name##4;           \
    typedef packed_vec<T, 2> packed_##name##2; typedef packed_vec<T, 3> packed_##name##3;      \
    typedef packed_vec<T, 4> packed_##name##4;
MK_VEC_TYPES(float, float) MK_VEC_TYPES(half, half) MK_VEC_TYPES(int, int) MK_VEC_TYPES(uint, uint)
MK_VEC_TYPES(short, short) MK_VEC_TYPES(ushort, ushort) MK_VEC_TYPES(char, char)
MK_VEC_TYPES(uchar, uchar) MK_VEC_TYPES(bool, bool) MK_VEC_TYPES(long, long) MK_VEC_TYPES(ulong, ulong)
#undef MK_VEC_TYPES

static_assert(sizeof(float3) == 16 && alignof(float3) == 16, "MSL float3 layout");
static_assert(sizeof(half3) == 8 && sizeof(packed_float3) == 12, "MSL half3 / packed_float3 layout");

// as_type<T>(x): reinterpret the bits (sizes must match, as in MSL)
template <class T, class U> inline T as_type(const U &u) {
    static_assert(sizeof(T) == sizeof(U), "as_type: sizes differ");
    T t;
    __builtin_memcpy(&t, &u, sizeof t);
    return t;
}

}  // namespace metal
#endif
