"""The strict MSL check (mpskern/sim/strict.py): every rule refuses a planted violation at
its .metal line, valid MSL idioms keep compiling and running, every shipped kernel passes
with every shipped configuration (through `mpskern check-msl`), and without clang the
front-end's rules still run and that is said once.

Each planted source marks the offending line with `// <-`; the check must report exactly
that line (and no other) with a message containing the expected words."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from simtools import shipped_configs
from typer.testing import CliRunner

import mpskern
from mpskern import sim
from mpskern._errors import KernelCompileError
from mpskern.cli.main import app
from mpskern.paths import METAL_DIR
from mpskern.sim import strict

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")
needs_clang = pytest.mark.skipif(not strict.typecheck_available()[0],
                                 reason="no clang for the address-space stage")

HEAD = """#include <metal_stdlib>
using namespace metal;
struct S { float a; int b; float4 v; };
"""


def kern(body, params="", pre=""):
    """A kernel `k` around `body` (and helpers `pre` before it)."""
    return (HEAD + pre + "kernel void k(uint tid [[thread_position_in_grid]], device float* x [[buffer(0)]],\n"
            "              constant S& s [[buffer(1)]]" + params + "\n) {\n" + body + "\n}\n")


def marked_line(src):
    lines = [i + 1 for i, ln in enumerate(src.split("\n")) if "// <-" in ln]
    assert len(lines) == 1, "a planted source marks one line"
    return lines[0]


# name: (source, words the message must contain); no clang needed
RULES = {
    "double": (kern("    double d = x[0];  // <-\n    x[1] = float(d);"), "no double"),
    "long double": (kern("    long double d = 1;  // <-"), "no double"),
    "virtual": (HEAD + "struct V { virtual float f(); };  // <-\n", "virtual"),
    "new": (kern("    float* p = new float[4];  // <-"), "new"),
    "placement new": (kern("    float b[1];\n    new (b) float(1.0f);  // <-"), "new"),
    "delete": (kern("    thread float* p = 0;\n    delete p;  // <-"), "delete"),
    "try": (kern("    try { x[0] = 1; } catch (...) { x[0] = 2; }  // <-"), "exceptions (try)"),
    "throw": (kern("    if (tid > 4) throw 1;  // <-"), "exceptions (throw)"),
    "goto": (kern("    goto done;  // <-\ndone:\n    x[0] = 1;"), "goto"),
    "thread_local": (kern("    thread_local int z = 0;  // <-"), "thread_local"),
    "asm": (kern('    __asm__("nop");  // <-'), "assembly"),
    "asm keyword": (kern('    asm("nop");  // <-'), "assembly"),
    "extern C": (HEAD + 'extern "C" float host_fn(float);  // <-\n', 'extern "C"'),
    "extern C block": (HEAD + 'extern "C" {  // <-\ninline float g(float v) { return v; }\n}\n',
                       'extern "C"'),
    "function pointer param": (HEAD + "inline float apply(float (*f)(float), float v) { return f(v); }  // <-\n",
                               "function pointers"),
    "function pointer type": (HEAD + "typedef float (*fn_t)(float);  // <-\n", "function pointers"),
    "function pointer call": (kern("    float v = (*fp)(1.0f);  // <-", pre="inline float sq(float v) { return v * v; }\n"),
                              "function pointers"),
    "direct recursion": (HEAD + "inline float walk(float v) {\n    return v > 1 ? walk(v / 2) : v;  // <-\n}\n",
                         "recursion (walk -> walk)"),
    "mutual recursion": (HEAD + "inline float odd(int n);\ninline float even(int n) { return n == 0 ? 1 : odd(n - 1); }  // <-\n"
                         "inline float odd(int n) { return n == 0 ? 0 : even(n - 1); }\n", "recursion (even -> odd -> even)"),
    "recursion through a template": (HEAD + "template <typename T> T tw(T v) {\n    return v > T(1) ? tw(v / 2) : v;  // <-\n}\n",
                                     "recursion (tw -> tw)"),
    "static local": (kern("    static float acc = 0;  // <-\n    x[0] = acc;"), "static local"),
    "static local in helper": (HEAD + "inline float h() {\n    static int calls;  // <-\n    return calls;\n}\n", "static local"),
    "mutable program-scope": (HEAD + "float counter = 0.0f;  // <-\n", "program-scope variable 'counter'"),
    "const program-scope": (HEAD + "const float scale = 2.0f;  // <-\n", "program-scope variable 'scale'"),
    "static program-scope": (HEAD + "static int hits[4];  // <-\n", "program-scope variable 'hits'"),
    "struct and variable": (HEAD + "struct T { int a; } t_state;  // <-\n", "program-scope variable 't_state'"),
    "mutable static member": (HEAD + "struct C {\n    static int n;  // <-\n};\n", "program-scope variable 'n'"),
    "threadgroup at program scope": (HEAD + "threadgroup float shared_x[32];  // <-\n", "at program scope"),
    "threadgroup in a helper": (HEAD + "inline float h(uint i) {\n    threadgroup float t[32];  // <-\n    return t[i];\n}\n",
                                "in 'h', which is not a kernel"),
    "simdgroup_matrix<int>": (kern("    simdgroup_matrix<int, 8, 8> m;  // <-"), "float or half"),
    "simdgroup_matrix<uint>": (kern("    simdgroup_matrix<uint, 8, 8> m;  // <-"), "float or half"),
    "kernel param without address space": (
        HEAD + "kernel void k(float* x [[buffer(0)]],  // <-\n              uint tid [[thread_position_in_grid]]) { x[tid] = 1; }\n",
        "parameter 'x' is a pointer or reference without an address space"),
    "kernel reference without address space": (
        HEAD + "kernel void k(device float* x [[buffer(0)]],\n              const S& s [[buffer(1)]]) { x[0] = s.a; }  // <-\n",
        "parameter 's'"),
    "kernel param in thread space": (
        HEAD + "kernel void k(thread float* x [[buffer(0)]]) { x[0] = 1; }  // <-\n",
        "thread address space"),
    "buffer index 31": (kern("    x[0] = y[0];", params=",\n              device float* y [[buffer(31)]]  // <-"),
                        "[[buffer(31)]]: Metal's buffer indices are 0..30"),
    "include <stdio.h>": ("#include <metal_stdlib>\n#include <stdio.h>  // <-\n" + HEAD, "#include <stdio.h>"),
    'include "mine.h"': ('#include "mine.h"  // <-\n' + HEAD, '#include "mine.h"'),
    "include a path": ('#include "/etc/hostname"  // <-\n' + HEAD, "#include"),
    "import": ("#import <Foundation/Foundation.h>  // <-\n" + HEAD, "#import"),
    "computed include": ("#define H <stdlib.h>\n#include H  // <-\n" + HEAD, "#include H"),
}

# name: (source, words); the address spaces, type-checked by clang
ADDRESS_SPACES = {
    "device pointer to a thread pointer parameter": (
        kern("    twice(x);  // <-", pre="inline void twice(thread float* p) { p[0] *= 2; }\n"),
        "address space 'device' as a pointer to address space 'thread'"),
    "device pointer to an unqualified (thread) parameter": (
        kern("    twice(x);  // <-", pre="inline void twice(float* p) { p[0] *= 2; }\n"),
        "'device' as a pointer to address space 'thread'"),
    "device reference to a thread reference": (
        kern("    bump(x[0]);  // <-", pre="inline void bump(thread float& r) { r += 1; }\n"),
        "bump"),
    "threadgroup pointer from device memory": (
        kern("    threadgroup float* q = x;  // <-\n    q[0] = 1;"),
        "'threadgroup float *' with an lvalue of type 'device float *'"),
    "unqualified (thread) local pointer from device memory": (
        kern("    float* p = x;  // <-\n    p[0] = 1;"), "'thread float *' with an lvalue of type 'device float *'"),
    "device pointer from threadgroup memory": (
        kern("    threadgroup float t[32];\n    device float* d = t;  // <-\n    d[0] = 1;"), "device float *"),
    "threadgroup memory to a device parameter": (
        kern("    threadgroup float t[32];\n    t[tid] = 0;\n    put(t);  // <-",
             pre="inline void put(device float* p) { p[0] = 1; }\n"), "put"),
    "write to constant (reference)": (kern("    s.a = 1.0f;  // <-"), ""),
    "write to constant (pointer)": (kern("    c[0] = 1.0f;  // <-", params=", constant float* c [[buffer(2)]]"), ""),
    "constant pointer to a device parameter": (
        kern("    x[0] = rd(c);  // <-", params=", constant float* c [[buffer(2)]]",
             pre="inline float rd(const device float* p) { return p[0]; }\n"), "constant"),
    "device pointer to a constant parameter": (
        kern("    x[0] = rc(x);  // <-", pre="inline float rc(constant float* p) { return p[0]; }\n"), "constant"),
    "constant pointer to a device pointer": (
        kern("    const device float* d = c;  // <-\n    x[0] = d[0];", params=", constant float* c [[buffer(2)]]"),
        "constant"),
    "simdgroup_load from another element type": (
        kern("    simdgroup_matrix<float, 8, 8> m;\n    threadgroup half t[64];\n    t[tid % 64] = 0;\n"
             "    simdgroup_load(m, t, 8);  // <-"), "element type must be the matrix's"),
    "simdgroup_store to another element type": (
        kern("    simdgroup_matrix<half, 8, 8> m = make_filled_simdgroup_matrix<half, 8, 8>(half(1));\n"
             "    simdgroup_store(m, x, 8);  // <-"), "element type must be the matrix's"),
}

# Valid MSL that must pass every stage, compile and run: struct copies between address
# spaces, templates with address-space-qualified parameters, thread references, constant
# pointers, vector members of constant structs, program-scope constant data.
VALID = HEAD + """
constant float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};
constexpr constant int kN = 4;
constexpr int kM = 2;
struct P { float lo, hi; };
template <typename T> inline T first(const device T* p) { return p[0]; }
template <typename T> inline T firstc(constant T* p) { return p[0]; }
template <typename T> inline T twice(thread const T& v) { return v + v; }
template <typename T> inline void put(threadgroup T* p, uint i, T v) { p[i] = v; }
inline void bump(thread float& r) { r += 1.0f; }
inline void bump_all(float* p, int n) { for (int i = 0; i < n; ++i) p[i] += 1.0f; }
inline float tg0(const threadgroup float* p) { return p[0]; }
inline float field(thread const S& v) { return v.a; }
inline float sum2(float2 v) { return v.x + v.y; }
kernel void valid(device float* out [[buffer(0)]], constant S& s [[buffer(1)]],
                  device S* ds [[buffer(2)]], constant float* cp [[buffer(3)]],
                  device const P* dp [[buffer(4)]],
                  uint tid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float t[32];
    threadgroup S ts[2];
    S a = s;                      // constant -> thread
    S b = ds[0];                  // device -> thread
    P q = dp[0];
    if (tid == 0) {
        ds[1] = a;                // thread -> device
        ts[0] = s;                // constant -> threadgroup
        ts[1] = ds[0];            // device -> threadgroup
    }
    put(t, lane, float(lane));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    S c = ts[0];                  // threadgroup -> thread
    if (tid == 0) {
        ds[2] = ts[1];            // threadgroup -> device
    }
    float v = twice(a.a);
    bump(v);
    float loc[3] = {1.0f, 2.0f, 3.0f};
    float* lp = loc;              // a thread pointer to thread memory
    bump_all(lp, 3);
    thread float& r = loc[0];
    r += 1.0f;
    constant float* cq = cp + 1;
    float4 w = s.v;
    float2 xy = s.v.xy;
    float acc = v + first(out) * 0.0f + firstc(cp) + cq[0] + w.z + sum2(xy) + sum2(s.v.zw)
              + max(s.a, 0.0f) + dot(s.v, b.v) + table[kN - 1] + float(kM) + field(c) + loc[0] + loc[2]
              + tg0(t) + q.hi + simd_sum(1.0f);
    if (tid == 0) {
        out[0] = acc;
    }
}
"""


def _assert_refused_at_line(src, words, found):
    want = marked_line(src)
    assert found, "nothing refused"
    assert {f.line for f in found} == {want}, [str(f) for f in found]
    assert any(words in f.message for f in found), [str(f) for f in found]
    assert all(f.file == "planted.metal" for f in found), [str(f) for f in found]


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_refuses_planted_violation_at_its_line(name):
    src, words = RULES[name]
    _assert_refused_at_line(src, words, strict.check_source(src, origin="planted.metal"))


@needs_clang
@pytest.mark.parametrize("name", sorted(ADDRESS_SPACES))
def test_address_spaces_refuse_planted_violation_at_its_line(name):
    src, words = ADDRESS_SPACES[name]
    _assert_refused_at_line(src, words, strict.check_source(src, origin="planted.metal"))


def test_valid_idioms_pass_compile_and_run():
    assert strict.check_source(VALID, origin="valid.metal") == []
    sdt = np.dtype([("a", np.float32), ("b", np.int32), ("pad", np.float32, 2), ("v", np.float32, 4)])
    s = np.zeros(1, sdt)
    s["a"], s["b"], s["v"] = 1.5, 7, (1, 2, 3, 4)
    ds = np.zeros(3, sdt)
    ds[0]["a"], ds[0]["v"] = 2.0, (1, 1, 1, 1)
    out = np.zeros(1, np.float32)
    cp = np.array([10, 20, 30], np.float32)
    dp = np.array([(0.25, 0.5)], dtype=[("lo", np.float32), ("hi", np.float32)])
    mpskern.metal_kernel(VALID, "valid")(out, s[0], ds, cp, dp, grid=(32,), threadgroup=(32,),
                                         backend="sim")
    # v = 2*1.5 + 1; + cp[0] + cq[0] + w.z + (1+2) + (3+4) + max + dot(s.v, b.v=(1,1,1,1))
    want = (4.0 + 10 + 20 + 3 + 3 + 7 + 1.5 + 10 + 4 + 2 + 1.5 + (1 + 1 + 1) + (3 + 1) + 0 + 0.5 + 32)
    assert out[0] == pytest.approx(want)
    assert ds[1]["a"] == 1.5 and ds[1]["b"] == 7 and ds[2]["a"] == 2.0   # the struct copies


def test_valid_idioms_pass_every_stage_separately():
    """The front-end's rules and the clang stage each accept VALID (and metal/'s kernels,
    below): neither stage refuses valid MSL."""
    from mpskern.sim import compiler, msl_rules, parse
    pre = compiler.preprocess(strict.guard_includes('#line 1 "valid.metal"\n' + VALID), {})
    assert msl_rules.check_rules(parse.parse(pre)) == []
    if strict.typecheck_available()[0]:
        assert strict.typecheck(pre) == []


@pytest.mark.parametrize("fname,macros", shipped_configs())
def test_every_shipped_kernel_passes_check_msl(fname, macros):
    args = ["check-msl", os.path.join(METAL_DIR, fname)]
    for k, v in macros:
        args += ["-D", f"{k}={v}"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "1 of 1 file passed" in r.output


def test_check_msl_reports_like_a_compiler(tmp_path):
    bad = tmp_path / "bad.metal"
    src, _ = RULES["double"]
    bad.write_text(src)
    good = tmp_path / "good.metal"
    good.write_text(VALID)
    r = CliRunner().invoke(app, ["check-msl", str(good), str(bad)])
    assert r.exit_code == 1, r.output
    assert f"{bad}:{marked_line(src)}: MSL has no double" in r.output
    assert "1 of 2 files passed" in r.output
    assert str(good) + ":" not in r.output


def test_check_msl_project_headers_beside_the_file(tmp_path):
    (tmp_path / "helpers.h").write_text("inline float h(float v) {\n    double d = v;\n    return d;\n}\n")
    (tmp_path / "main.metal").write_text('#include <metal_stdlib>\n#include "helpers.h"\n'
                                         'using namespace metal;\nkernel void k(device float* x [[buffer(0)]]) '
                                         '{ x[0] = h(x[0]); }\n')
    r = CliRunner().invoke(app, ["check-msl", str(tmp_path / "main.metal")])
    assert r.exit_code == 1
    assert f"{tmp_path / 'helpers.h'}:2: MSL has no double" in r.output


def test_check_msl_bad_input(tmp_path):
    r = CliRunner().invoke(app, ["check-msl", str(tmp_path / "missing.metal")])
    assert r.exit_code == 1 and "cannot read" in r.output
    r = CliRunner().invoke(app, ["check-msl", "-D", "1BAD=2", str(tmp_path / "x.metal")])
    assert r.exit_code == 2 and "NAME=VALUE" in r.output
    gemm = os.path.join(METAL_DIR, "gemm.metal")      # without its tile macros: the #error line
    r = CliRunner().invoke(app, ["check-msl", gemm])
    assert r.exit_code == 1 and "mk_gemm_tile.h:" in r.output and "must be defined" in r.output


def test_users_kernels_get_the_same_checks():
    """metal_kernel sources on the simulator: refused before the host compiler sees them
    (a foreign include is never opened, inline asm never reaches the host)."""
    src, _ = RULES["include <stdio.h>"]
    with pytest.raises(KernelCompileError, match=r"<metal_kernel k>:2: #include <stdio.h>"):
        mpskern.metal_kernel(src, "k")(np.zeros(1, np.float32), grid=(1,), threadgroup=(1,),
                                       backend="sim")
    src, _ = RULES["asm"]
    with pytest.raises(KernelCompileError, match="inline assembly"):
        mpskern.metal_kernel(src, "k")(np.zeros(1, np.float32), grid=(1,), threadgroup=(1,),
                                       backend="sim")


@needs_clang
def test_users_kernels_address_spaces_checked():
    src, _ = ADDRESS_SPACES["threadgroup pointer from device memory"]
    with pytest.raises(KernelCompileError, match=rf"<metal_kernel k>:{marked_line(src)}: .*threadgroup float"):
        sim.build_library(src, origin="<metal_kernel k>")


def test_inactive_foreign_include_is_no_finding():
    src = HEAD + "#ifndef __METAL_VERSION__\n#include <stdint.h>\n#endif\n"
    assert strict.check_source(src, origin="x.metal") == []


def test_without_clang_front_end_rules_run_and_it_is_said_once():
    code = r'''
import warnings
from mpskern.sim import strict
src_as = """%s"""
src_rule = """%s"""
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    a = strict.check_source(src_as, origin="p.metal")
    b = strict.check_source(src_rule, origin="p.metal")
    c = strict.check_source(src_rule, origin="p.metal")
said = [x for x in w if issubclass(x.category, strict.StrictCheckWarning)]
print(len(a), len(b), len(c), len(said), str(said[0].message) if said else "")
''' % (ADDRESS_SPACES["threadgroup pointer from device memory"][0], RULES["double"][0])
    env = dict(os.environ, MPSKERN_CLANG="none")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    n_as, n_rule, n_rule2, n_said, msg = r.stdout.split(" ", 4)
    assert (n_as, n_rule, n_rule2, n_said) == ("0", "1", "1", "1"), r.stdout
    assert "without its address-space stage" in msg and "install clang" in msg
    # the CLI says so too
    r = subprocess.run([sys.executable, "-m", "mpskern.cli.main", "check-msl",
                        os.path.join(METAL_DIR, "pool.metal")], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "address spaces are not type-checked" in r.stderr, r.stderr
    assert "(front-end rules only)" in r.stderr


def test_messages_use_msl_words():
    if not strict.typecheck_available()[0]:
        pytest.skip("no clang")
    src, _ = ADDRESS_SPACES["device pointer to a thread pointer parameter"]
    (f,) = strict.check_source(src, origin="planted.metal")
    assert "__global" not in f.message and "__private" not in f.message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strict.check_source(VALID, origin="valid.metal")


def test_ci_runs_the_address_space_stage():
    """CI installs clang (.ci/run), so there the strict check is never the fallback."""
    if not os.environ.get("CI"):
        pytest.skip("only CI must have clang")
    ok, why = strict.typecheck_available()
    assert ok, f"CI without the strict check's clang stage: {why}"
