"""Issue 15 item 14: a kernel's macros cannot inject host code. The strict check runs on the
source with its macros expanded (mpskern/sim/msl_host_rules.py + msl_rules.py), so a
`#define` that expands to a constructor attribute, asm, extern "C", std::, a host call, a
load-time initialiser, a pasted keyword, a computed #include or a _Pragma is refused at the
line that uses it, with a message naming the construct. README and docs/simulator.md keep
saying that an untrusted kernel in the simulator is untrusted code (a check, no sandbox).

Each planted source marks the offending line with `// <-` (the macro's use, not its
definition); the check must report exactly that line."""
import re
from pathlib import Path

import numpy as np
import pytest
from test_msl_strict import _assert_refused_at_line, marked_line

import mpskern
from mpskern import sim
from mpskern._errors import KernelCompileError
from mpskern.sim import strict

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")
needs_clang = pytest.mark.skipif(not strict.typecheck_available()[0],
                                 reason="no clang for the type-checking stage")

ROOT = Path(__file__).resolve().parent.parent
HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


def kern(body, defines="", pre=""):
    return (HEAD + defines + pre +
            "kernel void k(device float* x [[buffer(0)]], uint tid [[thread_position_in_grid]]) {\n"
            + body + "\n}\n")


# name: (source, words the message must contain); the check passed every one of these before
# the host-code rules but __declspec and _Pragma("clang attribute ...") (refused by the clang
# stage then, and so accepted without clang); no clang needed for any now
MACROS = {
    **{f"{what.strip('_')} attribute": (kern("    x[0] = 1;", f"#define AT __attribute__(({what}))\n",
                                             "AT void boom() { }  // <-\n"), f"__attribute__(({what}))")
       for what in ("constructor", "__destructor__")},
    "section attribute": (kern("    x[0] = v;", '#define SEC(s) __attribute__((section(s)))\n',
                               'constant int v SEC(".init_array") = 1;  // <-\n'), "__attribute__((section))"),
    "visibility attribute": (kern("    x[0] = 1;", '#define EXPORT __attribute__((visibility("default")))\n',
                                  "EXPORT float f(float a) { return a; }  // <-\n"), "visibility"),
    "[[gnu::constructor]]": (kern("    x[0] = 1;", "#define ON_LOAD [[gnu::constructor]]\n",
                                  "ON_LOAD void boom() { }  // <-\n"), "[[gnu::constructor]]"),
    "__declspec": (kern("    x[0] = 1;", "#define DS __declspec(dllexport)\n",
                        "DS float f(float a) { return a; }  // <-\n"), "__declspec"),
    "_Pragma weak": (kern("    x[0] = 1;", '#define WEAK(s) _Pragma("weak boom")\n', "WEAK(boom)  // <-\n"),
                     "#pragma weak boom"),
    "_Pragma visibility": (kern("    x[0] = 1;", '#define VIS _Pragma("GCC visibility push(default)")\n',
                                "VIS  // <-\n"), "GCC visibility push(default)"),
    "_Pragma clang attribute": (
        kern("    x[0] = 1;", '#define ALL _Pragma("clang attribute push (__attribute__((constructor)), apply_to=function)")\n',
             "ALL  // <-\n"), "clang attribute push"),
    "#pragma redefine_extname": (kern("    x[0] = 1;", pre="#pragma redefine_extname f system  // <-\n"),
                                 "redefine_extname"),
    "builtin": (kern("    TRAP();  // <-", "#define TRAP __builtin_trap\n"), "__builtin_trap is a host compiler builtin"),
    "builtin frame address": (kern("    x[0] = float(ulong(FA(0)));  // <-", "#define FA __builtin_frame_address\n"),
                              "__builtin_frame_address"),
    "gcc atomics": (kern("    __sync_fetch_and_add((device int*)x, 1);  // <-"), "__sync_fetch_and_add"),
    "std:: via a macro": (kern("    x[0] = S abs(x[1]);  // <-", "#define S std::\n"), "namespace std"),
    "namespace std": (kern("    x[0] = 1;", "#define OPEN namespace std {\n", "OPEN }  // <-\n"), "namespace std"),
    "lambda via a macro": (kern("    x[0] = L(1.0f);  // <-", "#define L [](float v) { return v * 2; }\n"),
                           "no lambda expressions"),
    "program-scope lambda": (kern("    x[0] = v;", "#define INIT(e) [](){ return e; }()\n",
                                  "constant float v = INIT(2.0f);  // <-\n"), "no lambda expressions"),
    "load-time constructor": (
        kern("    x[0] = once_R.a;", "#define ONCE(T) constant T once_##T\n",
             "struct R { float a; R() { a = 1.0f; } };\nONCE(R);  // <-\n"),
        "type 'R' would be initialised by running code when the library loads (its constructor"),
    "load-time destructor": (
        kern("    x[0] = r.a;", "#define KEEP(T, n) constant T n = {1.0f}\n",
             "struct D { float a; ~D() { } };\nKEEP(D, r);  // <-\n"), "type 'D'"),
    "load-time member": (
        kern("    x[0] = w.r.a;", "#define WRAP constant W w\n",
             "struct R { float a; R() { a = 1.0f; } };\nstruct W { R r; };\nWRAP;  // <-\n"),
        "type 'W' would be initialised by running code when the library loads (it has a member of type 'R'"),
    "load-time call": (
        kern("    x[0] = v;", "#define V(f) constant float v = f()\n",
             "inline float side() { return 3.0f; }\nV(side);  // <-\n"),
        "initialiser calls 'side', which is not constexpr"),
    "load-time member initialiser": (
        kern("    x[0] = m.a;", "#define M constant I m\n",
             "inline float side() { return 3.0f; }\nstruct I { float a = side(); };\nM;  // <-\n"),
        "a member's initialiser calls 'side'"),
}

# refused before the host-code rules too (by the older rules): kept here so the whole list
# of macro injections stays checked in one place
MACROS_ALREADY = {
    "asm via a macro": (kern("    G;  // <-", '#define G asm("nop")\n'), "inline assembly (asm)"),
    "asm by token pasting": (kern('    CAT(as, m)("nop");  // <-', "#define CAT(a, b) a##b\n"), "inline assembly (asm)"),
    'extern "C" via a macro': (kern("    x[0] = 1;", '#define EC extern "C"\n', "EC float host_fn(float);  // <-\n"),
                               'extern "C"'),
    "#include via a macro": (kern("    x[0] = 1;", '#define H "/etc/hostname"\n', "#include H  // <-\n"), "#include H"),
    "mutable program-scope via a macro": (kern("    x[0] = g;", "#define GLOBAL(n) float n = 0\n", "GLOBAL(g);  // <-\n"),
                                          "program-scope variable 'g'"),
}

# host calls: refused by the clang stage (an identifier Metal's headers do not declare)
MACROS_CLANG = {
    "system( via a macro": (kern('    RUN("id");  // <-', "#define RUN system\n"), "'system'"),
    "::system via a macro": (kern('    RUN("id");  // <-', "#define RUN ::system\n"), "system"),
    "load-time host call": (kern("    x[0] = v;", "#define AT_LOAD(e) constant int v = (e, 1)\n",
                                 'AT_LOAD(system("id"));  // <-\n'), "'system'"),
}

# valid MSL near these constructs: must stay free of findings
VALID = HEAD + """
#define INLINE inline __attribute__((always_inline))
#define UNROLL _Pragma("unroll")
struct C { float a; constexpr C(float v) : a(v) { } };
struct P { float a; P() = default; };
constexpr float twice(float v) { return 2 * v; }
constant C c0 = C(1.0f);
constant float k2 = twice(2.0f);
constant float table[2] = {1.0f, 2.0f};
INLINE float sq(float v) { return v * v; }
kernel void k(device float* x [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    float acc = 0;
    #pragma clang loop unroll(full)
    for (int i = 0; i < 2; ++i) { acc += table[i]; }
    UNROLL
    for (int i = 0; i < 2; ++i) { acc += x[i]; }
    P p;
    p.a = 1.0f;
    C c(2.0f);
    x[tid] = sq(acc) + c0.a + k2 + c.a + p.a + metal::abs(x[0]) + fast::exp(0.0f);
}
"""


PLANTED = {**MACROS, **MACROS_ALREADY, **MACROS_CLANG}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[needs_clang] if n in MACROS_CLANG else [])
                                  for n in sorted(PLANTED)])
def test_macro_injecting_host_code_is_refused_at_its_line(name):
    src, words = PLANTED[name]
    _assert_refused_at_line(src, words, strict.check_source(src, origin="planted.metal"))


def test_valid_idioms_near_the_host_rules_compile_and_run():
    assert strict.check_source(VALID, origin="valid.metal") == []
    x = np.array([1.0, 2.0, 0.0, 0.0], np.float32)
    mpskern.metal_kernel(VALID, "k")(x, grid=(1,), threadgroup=(1,), backend="sim")
    # acc = 3 + 3, sq = 36; + 1 + 4 + 2 + 1 + |x0| + 1
    assert x[0] == 36 + 1 + 4 + 2 + 1 + 1 + 1


@pytest.mark.parametrize("name", ["constructor attribute", "load-time constructor", "_Pragma weak"])
def test_users_kernels_with_injected_host_code_never_build(name):
    src, words = MACROS[name]
    with pytest.raises(KernelCompileError, match=rf"<metal_kernel k>:{marked_line(src)}: .*{re.escape(words)}"):
        mpskern.metal_kernel(src, "k")(np.zeros(1, np.float32), grid=(1,), threadgroup=(1,),
                                       backend="sim")


@pytest.mark.parametrize("doc", ["README.md", "docs/simulator.md"])
def test_docs_say_an_untrusted_kernel_is_untrusted_code(doc):
    text = " ".join((ROOT / doc).read_text().split())
    assert "Running an untrusted kernel in the simulator is running untrusted code" in text
    assert "not a sandbox" in text
