// mk_sim_sync.h: what needs the runtime (part of the simulator's <metal_stdlib>):
// barriers, SIMD-group and quad-group collectives, simdgroup_matrix, atomics,
// threadgroup variables, and the helpers the generated launch glue uses.
//
// Collectives publish the lane's value and block until the SIMD-group resolves (see
// objc/sim/sched.cc); the result is then computed from the participants' values in lane
// order, so reductions are deterministic whatever order the fibers ran in.
#ifndef MK_SIM_SYNC_H
#define MK_SIM_SYNC_H

#if defined(__OPENCL_CPP_VERSION__)
const mk_sim_rt *__mk_rt_strict(void);   // the strict check: declared, never called
#define __mk_rt (__mk_rt_strict())
typedef const __constant char *mk_site_str;   // OpenCL string literals are `constant`
#else
static const mk_sim_rt *__mk_rt;   // set by mk_sim_module_init (one per library)
typedef const char *mk_site_str;
#endif

namespace metal {

enum class mem_flags : unsigned {
    mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8,
    mem_object_data = 16
};
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((unsigned)a | (unsigned)b); }
inline mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags((unsigned)a & (unsigned)b); }

inline void __mk_threadgroup_barrier(mk_site_str f, int l, mem_flags m = mem_flags::mem_none) {
    __mk_rt->barrier((unsigned)m, f, l);
}
inline void __mk_simdgroup_barrier(mk_site_str f, int l, mem_flags m = mem_flags::mem_none) {
    __mk_rt->simd_barrier((unsigned)m, f, l);
}
#define threadgroup_barrier(...) __mk_threadgroup_barrier(__FILE__, __LINE__, ##__VA_ARGS__)
#define simdgroup_barrier(...) __mk_simdgroup_barrier(__FILE__, __LINE__, ##__VA_ARGS__)

// The call site of a collective is the return address of this out-of-line call, which
// lies in the (always inlined) collective's body at the kernel's call site.
__attribute__((noinline)) inline const mk_sim_xchg *__mk_xchg(const void *v, unsigned n) {
    return __mk_rt->simd_exchange(v, n, __builtin_return_address(0));
}
template <class T> inline T __mk_slot(const mk_sim_xchg *e, unsigned lane) {
    T v;
    __builtin_memcpy(&v, e->slots + lane * MK_SIM_XCHG_BYTES, sizeof(T));
    return v;
}
#define MK_COLLECTIVE __attribute__((always_inline)) inline

#define MK_SIMD_REDUCE(name, init, op)                                                           \
    template <class T> MK_COLLECTIVE T name(T x) {                                               \
        static_assert(sizeof(T) <= MK_SIM_XCHG_BYTES, #name ": value too large");                \
        const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));                                         \
        uint32_t m = e->mask;                                                                    \
        T r = __mk_slot<T>(e, __builtin_ctz(m));                                                 \
        for (m &= m - 1; m; m &= m - 1) { T v = __mk_slot<T>(e, __builtin_ctz(m)); r = op; }     \
        return r;                                                                                \
    }
MK_SIMD_REDUCE(simd_sum, 0, r + v)
MK_SIMD_REDUCE(simd_product, 1, r * v)
MK_SIMD_REDUCE(simd_max, 0, max(r, v))
MK_SIMD_REDUCE(simd_min, 0, min(r, v))
MK_SIMD_REDUCE(simd_and, 0, r & v)
MK_SIMD_REDUCE(simd_or, 0, r | v)
MK_SIMD_REDUCE(simd_xor, 0, r ^ v)
#undef MK_SIMD_REDUCE

#define MK_SIMD_PREFIX(name, incl, zero, op)                                                     \
    template <class T> MK_COLLECTIVE T name(T x) {                                               \
        const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));                                         \
        T r = T(zero);                                                                           \
        for (uint32_t m = e->mask; m; m &= m - 1) {                                              \
            unsigned i = __builtin_ctz(m);                                                       \
            if (i > e->lane || (!incl && i == e->lane)) break;                                   \
            T v = __mk_slot<T>(e, i); r = op;                                                    \
        }                                                                                        \
        return r;                                                                                \
    }
MK_SIMD_PREFIX(simd_prefix_inclusive_sum, 1, 0, r + v)
MK_SIMD_PREFIX(simd_prefix_exclusive_sum, 0, 0, r + v)
MK_SIMD_PREFIX(simd_prefix_inclusive_product, 1, 1, r * v)
MK_SIMD_PREFIX(simd_prefix_exclusive_product, 0, 1, r * v)
#undef MK_SIMD_PREFIX

// shuffles: lanes outside the SIMD-group (or not active) keep their own value
template <class T> MK_COLLECTIVE T __mk_pick(const mk_sim_xchg *e, T own, long src) {
    if (src < 0 || src >= (long)e->width || !((e->mask >> src) & 1)) return own;
    return __mk_slot<T>(e, (unsigned)src);
}
template <class T, class I> MK_COLLECTIVE T simd_shuffle(T x, I lane) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_pick(e, x, (long)lane);
}
template <class T, class I> MK_COLLECTIVE T simd_broadcast(T x, I lane) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_pick(e, x, (long)lane);
}
template <class T> MK_COLLECTIVE T simd_broadcast_first(T x) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_slot<T>(e, __builtin_ctz(e->mask));
}
template <class T, class I> MK_COLLECTIVE T simd_shuffle_down(T x, I d) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_pick(e, x, (long)e->lane + (long)d);
}
template <class T, class I> MK_COLLECTIVE T simd_shuffle_up(T x, I d) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_pick(e, x, (long)e->lane - (long)d);
}
template <class T, class I> MK_COLLECTIVE T simd_shuffle_xor(T x, I m) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_pick(e, x, (long)(e->lane ^ (unsigned)m));
}
template <class T, class I> MK_COLLECTIVE T simd_shuffle_rotate_down(T x, I d) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));
    return __mk_pick(e, x, (long)((e->lane + (unsigned)d) % e->width));
}
template <class T, class I> MK_COLLECTIVE T simd_shuffle_rotate_up(T x, I d) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));
    return __mk_pick(e, x, (long)((e->lane + e->width - (unsigned)d % e->width) % e->width));
}
template <class T, class I> MK_COLLECTIVE T simd_shuffle_and_fill_down(T x, T fill, I d) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));
    long s = (long)e->lane + (long)d;
    return s < (long)e->width ? __mk_pick(e, x, s) : fill;
}

struct simd_vote {
    typedef uint64_t vote_t;
    vote_t v;
    explicit simd_vote(vote_t x = 0) : v(x) {}
    explicit operator vote_t() const { return v; }
    bool all() const { return v == 0xFFFFFFFFull; }
    bool any() const { return v != 0; }
};
MK_COLLECTIVE simd_vote simd_ballot(bool p) {
    const mk_sim_xchg *e = __mk_xchg(&p, 1);
    uint64_t r = 0;
    for (uint32_t m = e->mask; m; m &= m - 1) if (__mk_slot<bool>(e, __builtin_ctz(m))) r |= 1ull << __builtin_ctz(m);
    return simd_vote(r);
}
MK_COLLECTIVE simd_vote simd_active_threads_mask() { bool t = true; return simd_vote(__mk_xchg(&t, 1)->mask); }
MK_COLLECTIVE bool simd_all(bool p) { return simd_ballot(p).v == (uint64_t)__mk_xchg(&p, 1)->mask; }
MK_COLLECTIVE bool simd_any(bool p) { return simd_ballot(p).v != 0; }
MK_COLLECTIVE bool simd_is_first() {
    bool t = true;
    const mk_sim_xchg *e = __mk_xchg(&t, 1);
    return (unsigned)__builtin_ctz(e->mask) == e->lane;
}

// quad-groups: lanes 4k..4k+3 of a SIMD-group
template <class T, class I> MK_COLLECTIVE T quad_shuffle(T x, I l) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_pick(e, x, (long)((e->lane & ~3u) + ((unsigned)l & 3u)));
}
template <class T, class I> MK_COLLECTIVE T quad_broadcast(T x, I l) { return quad_shuffle(x, l); }
template <class T, class I> MK_COLLECTIVE T quad_shuffle_xor(T x, I m) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T)); return __mk_pick(e, x, (long)((e->lane & ~3u) | ((e->lane ^ (unsigned)m) & 3u)));
}
template <class T, class I> MK_COLLECTIVE T quad_shuffle_down(T x, I d) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));
    unsigned q = (e->lane & 3u) + (unsigned)d;
    return q < 4 ? __mk_pick(e, x, (long)((e->lane & ~3u) + q)) : x;
}
template <class T, class I> MK_COLLECTIVE T quad_shuffle_up(T x, I d) {
    const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));
    long q = (long)(e->lane & 3u) - (long)d;
    return q >= 0 ? __mk_pick(e, x, (long)(e->lane & ~3u) + q) : x;
}
#define MK_QUAD_REDUCE(name, op)                                                                 \
    template <class T> MK_COLLECTIVE T name(T x) {                                               \
        const mk_sim_xchg *e = __mk_xchg(&x, sizeof(T));                                         \
        uint32_t m = e->mask & (0xFu << (e->lane & ~3u));                                        \
        T r = __mk_slot<T>(e, __builtin_ctz(m));                                                 \
        for (m &= m - 1; m; m &= m - 1) { T v = __mk_slot<T>(e, __builtin_ctz(m)); r = op; }     \
        return r;                                                                                \
    }
MK_QUAD_REDUCE(quad_sum, r + v)
MK_QUAD_REDUCE(quad_max, max(r, v))
MK_QUAD_REDUCE(quad_min, min(r, v))
MK_QUAD_REDUCE(quad_product, r * v)
#undef MK_QUAD_REDUCE

// ---- simdgroup_matrix (8x8) ----------------------------------------------------------
// Like the hardware, each lane holds two elements of the tile: row fm, columns fn and
// fn+1 (the layout thread_elements() exposes; MLX relies on it). Loads and stores touch
// only the lane's own elements; multiplies exchange the operands across the SIMD-group.
inline void __mk_frag_coord(unsigned lane, int &row, int &col) {
    row = (int)(((lane >> 4) & 1) << 2 | ((lane >> 1) & 3));
    col = (int)(((lane >> 3) & 1) << 2 | (lane & 1) << 1);
}
inline unsigned __mk_frag_owner(int row, int col) {
    return (unsigned)(((row & 3) << 1) | ((row & 4) << 2) | ((col >> 1) & 1) | ((col & 4) << 1));
}

template <class T, int Rows, int Cols> struct simdgroup_matrix {
    static_assert(Rows == 8 && Cols == 8, "the simulator supports 8x8 simdgroup matrices");
    static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value,
                  "simdgroup_matrix: the element type must be float or half");
    // the lane's two elements ARE a vec<T, 2>: thread_elements() returns a reference to
    // them, not to a reinterpreted T[2] (which the optimiser may assume a write through
    // the vector does not change), so a write through it reaches the fragment, as on Metal
    vec<T, 2> e;
    simdgroup_matrix() = default;
    // MSL: a diagonal matrix with `d` on the diagonal
    explicit simdgroup_matrix(T d) {
        int r, c;
        __mk_frag_coord(__mk_rt->lane()->thread_index_in_simdgroup, r, c);
        e[0] = r == c ? d : T(0);
        e[1] = r == c + 1 ? d : T(0);
    }
#if defined(__OPENCL_CPP_VERSION__)
    // MSL: `thread vec<T, 2> &thread_elements() thread`; binds to a `thread float2 &`
    __private vec<T, 2> &thread_elements() __private { return e; }
    const __private vec<T, 2> &thread_elements() const __private { return e; }
#else
    vec<T, 2> &thread_elements() { return e; }
    const vec<T, 2> &thread_elements() const { return e; }
#endif
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;

template <class T, int R, int C> inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T v) {
    simdgroup_matrix<T, R, C> m;
    m.e[0] = m.e[1] = v;
    return m;
}

// Where this lane's two fragment elements live in a matrix of `elements_per_row` columns
// starting at `origin` (x: column, y: row), read transposed or not: simdgroup_load/store.
inline void __mk_frag_offsets(unsigned long at[2], unsigned long elements_per_row,
                              vec<unsigned long, 2> origin, bool transpose) {
    int r, c;
    __mk_frag_coord(__mk_rt->lane()->thread_index_in_simdgroup, r, c);
    for (int j = 0; j < 2; j++) {
        unsigned long row = transpose ? c + j : r, col = transpose ? r : c + j;
        at[j] = (origin.y + row) * elements_per_row + origin.x + col;
    }
}

template <class T, int R, int C, class U>
inline void simdgroup_load(simdgroup_matrix<T, R, C> &d, const U *src, unsigned long elements_per_row = C,
                           vec<unsigned long, 2> origin = vec<unsigned long, 2>(0, 0), bool transpose = false) {
    static_assert(std::is_same<mk_plain_t<U>, T>::value,
                  "simdgroup_load: the source's element type must be the matrix's (MSL converts nothing)");
    unsigned long at[2];
    __mk_frag_offsets(at, elements_per_row, origin, transpose);
    for (int j = 0; j < 2; j++) d.e[j] = T(src[at[j]]);
}
template <class T, int R, int C, class U>
inline void simdgroup_store(const simdgroup_matrix<T, R, C> &s, U *dst, unsigned long elements_per_row = C,
                            vec<unsigned long, 2> origin = vec<unsigned long, 2>(0, 0), bool transpose = false) {
    static_assert(std::is_same<mk_plain_t<U>, T>::value,
                  "simdgroup_store: the destination's element type must be the matrix's (MSL converts nothing)");
    unsigned long at[2];
    __mk_frag_offsets(at, elements_per_row, origin, transpose);
    for (int j = 0; j < 2; j++) dst[at[j]] = U(s.e[j]);
}

template <class TD, class TA, class TB, class TC>
MK_COLLECTIVE void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                                                 const simdgroup_matrix<TB, 8, 8> &b,
                                                 const simdgroup_matrix<TC, 8, 8> &c) {
    struct Ops { TA a[2]; TB b[2]; } mine;
    static_assert(sizeof(Ops) <= MK_SIM_XCHG_BYTES, "simdgroup matrix operands too large");
    mine.a[0] = a.e[0]; mine.a[1] = a.e[1]; mine.b[0] = b.e[0]; mine.b[1] = b.e[1];
    TC c0 = c.e[0], c1 = c.e[1];
    const mk_sim_xchg *x = __mk_xchg(&mine, sizeof mine);
    int row, col;
    __mk_frag_coord(x->lane, row, col);
    TD acc[2] = {TD(c0), TD(c1)};
    for (int k = 0; k < 8; k++) {
        const Ops *pa = (const Ops *)(x->slots + __mk_frag_owner(row, k) * MK_SIM_XCHG_BYTES);
        TD av = TD(pa->a[k & 1]);
        for (int j = 0; j < 2; j++) {
            const Ops *pb = (const Ops *)(x->slots + __mk_frag_owner(k, col + j) * MK_SIM_XCHG_BYTES);
            acc[j] += av * TD(pb->b[j]);
        }
    }
    d.e[0] = acc[0];
    d.e[1] = acc[1];
}
template <class TD, class TA, class TB>
MK_COLLECTIVE void simdgroup_multiply(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                                      const simdgroup_matrix<TB, 8, 8> &b) {
    simdgroup_matrix<TD, 8, 8> z = make_filled_simdgroup_matrix<TD, 8, 8>(TD(0));
    simdgroup_multiply_accumulate(d, a, b, z);
}

// ---- atomics (relaxed, as MSL; real atomics: threadgroups run on several OS threads) ----
enum memory_order { memory_order_relaxed = 0, memory_order_seq_cst = 5 };
enum class thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
template <class T> struct atomic { T __v; };
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;
typedef atomic<ulong> atomic_ulong;

template <class T> inline T *__mk_ap(volatile atomic<T> *o) { return const_cast<T *>(&o->__v); }
template <class T, class U> inline void atomic_store_explicit(volatile atomic<T> *o, U v, memory_order = memory_order_relaxed) {
    T t = T(v); __atomic_store(__mk_ap(o), &t, __ATOMIC_RELAXED);
}
template <class T> inline T atomic_load_explicit(volatile atomic<T> *o, memory_order = memory_order_relaxed) {
    T t; __atomic_load(__mk_ap(o), &t, __ATOMIC_RELAXED); return t;
}
template <class T, class U> inline T atomic_exchange_explicit(volatile atomic<T> *o, U v, memory_order = memory_order_relaxed) {
    T t = T(v), r; __atomic_exchange(__mk_ap(o), &t, &r, __ATOMIC_RELAXED); return r;
}
template <class T, class U>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T> *o, T *expected, U desired, memory_order = memory_order_relaxed,
                                                  memory_order = memory_order_relaxed) {
    T d = T(desired);
    return __atomic_compare_exchange(__mk_ap(o), expected, &d, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
template <class T, class U>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T> *o, T *expected, U desired,
                                                    memory_order a = memory_order_relaxed, memory_order b = memory_order_relaxed) {
    return atomic_compare_exchange_weak_explicit(o, expected, desired, a, b);
}
// read-modify-write through a compare-exchange loop (works for float too)
template <class T, class F> inline T __mk_rmw(volatile atomic<T> *o, F f) {
    T old; __atomic_load(__mk_ap(o), &old, __ATOMIC_RELAXED);
    for (;;) {
        T nv = f(old);
        if (__atomic_compare_exchange(__mk_ap(o), &old, &nv, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return old;
    }
}
#define MK_ATOMIC_RMW(name, expr)                                                                 \
    template <class T, class U> inline T name(volatile atomic<T> *o, U v, memory_order = memory_order_relaxed) { \
        T b = T(v); return __mk_rmw(o, [b](T a) { return T(expr); });                           \
    }
MK_ATOMIC_RMW(atomic_fetch_add_explicit, a + b)
MK_ATOMIC_RMW(atomic_fetch_sub_explicit, a - b)
MK_ATOMIC_RMW(atomic_fetch_and_explicit, a & b)
MK_ATOMIC_RMW(atomic_fetch_or_explicit, a | b)
MK_ATOMIC_RMW(atomic_fetch_xor_explicit, a ^ b)
MK_ATOMIC_RMW(atomic_fetch_max_explicit, a > b ? a : b)
MK_ATOMIC_RMW(atomic_fetch_min_explicit, a < b ? a : b)
#undef MK_ATOMIC_RMW
inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope::thread_scope_device) {}

}  // namespace metal

// ---- used by the front-end's rewrites and the generated launch glue --------------------
// `threadgroup T name[...];` in a kernel body becomes `auto &name = __mk_tg<T[...]>(...)`.
#if defined(__OPENCL_CPP_VERSION__)
template <class T> inline __local T &__mk_tg(mk_site_str name, mk_site_str f, int l) {
    return *(__local T *)(__mk_rt->tg_alloc(sizeof(T), alignof(T), name, f, l));
}
#else
template <class T> inline T &__mk_tg(mk_site_str name, mk_site_str f, int l) {
    return *static_cast<T *>(__mk_rt->tg_alloc(sizeof(T), alignof(T), name, f, l));
}
#endif
template <class T> inline T __mk_bind(void *p) {
    if constexpr (std::is_reference<T>::value) return *static_cast<typename std::remove_reference<T>::type *>(p);
    else return (T)p;
}
// A built-in of scalar or vector type from the runtime's 3-component value.
template <class T> inline T __mk_builtin3(const uint32_t *v) {
    typedef typename std::remove_cv<typename std::remove_reference<T>::type>::type D;
    if constexpr (metal::vtraits<D>::is_vec) {
        D r;
        for (int i = 0; i < metal::vtraits<D>::n; i++) r.v[i] = typename metal::vtraits<D>::elem(v[i]);
        return r;
    } else return D(v[0]);
}
template <class T> inline T __mk_builtin1(uint32_t v) {
    typedef typename std::remove_cv<typename std::remove_reference<T>::type>::type D;
    return D(v);
}
#endif
