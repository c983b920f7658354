"""The simulator's profiling mode on small kernels whose counts are known by hand:
coalesced, strided and vector loads, planted bank conflicts, barriers, integer divisions,
FLOPs, simdgroup_matrix multiplies, sampling of big grids; and on mpskern's own kernels."""
import numpy as np
import pytest

import mpskern
from mpskern import sim
from mpskern.profiling import profiling
from mpskern.sim import profile_build

pytestmark = [pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler"),
              pytest.mark.skipif(profile_build.clang()[0] is None, reason="profiling needs clang")]

SRC = r"""
#include <metal_stdlib>
using namespace metal;

kernel void strided(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    constant uint& stride [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    y[i] = x[i * stride];
}

kernel void vec4(const device float4* x [[buffer(0)]], device float4* y [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    y[i] = x[i] * 2.0f;
}

kernel void vec4_local(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    const float4 v = ((const device float4*)x)[i];      // a copy into a local: one 16-byte load
    ((device float4*)y)[i] = v;
}

kernel void scalar4_unrolled(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                             uint i [[thread_position_in_grid]]) {
    float s = 0.0f;
    for (int j = 0; j < 4; ++j) {                        // unrolled: four scalar loads, one line
        s += x[4 * i + j];
    }
    y[i] = s;
}

kernel void scalar4(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
    y[i] = x[4 * i] + x[4 * i + 1] + x[4 * i + 2] + x[4 * i + 3];
}

kernel void half4_copy(const device half4* x [[buffer(0)]], device half4* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    y[i] = x[i];
}

kernel void banks(device float* y [[buffer(0)]], constant uint& stride [[buffer(1)]],
                  uint l [[thread_position_in_threadgroup]], uint g [[thread_position_in_grid]]) {
    threadgroup float t[32 * 33];
    t[l * stride] = float(l);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[g] = t[l * stride] + t[0];
}

kernel void reconverge(device float* y [[buffer(0)]], constant int& rounds [[buffer(1)]],
                       constant int& steps [[buffer(2)]],
                       uint l [[thread_position_in_threadgroup]], uint g [[thread_position_in_grid]]) {
    threadgroup float t[128];
    for (int i = 0; i < 4; ++i) {
        t[32 * i + int(l)] = float(32 * i + int(l));
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float acc = 0.0f;
    for (int r = 0; r < rounds; ++r) {
        // round 0: lanes 16-31 stop after step 0 (as conv2d's fragment reads stop at the
        // rows past a channel slice); step k reads words 64k + (l + 16k) % 32: 32 banks each
        const int n = r == 0 && l >= 16 ? 1 : steps;
        for (int k = 0; k < n; ++k) {
            acc += t[64 * k + (int(l) + 16 * k) % 32];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    y[g] = acc;
}

kernel void barriers(device float* y [[buffer(0)]], constant int& n [[buffer(1)]],
                     uint l [[thread_position_in_threadgroup]], uint g [[thread_position_in_grid]]) {
    threadgroup float t[64];
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) {
        t[l] = float(k);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        acc += t[(l + 1) % 64];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    y[g] = acc;
}

kernel void divisions(const device int* x [[buffer(0)]], device int* y [[buffer(1)]],
                      constant int& d [[buffer(2)]], constant int& n [[buffer(3)]],
                      uint i [[thread_position_in_grid]]) {
    int acc = x[i] / d;                  // one division by a runtime value
    for (int k = 0; k < n; ++k) {
        acc += x[i] % (d + k);           // n more, in a loop
    }
    y[i] = acc + x[i] / 7 + x[i] / 8;    // by constants: multiply-high and shift
}

kernel void flops(const device float* a [[buffer(0)]], const device half* h [[buffer(1)]],
                  device float* y [[buffer(2)]], device half* yh [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    y[i] = a[i] * a[i] + 1.0f;                   // f32: 1 mul + 1 add
    yh[i] = h[i] * h[i] - h[i];                  // f16: 1 mul + 1 add
    y[i + 64] = fma(a[i], 2.0f, 3.0f) + exp(a[i]);   // f32: fma (2) + add (1); exp: special
}

kernel void mma(const device float* a [[buffer(0)]], device float* c [[buffer(1)]],
                uint sg [[simdgroup_index_in_threadgroup]]) {
    simdgroup_float8x8 m, acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    simdgroup_load(m, a, 8);
    simdgroup_multiply_accumulate(acc, m, m, acc);
    simdgroup_store(acc, c + 64 * sg, 8);
}
"""


@pytest.fixture(scope="module")
def k():
    return {name: mpskern.metal_kernel(SRC, name) for name in
            ("strided", "vec4", "vec4_local", "scalar4_unrolled", "scalar4", "half4_copy", "banks", "reconverge", "barriers", "divisions",
             "flops", "mma")}


def _one(prof):
    assert len(prof.dispatches) == 1
    return prof.dispatches[0]


@pytest.mark.parametrize("stride,coalescing", [(1, 1.0), (2, 0.5), (32, 1 / 32)])
def test_coalescing_of_strided_loads(k, stride, coalescing):
    x = np.arange(1024 * 32, dtype=np.float32)
    y = np.zeros(1024, np.float32)
    d = _one(k["strided"](x, y, np.uint32(stride), grid=1024, threadgroup=256, profile=True))
    np.testing.assert_array_equal(y, x[::stride][:1024])      # outputs are still right
    ld, st = d["device"]["load"], d["device"]["store"]
    assert ld["instr"] == 1024 / 32 and st["instr"] == 1024 / 32
    assert ld["coalescing"] == pytest.approx(coalescing)
    assert st["coalescing"] == 1.0
    assert ld["bytes"] == 4096 and ld["vector"] == 0.0
    assert ld["lines"] == 32 * min(stride, 32)
    assert d["groups"] == 4 and d["groups_profiled"] == 4 and not d["sampled"]


def test_vector_loads_are_vector_and_scalar_runs_are_not(k):
    x = np.arange(4096, dtype=np.float32)
    y = np.zeros(4096, np.float32)
    d = _one(k["vec4"](x, y, grid=1024, threadgroup=128, profile=True))
    np.testing.assert_array_equal(y, 2 * x)
    ld = d["device"]["load"]
    assert ld["width"]["16"] == 1024 and ld["vector"] == 1.0
    assert ld["instr"] == 32 and ld["coalescing"] == 1.0 and ld["lines"] == 32 * 4
    assert d["device"]["store"]["vector"] == 1.0
    assert d["flops"]["f32"]["mul"] == 4096              # a float4 multiply is 4 FLOPs per lane
    # four scalar loads of neighbouring elements are four scalar instructions, each lane 16 B
    # apart: 4 lines for 128 requested bytes
    y1 = np.zeros(1024, np.float32)
    d = _one(k["scalar4"](x, y1, grid=1024, threadgroup=128, profile=True))
    ld = d["device"]["load"]
    assert ld["vector"] == 0.0 and ld["width"]["4"] == 4096 and ld["instr"] == 4 * 32
    assert ld["coalescing"] == pytest.approx(0.25)
    xh = np.arange(4096, dtype=np.float16)
    yh = np.zeros(4096, np.float16)
    d = _one(k["half4_copy"](xh, yh, grid=1024, threadgroup=128, profile=True))
    assert d["device"]["load"]["width"]["8"] == 1024 and d["device"]["load"]["vector"] == 1.0


def test_vector_copied_into_a_local_is_one_vector_access(k):
    # `float4 v = p[i]` is split by the host ABI into two <2 x float> loads on one source
    # line: still one 16-byte access per lane; unrolled scalar loads stay scalar
    x = np.arange(4096, dtype=np.float32)
    y = np.zeros(4096, np.float32)
    d = _one(k["vec4_local"](x, y, grid=1024, threadgroup=128, profile=True))
    np.testing.assert_array_equal(y, x)
    for kind in ("load", "store"):
        m = d["device"][kind]
        assert m["width"]["16"] == 1024 and m["vector"] == 1.0, (kind, m["width"])
        assert m["instr"] == 32 and m["coalescing"] == 1.0
    y1 = np.zeros(1024, np.float32)
    d = _one(k["scalar4_unrolled"](x, y1, grid=1024, threadgroup=128, profile=True))
    np.testing.assert_array_equal(y1, x.reshape(-1, 4).sum(axis=1))
    ld = d["device"]["load"]
    assert ld["vector"] == 0.0 and ld["width"]["4"] == 4096



# A vector copied by initialisation (`float4 v = *p`, a trivial copy lowered to element loads
# at the kernel's line) once counted as scalar loads while the same copy by assignment
# (`v = *p`) counted as one vector load; also packed vectors (either form) and structs of
# vectors. Every form of one copy must count alike: one access of the vector's size.
COPY_SRC = r"""
#include <metal_stdlib>
using namespace metal;
struct Pair { float4 a; float4 b; };
#define KERNEL(name, T) kernel void name(const device T* x [[buffer(0)]], device float* y [[buffer(1)]], \
    uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]])
#define SUM4(v) float(v.x) + float(v.y) + float(v.z) + float(v.w)
KERNEL(f4_init, float) { const device float4* p = (const device float4*)(x + 4 * i); float4 v = *p; y[i] = SUM4(v); }
KERNEL(f4_assign, float) { const device float4* p = (const device float4*)(x + 4 * i); float4 v; v = *p; y[i] = SUM4(v); }
KERNEL(f4_auto, float) { auto v = *(const device float4*)(x + 4 * i); y[i] = SUM4(v); }
KERNEL(f4_compound, float) { float4 v = float4(1.0f); v += *(const device float4*)(x + 4 * i); y[i] = SUM4(v); }
KERNEL(h4_init, half) { const device half4* p = (const device half4*)(x + 4 * i); half4 v = *p; y[i] = SUM4(v); }
KERNEL(us4_init, ushort) { ushort4 v = *(const device ushort4*)(x + 4 * i); y[i] = SUM4(v); }
KERNEL(packed_init, float) { packed_float4 v = *(const device packed_float4*)(x + 4 * i); y[i] = SUM4(v); }
KERNEL(packed_assign, float) { packed_float4 v; v = *(const device packed_float4*)(x + 4 * i); y[i] = SUM4(v); }
KERNEL(pair_init, float) { Pair s = *(const device Pair*)(x + 8 * (i / 2)); y[i] = SUM4(s.a) + SUM4(s.b); }
KERNEL(tg_init, float) {
    threadgroup float t[4 * 128];
    for (int j = 0; j < 4; ++j) t[4 * l + j] = x[4 * i + j];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float4 v = *(threadgroup const float4*)(t + 4 * (127 - l));
    y[i] = SUM4(v);
}
KERNEL(packed_copy, float) {        // a load and a store per element, interleaved
    if (i < 256) ((device packed_float4*)y)[i] = ((const device packed_float4*)x)[i];
}
"""


@pytest.mark.parametrize("name,dtype,width", [
    ("f4_init", np.float32, 16), ("f4_assign", np.float32, 16), ("f4_auto", np.float32, 16),
    ("f4_compound", np.float32, 16), ("h4_init", np.float16, 8), ("us4_init", np.uint16, 8),
    ("packed_init", np.float32, 16), ("packed_assign", np.float32, 16), ("pair_init", np.float32, 16),
    ("tg_init", np.float32, 16)])
def test_vector_copy_counts_alike_however_it_is_written(name, dtype, width):
    n = 1024
    x = (np.arange(4 * n) % 64).astype(dtype)
    y = np.zeros(n, np.float32)
    d = _one(mpskern.metal_kernel(COPY_SRC, name)(x, y, grid=n, threadgroup=128, profile=True))
    xf = x.astype(np.float32).reshape(-1, 4)
    if name == "pair_init":
        want = np.repeat(xf.reshape(-1, 2, 4).sum(axis=(1, 2))[:n // 2], 2)
    elif name == "tg_init":
        want = xf.sum(axis=1).reshape(-1, 128)[:, ::-1].ravel()
    else:
        want = xf.sum(axis=1) + (4 if name == "f4_compound" else 0)
    np.testing.assert_array_equal(y, want)
    mem = d["threadgroup"]["load"] if name == "tg_init" else d["device"]["load"]
    lanes = 2 * n if name == "pair_init" else n          # a Pair is two float4 accesses
    assert mem["width"][str(width)] == lanes and mem["vector"] == 1.0, (name, mem["width"])


def test_interleaved_vector_copy_counts_one_load_and_one_store():
    x = np.arange(1024, dtype=np.float32)
    y = np.zeros(1024, np.float32)
    d = _one(mpskern.metal_kernel(COPY_SRC, "packed_copy")(x, y, grid=1024, threadgroup=128,
                                                           profile=True))
    np.testing.assert_array_equal(y, x)
    for kind in ("load", "store"):
        m = d["device"][kind]
        assert m["width"]["16"] == 256 and m["vector"] == 1.0, (kind, m["width"])


@pytest.mark.parametrize("stride,conflict", [(1, 1.0), (3, 1.0), (4, 4.0), (8, 8.0), (32, 32.0),
                                             (33, 1.0)])
def test_bank_conflict_degree(k, stride, conflict):
    y = np.zeros(64, np.float32)
    d = _one(k["banks"](y, np.uint32(stride), grid=64, threadgroup=32, profile=True))
    np.testing.assert_array_equal(y, np.tile(np.arange(32, dtype=np.float32), 2))
    tg = d["threadgroup"]
    assert tg["store"]["bank_factor"] == conflict
    # the loads: t[l*stride] (conflict) and t[0] (a broadcast: one word, no conflict)
    assert tg["load"]["bank_cycles"] == 2 * (conflict + 1)
    assert tg["load"]["instr"] == 2 * 2
    assert tg["bank_model"] == "32 banks x 4 B"


def test_bank_model_is_a_parameter(k):
    y = np.zeros(32, np.float32)
    with profiling(bank_bytes=8) as prof:
        k["banks"](y, np.uint32(16), grid=32, threadgroup=32)
    # lanes 64 bytes apart: 8-byte words 8 apart, on 4 of 32 banks (4-byte banks: 2 banks)
    assert _one(prof)["threadgroup"]["store"]["bank_factor"] == 8.0
    assert _one(prof)["threadgroup"]["bank_model"] == "32 banks x 8 B"


def test_lanes_pair_up_again_after_a_barrier(k):
    """A SIMD-group instruction pairs the lanes' k-th executions of a site since the last
    threadgroup barrier (where every lane reconverges): lanes that skipped an execution
    before it (a divergent branch) no longer pair their later executions with other
    lanes' different iterations. Here every read instruction touches 16 or 32 distinct
    banks (factor 1.0); pairing by executions since the dispatch's start (the old count)
    matched round 1's step 0 of lanes 0-15 with step 1 of lanes 16-31 (the same 16 banks:
    2.0), 1.2x over the dispatch (this is what conv2d's 5x5 and dilated fragment reads
    showed as 1.01-1.02)."""
    y = np.zeros(32, np.float32)
    d = _one(k["reconverge"](y, np.int32(2), np.int32(2), grid=32, threadgroup=32,
                             profile=True))
    assert y[0] == 2 * (0 + 64 + 16) and y[20] == 20 + 20 + 64 + 4, y
    load = d["threadgroup"]["load"]
    assert load["bank_factor"] == 1.0, load
    assert load["instr"] == 4, load          # round 0: 2 (step 1 by 16 lanes), round 1: 2


def test_barriers_counted_per_threadgroup(k):
    y = np.zeros(256, np.float32)
    d = _one(k["barriers"](y, np.int32(5), grid=256, threadgroup=64, profile=True))
    assert d["barriers"] == 4 * 10 and d["barriers_per_group"] == 10
    assert np.all(y == sum(range(5)))


def test_integer_divisions_by_runtime_values_and_in_loops(k):
    x = np.arange(1, 129, dtype=np.int32)
    y = np.zeros(128, np.int32)
    d = _one(k["divisions"](x, y, np.int32(3), np.int32(4), grid=128, threadgroup=64, profile=True))
    want = x // 3 + sum(x % (3 + j) for j in range(4)) + x // 7 + x // 8
    np.testing.assert_array_equal(y, want)
    div = d["int_div"]
    assert div["total"] == 128 * 5 and div["per_thread"] == 5
    assert div["in_loops"] == 128 * 4
    assert div["by_constant"] == 128                      # / 7; / 8 is a shift, not counted
    lines = list(div["by_line"])
    assert len(lines) == 2 and all(ln.startswith("<metal_kernel divisions>:") for ln in lines)


def test_flops_by_type_and_special_functions(k):
    a = np.linspace(0, 1, 128, dtype=np.float32)
    h = np.linspace(0, 1, 64, dtype=np.float16)
    y = np.zeros(128, np.float32)
    yh = np.zeros(64, np.float16)
    d = _one(k["flops"](a, h, y, yh, grid=64, threadgroup=64, profile=True))
    fl = d["flops"]
    assert fl["f32"]["mul"] == 64 and fl["f32"]["fma"] == 64 and fl["f32"]["add"] == 2 * 64
    assert fl["f16"]["mul"] == 64 and fl["f16"]["add"] == 64
    assert fl["f32_total"] == 64 * (1 + 2 + 2) and fl["f16_total"] == 2 * 64
    assert d["special"] == {"exp": 64}


@pytest.mark.parametrize("sgs", [1, 4])
def test_simdgroup_matrix_multiplies(k, sgs):
    a = np.arange(64, dtype=np.float32)
    c = np.zeros(64 * sgs, np.float32)
    d = _one(k["mma"](a, c, grid=32 * sgs, threadgroup=32 * sgs, profile=True))
    m = a.reshape(8, 8)
    np.testing.assert_allclose(c[:64].reshape(8, 8), m @ m)
    mm = d["simdgroup_matrix"]
    assert mm["by_type"] == {"float,float,float,float": sgs} and mm["macs"] == 512 * sgs
    assert d["flops"]["total"] == 0           # the emulation's arithmetic is not the kernel's


def test_sampled_counts_scale_to_the_whole_grid(k):
    n = 100_003                                 # 1563 threadgroups of 64, the last partial
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    with profiling(max_groups=0) as full:
        k["strided"](x, y, np.uint32(1), grid=n, threadgroup=64)
    with profiling(max_groups=9) as part:
        k["strided"](x, y, np.uint32(1), grid=n, threadgroup=64)
    f, p = _one(full), _one(part)
    assert not f["sampled"] and p["sampled"] and p["groups_profiled"] == 9 and p["groups"] == 1563
    for key in ("instr", "bytes", "lines"):
        assert p["device"]["load"][key] == pytest.approx(f["device"]["load"][key], rel=1e-12)
    assert p["threads"] == f["threads"] == n


def test_sampled_only_runs_only_the_sample(k):
    n = 64 * 1000
    x = np.ones(n, np.float32)
    y = np.zeros(n, np.float32)
    with profiling(max_groups=8, sampled_only=True) as prof:
        k["strided"](x, y, np.uint32(1), grid=n, threadgroup=64)
    d = _one(prof)
    assert d["sampled_only"] and d["groups_profiled"] == 8
    assert 0 < y.sum() == 8 * 64 and y[:64].all() and y[-64:].all()   # first, last, interior
    assert d["threads"] == pytest.approx(n)    # counts still stand for the whole grid


def test_two_dimensional_sample_weights_cover_the_grid():
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           "kernel void k2(device float* y [[buffer(0)]], uint2 g [[thread_position_in_grid]], "
           "uint2 n [[threads_per_grid]]) { y[g.y * n.x + g.x] = 1.0f; }\n")
    y = np.zeros((100, 130), np.float32)
    with profiling(max_groups=20) as prof:
        mpskern.metal_kernel(src, "k2")(y, grid=(130, 100), threadgroup=(8, 8))
    d = _one(prof)
    assert d["sampled"] and d["groups_profiled"] <= 20 and d["groups"] == 17 * 13
    assert d["threads"] == pytest.approx(130 * 100)
    assert d["device"]["store"]["bytes"] == pytest.approx(4 * 130 * 100)


def test_profile_needs_the_simulator_and_excludes_check(k):
    x = np.zeros(32, np.float32)
    with pytest.raises(ValueError, match="cannot run an MSL kernel"):
        k["strided"](x, x, np.uint32(1), grid=32, threadgroup=32, backend="cpu", profile=True)
    with pytest.raises(ValueError, match="one after the other"):
        k["strided"](x, x, np.uint32(1), grid=32, threadgroup=32, profile=True, check=True)
    with pytest.raises(TypeError, match="profile must be"):
        k["strided"](x, x, np.uint32(1), grid=32, threadgroup=32, profile="yes")
    with pytest.raises(ValueError, match="max_groups"):
        with profiling(max_groups=-1):
            pass


def test_unprofiled_library_refused_while_profiling(k):
    from mpskern import backends
    be = backends.get("sim")
    x = np.zeros(32, np.float32)
    pipe = be.pipeline("strided", source=k["strided"].source, profile=False)
    with profiling():
        with pytest.raises(ValueError, match="built with profile=True"):
            be.run([dict(pipeline=pipe, grid=(32, 1, 1), threadgroup=(32, 1, 1),
                         grid_units="threads", bindings=[be.wrap(x), be.wrap(x, True),
                                                         np.uint32(1).tobytes()])])
    # and a profiling library runs normally (uncounted) outside profiling()
    x[:] = 3
    y = np.zeros(32, np.float32)
    assert k["strided"](x, y, np.uint32(1), grid=32, threadgroup=32) is None
    k["strided"](x, y, np.uint32(1), grid=32, threadgroup=32, profile=True)
    y[:] = 0
    be.run([dict(pipeline=be.pipeline("strided", source=k["strided"].source, profile=True),
                 grid=(32, 1, 1), threadgroup=(32, 1, 1), grid_units="threads",
                 bindings=[be.wrap(x), be.wrap(y, True), np.uint32(1).tobytes()])])
    assert np.all(y == 3)


def test_invalid_bank_and_line_models_are_refused():
    from mpskern import backends
    dev = backends.get("sim").device
    with pytest.raises(ValueError, match="bank model"):
        dev.sim_profile_begin(banks=0)
    with pytest.raises(ValueError, match="cache line"):
        dev.sim_profile_begin(line_bytes=100)


# ---------------------------------------------------------------- mpskern's kernels

def test_gemm_counts(monkeypatch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((96, 80)).astype(np.float32)
    b = rng.standard_normal((80, 72)).astype(np.float32)
    with profiling(max_groups=0) as prof:
        c = mpskern.matmul(a, b, backend="sim")
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    d = _one(prof)
    mm = d["simdgroup_matrix"]
    if d["kernel"].startswith("gemm_simd"):
        cfg = mpskern.backends.get("sim").last_config
        tiles_m, tiles_n = -(-96 // cfg["BM"]), -(-72 // cfg["BN"])
        # every tile runs ceil(K / BK) slices of BM x BN x BK multiply-accumulates
        want = tiles_m * tiles_n * cfg["BM"] * cfg["BN"] * -(-80 // cfg["BK"]) * cfg["BK"]
        assert mm["macs"] == want
    dev = d["device"]
    assert dev["footprint_exact"] and dev["footprint"] >= a.nbytes + b.nbytes + c.nbytes
    assert dev["bytes_written"] == c.nbytes


def test_conv2d_and_softmax_counts():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    with profiling(max_groups=0) as prof:
        y = mpskern.conv2d(x, w, padding=1, backend="sim")
    d = _one(prof)
    assert d["kernel"].startswith("conv2d_")
    if d["kernel"].startswith("conv2d_simd"):
        assert d["simdgroup_matrix"]["macs"] >= 16 * 100 * 8 * 9
    assert d["device"]["bytes_written"] == y.nbytes
    s = rng.standard_normal((8, 300)).astype(np.float32)
    with profiling(max_groups=0) as prof:
        mpskern.softmax(s, backend="sim")
    d = _one(prof)
    assert d["special"].get("exp", 0) >= s.size
    assert d["device"]["load"]["bytes"] >= s.nbytes and d["barriers_per_group"] >= 2
