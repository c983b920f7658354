"""MSL semantics in the simulator's compatibility layer and front-end: simdgroup_matrix,
SIMD collectives with active lanes, vectors and swizzles, atomics, [[threadgroup(i)]],
templates with host_name, macros, half literals."""
import numpy as np
import pytest

import mpskern
from mpskern import sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

HEAD = "#include <metal_stdlib>\n#include <metal_simdgroup_matrix>\nusing namespace metal;\n"


def run(src, name, *args, grid, tg, check=True, macros=None):
    mpskern.metal_kernel(src, name, macros=macros)(*args, grid=grid, threadgroup=tg,
                                                   backend="sim", check=check)


MMA = HEAD + """
template <typename T>
kernel void mma(device const T* A [[buffer(0)]], device const T* B [[buffer(1)]],
                device const float* C [[buffer(2)]], device float* D [[buffer(3)]],
                device float* Dt [[buffer(4)]], device float* owner [[buffer(5)]],
                uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_matrix<T, 8, 8> a, b, bt;
    simdgroup_matrix<float, 8, 8> c, d;
    simdgroup_load(a, A, 8);
    simdgroup_load(b, B, 8);
    simdgroup_load(bt, B, 8, ulong2(0, 0), true);
    simdgroup_load(c, C, 8);
    simdgroup_multiply_accumulate(d, a, b, c);
    simdgroup_store(d, D, 8);
    simdgroup_multiply(d, a, bt);
    simdgroup_store(d, Dt, 8);
    simdgroup_float8x8 o;
    o.thread_elements()[0] = float(lane);
    o.thread_elements()[1] = float(lane) + 0.5f;
    simdgroup_store(o, owner, 8);
}
template [[host_name("mma_f32")]] kernel void mma<float>(device const float*, device const float*,
    device const float*, device float*, device float*, device float*, uint);
template [[host_name("mma_f16")]] kernel void mma<half>(device const half*, device const half*,
    device const float*, device float*, device float*, device float*, uint);
"""


@pytest.mark.parametrize("dtype,name", [(np.float32, "mma_f32"), (np.float16, "mma_f16")])
def test_simdgroup_matrix(dtype, name):
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (8, 8)).astype(dtype)
    B = rng.uniform(-1, 1, (8, 8)).astype(dtype)
    C = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
    D, Dt, owner = (np.zeros((8, 8), np.float32) for _ in range(3))
    run(MMA, name, A, B, C, D, Dt, owner, grid=(32,), tg=(32,))
    a, b = A.astype(np.float64), B.astype(np.float64)
    np.testing.assert_allclose(D, a @ b + C, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(Dt, a @ b.T, rtol=1e-5, atol=1e-5)
    # thread_elements(): lane l holds row fm, columns fn, fn+1 (MLX's get_coord layout)
    for lane in range(32):
        qid = lane // 4
        fm = (qid & 4) + (lane // 2) % 4
        fn = (qid & 2) * 2 + (lane % 2) * 2
        assert owner[fm, fn] == lane and owner[fm, fn + 1] == lane + 0.5


SIMD = HEAD + """
kernel void simd(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 constant uint& n [[buffer(2)]],
                 uint g [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    if (g >= n) return;                      // exited lanes are inactive in collectives
    float v = x[g];
    out[g * 8 + 0] = simd_sum(v);
    out[g * 8 + 1] = simd_max(v);
    out[g * 8 + 2] = simd_prefix_exclusive_sum(v);
    out[g * 8 + 3] = simd_prefix_inclusive_sum(v);
    out[g * 8 + 4] = simd_shuffle_xor(v, 1u);
    out[g * 8 + 5] = simd_broadcast(v, 3u);
    out[g * 8 + 6] = float(uint64_t(simd_ballot(v > 0.0f)));
    out[g * 8 + 7] = lane % 2 ? simd_sum(1.0f) : -simd_sum(2.0f);   // divergent sites
}
"""


def test_simd_collectives_active_lanes():
    n = 45                                   # second SIMD-group: 13 active lanes of 19 threads
    x = np.random.default_rng(1).integers(-8, 8, 64).astype(np.float32)
    out = np.zeros(64 * 8, np.float32).reshape(64, 8)
    run(SIMD, "simd", x, out, np.uint32(n), grid=(64,), tg=(64,))
    for base in (0, 32):
        lanes = list(range(base, min(base + 32, n)))
        v = x[lanes].astype(np.float64)
        for j, g in enumerate(lanes):
            assert out[g, 0] == v.sum() and out[g, 1] == v.max()
            assert out[g, 2] == v[:j].sum() and out[g, 3] == v[:j + 1].sum()
            assert out[g, 4] == (v[j ^ 1] if (j ^ 1) < len(v) else v[j])
            assert out[g, 5] == v[3]
            assert out[g, 6] == sum(1 << k for k in range(len(v)) if v[k] > 0)
            odd = sum(1 for k in range(len(v)) if k % 2)
            assert out[g, 7] == (odd if j % 2 else -2.0 * (len(v) - odd))
    assert not out[n:].any()


VEC = HEAD + """
struct S { float3 a; packed_float3 b; half2 h; };
kernel void vecs(device float4* out [[buffer(0)]], device const packed_float3* p [[buffer(1)]],
                 device uint* sizes [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    float4 v = float4(1.0f, 2.0f, 3.0f, 4.0f);
    v.xy = v.yx;                      // swizzle assignment
    float3 q = float3(p[i]);
    half2 h = half2(1.5h, -0.25h);
    out[i * 3 + 0] = v;
    out[i * 3 + 1] = float4(q.zyx, float(h.x + h.y));
    out[i * 3 + 2] = float4(clamp(v.zw, 3.5f, 3.75f), select(0.0f, 1.0f, v.x > v.y), dot(v, v));
    if (i == 0) { sizes[0] = sizeof(float3); sizes[1] = sizeof(packed_float3); sizes[2] = sizeof(S);
                  sizes[3] = alignof(float3); sizes[4] = sizeof(half3); }
}
"""


def test_vectors_swizzles_layout_half_literals():
    p = np.arange(12, dtype=np.float32)      # 4 packed_float3: 12-byte stride
    out = np.zeros((4, 3, 4), np.float32)
    sizes = np.zeros(5, np.uint32)
    run(VEC, "vecs", out, p, sizes, grid=(4,), tg=(4,))
    assert list(sizes) == [16, 12, 32, 16, 8]     # S: 16 + 12 + 4, aligned to 16
    for i in range(4):
        np.testing.assert_array_equal(out[i, 0], [2, 1, 3, 4])
        np.testing.assert_array_equal(out[i, 1], [p[3 * i + 2], p[3 * i + 1], p[3 * i], 1.25])
        np.testing.assert_array_equal(out[i, 2], [3.5, 3.75, 1.0, 30.0])



PACKED = HEAD + """
float4 same4(float4 a) { return a; }
float3 from_packed3(const device packed_float3* p, uint i) { return p[i]; }   // copy-init on return
kernel void packed(device const packed_float4* p4 [[buffer(0)]], device const packed_float3* p3 [[buffer(1)]],
                   device const packed_half2* h2 [[buffer(2)]], device packed_float4* q4 [[buffer(3)]],
                   device float4* out [[buffer(4)]], uint i [[thread_position_in_grid]]) {
    float4 a = p4[i];                 // packed -> aligned by copy-initialisation (MSL allows it)
    float4 b; b = p4[i];              // ... by assignment
    packed_float4 t = a;              // aligned -> packed
    float3 c = from_packed3(p3, i);
    half2 h = h2[i];
    out[4 * i + 0] = a + b;
    out[4 * i + 1] = same4(p4[i]) * 2.0f;       // as an argument
    out[4 * i + 2] = float4(c, float(h.x + h.y));
    out[4 * i + 3] = p4[i] + t;                 // arithmetic on packed vectors
    q4[i] = a * 3.0f;
}
"""


def test_packed_vectors_convert_to_aligned_ones_implicitly():
    # `float4 v = packed_value` (copy-initialisation, assignment, return, argument) was refused
    # as "ambiguous" (vec's constructor and packed_vec's conversion operator both applied)
    p4 = np.arange(16, dtype=np.float32)
    p3 = np.arange(12, dtype=np.float32) + 100
    h2 = np.arange(8, dtype=np.float16)
    q4 = np.zeros(16, np.float32)
    out = np.zeros((4, 4, 4), np.float32)
    run(PACKED, "packed", p4, p3, h2, q4, out, grid=(4,), tg=(4,))
    v = p4.reshape(4, 4)
    np.testing.assert_array_equal(out[:, 0], 2 * v)
    np.testing.assert_array_equal(out[:, 1], 2 * v)
    np.testing.assert_array_equal(out[:, 2, :3], p3.reshape(4, 3))
    np.testing.assert_array_equal(out[:, 2, 3], h2.reshape(4, 2).astype(np.float32).sum(axis=1))
    np.testing.assert_array_equal(out[:, 3], 2 * v)
    np.testing.assert_array_equal(q4.reshape(4, 4), 3 * v)


ATOM = HEAD + """
kernel void hist(device const uint* x [[buffer(0)]], device atomic_uint* bins [[buffer(1)]],
                 device atomic_float* total [[buffer(2)]], threadgroup uint* local [[threadgroup(0)]],
                 uint g [[thread_position_in_grid]], uint i [[thread_index_in_threadgroup]]) {
    if (i < 8) local[i] = 0;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit((threadgroup atomic_uint*)&local[x[g] % 8], 1u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (i < 8) atomic_fetch_add_explicit(&bins[i], local[i], memory_order_relaxed);
    atomic_fetch_add_explicit(total, 0.5f, memory_order_relaxed);
}
"""


@pytest.mark.parametrize("check", [False, True])
def test_atomics_and_threadgroup_params(check):
    from mpskern import backends
    x = np.random.default_rng(2).integers(0, 1000, 4096).astype(np.uint32)
    bins = np.zeros(8, np.uint32)
    total = np.zeros(1, np.float32)
    be = backends.get("sim")
    pipe = be.pipeline("hist", source=ATOM, check=check)
    be.run([dict(pipeline=pipe, grid=(16,), threadgroup=(256,), threadgroup_memory=[32],
                 bindings=[be.wrap(x), be.wrap(bins, True), be.wrap(total, True)])])
    np.testing.assert_array_equal(bins, np.bincount(x % 8, minlength=8))
    assert total[0] == 2048.0


MACRO = HEAD + """
#define NAME2(a, b) a##b
#define KNAME(t) NAME2(scale_, t)
kernel void KNAME(TAG)(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    threadgroup float t[TILE];
    t[i % TILE] = float(i) * SCALE;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[i] = t[i % TILE] + float(TILE);
}
"""


def test_macros_name_and_size_kernels():
    y = np.zeros(64, np.float32)
    run(MACRO, "scale_x", y, grid=(64,), tg=(64,), macros={"TAG": "x", "TILE": 64, "SCALE": "2.0f"})
    np.testing.assert_array_equal(y, np.arange(64) * 2.0 + 64)


def test_threadgroup_memory_limit_is_enforced():
    src = HEAD + """
kernel void big(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    threadgroup float t[9000];          // 36000 bytes > 32 KiB
    t[i] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[i] = t[0];
}
"""
    with pytest.raises(ValueError, match=r"kernel 'big' needs at least 36000 bytes.*<metal_kernel big>:6.*32768"):
        run(src, "big", np.zeros(4, np.float32), grid=(4,), tg=(4,), check=False)


def test_missing_attribute_is_a_compile_error_at_the_line():
    src = HEAD + "kernel void f(device float* y [[buffer(0)]], uint i) { y[i] = 1.0f; }\n"
    with pytest.raises(mpskern.KernelCompileError, match=r"<metal_kernel f>:4: kernel 'f': parameter 'i'"):
        run(src, "f", np.zeros(4, np.float32), grid=(4,), tg=(4,), check=False)


def test_max_total_threads_per_threadgroup():
    from mpskern import backends
    src = HEAD + """
template <typename T>
[[max_total_threads_per_threadgroup(2 * 64)]] kernel void fill(device T* y [[buffer(0)]],
                                                            uint i [[thread_position_in_grid]]) {
    y[i] = T(i);
}
template [[host_name("fill_f32")]] kernel void fill<float>(device float*, uint);
[[max_total_threads_per_threadgroup(64)]] kernel void one(device float* y [[buffer(0)]]) { y[0] = 1.0f; }
"""
    be = backends.get("sim")
    assert be.pipeline("fill_f32", source=src).max_threads == 128
    assert be.pipeline("one", source=src).max_threads == 64
    y = np.zeros(256, np.float32)
    run(src, "fill_f32", y, grid=(256,), tg=(128,), check=False)
    np.testing.assert_array_equal(y, np.arange(256))
    with pytest.raises(ValueError, match=r"declares \[\[max_total_threads_per_threadgroup\(128\)\]\]"):
        run(src, "fill_f32", y, grid=(256,), tg=(256,), check=False)


FRAGMENT_WRITES = {
    "reference": "thread float2& t = m.thread_elements(); t = float2(v, v + 0.5f);",
    "reference members": "thread float2& t = m.thread_elements(); t.x = v; t.y = v + 0.5f;",
    "members": "m.thread_elements().x = v; m.thread_elements().y = v + 0.5f;",
    "swizzle": "m.thread_elements().yx = float2(v + 0.5f, v);",
    "compound": "m.thread_elements() = float2(0.0f); m.thread_elements() += float2(v, v + 0.5f);",
}
FRAGMENT_SRC = HEAD + """
kernel void frag(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(7.0f);
    const float v = float(lane);
    WRITE
    simdgroup_store(m, out, 8);
    simdgroup_float8x8 p;
    simdgroup_multiply(p, m, simdgroup_float8x8(1.0f));     // the written fragment as an operand
    simdgroup_store(p, out + 64, 8);
}
"""


@pytest.mark.parametrize("check", [False, True], ids=["run", "checked"])
@pytest.mark.parametrize("write", list(FRAGMENT_WRITES), ids=list(FRAGMENT_WRITES))
def test_writes_through_thread_elements_reach_the_fragment(write, check):
    """thread_elements() is a `thread vec<T, 2> &` to the lane's two fragment elements, as in
    MSL: a reference bound to it (the strict check refused `thread float2 &t = ...` before),
    its members, a swizzle and compound assignment all write the fragment that stores and
    multiplies then read."""
    want = np.zeros((8, 8), np.float32)
    for lane in range(32):
        qid = lane // 4
        fm, fn = (qid & 4) + (lane // 2) % 4, (qid & 2) * 2 + (lane % 2) * 2
        want[fm, fn], want[fm, fn + 1] = lane, lane + 0.5
    out = np.zeros(128, np.float32)
    run(FRAGMENT_SRC.replace("WRITE", FRAGMENT_WRITES[write]), "frag", out, grid=(32,), tg=(32,),
        check=check)
    np.testing.assert_array_equal(out[:64].reshape(8, 8), want)
    np.testing.assert_array_equal(out[64:].reshape(8, 8), want)


UNIONS = HEAD + """
union U { float4 v; float a[4]; };
typedef union { half2 h; uint u; } H;
template <typename T> union Pair { vec<T, 2> v; T e[2]; };
struct S { union { float3 p; float q[4]; }; int k; };
struct Outer { U u; S s; };
union Own { float4 v; float a[4]; Own &operator=(const Own &o) { v = o.v.wzyx; return *this; } };
kernel void unions(device const float4* x [[buffer(0)]], device U* ys [[buffer(1)]],
                   device float4* out [[buffer(2)]], uint i [[thread_position_in_grid]],
                   uint l [[thread_index_in_threadgroup]]) {
    threadgroup U shared[4];
    U a; a.v = x[i];
    U b; b = a;                        // assignment (was "not valid MSL")
    shared[l] = b;                     // into threadgroup memory
    threadgroup_barrier(mem_flags::mem_threadgroup);
    U c; c = shared[3 - l];
    ys[i] = c;                         // into device memory
    H h; h.h = half2(x[i].xy); H g; g = h;
    Pair<float> p; p.v = x[i].zw; Pair<float> r; r = p;
    S s; s.p = x[i].xyz; s.k = 7; S t; t = s;
    Outer o; o.u = a; o.s = s; Outer w; w = o;
    Own m; m.v = x[i]; Own n; n = m;   // its own operator= is kept
    out[4 * i + 0] = c.v;
    out[4 * i + 1] = float4(float2(g.h), r.e[0], r.v.y);
    out[4 * i + 2] = float4(t.p, float(t.k));
    out[4 * i + 3] = w.u.v + float4(w.s.q[0]) + n.v;
}
"""


@pytest.mark.parametrize("check", [False, True])
def test_unions_and_anonymous_unions_holding_vectors_are_assignable(check):
    # MSL's vectors are trivially copyable, so `U b; b = a;` is MSL; the simulator refused it
    # ("not valid MSL (Apple's compiler refuses it too)": the union's operator= was deleted)
    x = np.arange(16, dtype=np.float32).reshape(4, 4) + 1
    ys = np.zeros((4, 4), np.float32)
    out = np.zeros((4, 4, 4), np.float32)
    run(UNIONS, "unions", x, ys, out, grid=(4,), tg=(4,), check=check)
    np.testing.assert_array_equal(out[:, 0], x[::-1])
    np.testing.assert_array_equal(ys, x[::-1])
    np.testing.assert_array_equal(out[:, 1], np.c_[x[:, :2], x[:, 2:]])
    np.testing.assert_array_equal(out[:, 2], np.c_[x[:, :3], np.full(4, 7)])
    np.testing.assert_array_equal(out[:, 3], x + x[:, :1] + x[:, ::-1])


def test_assigning_a_const_union_is_still_refused():
    src = HEAD + """
union U { float4 v; float a[4]; };
kernel void bad(device float4* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    const U a = {float4(1.0f)};
    U b; b.v = y[i];
    a = b;
    y[i] = a.v;
}
"""
    with pytest.raises(mpskern.KernelCompileError, match=r"<metal_kernel bad>:9"):
        run(src, "bad", np.zeros(4, np.float32), grid=(1,), tg=(1,))


CONVERT = HEAD + """
kernel void convert(device const float4* x [[buffer(0)]], device float4* y [[buffer(1)]],
                    device half4* h [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    half2 a = half2(x[i].xy);                  // a swizzle of another element type: ran
    half3 b = half3(x[i].zyx);                 // into a stack overflow (packed_vec's and
    int4 c = int4(x[i].wzyx);                  // vec's constructors called each other)
    float2 d = float2(h[i].zw);
    packed_half4 p = packed_half4(x[i]);
    half4 e = half4(p);
    y[4 * i + 0] = float4(float2(a), float(b.x), float(c.x));
    y[4 * i + 1] = float4(d, float4(p).w, float(e.z));   // packed of another type
    y[4 * i + 2] = float4(float3(b), float(c.w));
    y[4 * i + 3] = float4(float2(half2(d.yx)), float2(c.yz));
}
"""


def test_vector_conversions_from_swizzles_of_another_type():
    x = (np.arange(16, dtype=np.float32) + 1).reshape(4, 4)
    h = (np.arange(16, dtype=np.float16) + 100).reshape(4, 4)
    y = np.zeros((4, 4, 4), np.float32)
    run(CONVERT, "convert", x, y, h, grid=(4,), tg=(4,))
    hf = h.astype(np.float32)
    np.testing.assert_array_equal(y[:, 0], np.c_[x[:, :2], x[:, 2], x[:, 3]])
    np.testing.assert_array_equal(y[:, 1], np.c_[hf[:, 2:], x[:, 3], x[:, 2]])
    np.testing.assert_array_equal(y[:, 2], np.c_[x[:, 2::-1], x[:, 0]])
    np.testing.assert_array_equal(y[:, 3], np.c_[hf[:, 3], hf[:, 2], x[:, 2], x[:, 1]])


def test_a_vector_from_a_struct_is_a_compile_error_not_a_stack_overflow():
    src = HEAD + """
struct S { float a, b; };
kernel void bad(device float2* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    S s = {1.0f, 2.0f};
    y[i] = float2(half2(s));
}
"""
    with pytest.raises(mpskern.KernelCompileError, match=r"<metal_kernel bad>:8"):
        run(src, "bad", np.zeros(2, np.float32), grid=(1,), tg=(1,), check=False)
