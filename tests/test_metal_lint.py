"""Mechanical checks of docs/design.md's kernel rules over every metal/*.metal file and the
project headers they include (the rules keep each file valid MSL and runnable on the CPU
simulator). Each rule is a function from the source and its parse (the simulator front-end's
parser, mpskern/sim/parse.py) to findings ("file:line: message"); planted-bug snippets below
prove every rule can fail.

  1. includes: only <metal_*> and project headers that exist in metal/; no std::, no
     dynamic allocation, no exceptions, no function pointers, no direct recursion
  2. threadgroup variables: only in kernels, at the top of the body, one per statement,
     no initialiser, sized by constant expressions (literals, MACROS)
  3. kernel parameters: every one has an attribute; buffers and constant references an
     explicit [[buffer(i)]], indices unique
  4. barriers uniform: a kernel that reaches a barrier has no `return`
  5. no half literals (1.0h); no overloads that differ only in address space
  +  kernel names op_variant_dtype, op = the file's stem; template kernels instantiated
     for f32 and f16
"""
import os
import re

import pytest

from mpskern.paths import METAL_DIR
from mpskern.sim import msl_tokens as T
from mpskern.sim import parse as P

NAME_RE = re.compile(r"^(?P<op>[a-z0-9]+(?:_[a-z0-9]+)*?)_(?P<variant>[a-z0-9]+)_(?P<dtype>f32|f16|bf16)$")


# ------------------------------------------------------------------------------ parsing
# The front-end's parser (mpskern/sim/parse.py) reads the source; comments, preprocessor
# lines and macro invocations standing alone on a line (MK_PER_DTYPE(fn), no `;`: the
# parser would read them as the head of the next declaration) are blanked first, offsets
# and lines kept, since the lint reads raw files.
MACRO_LINE_RE = re.compile(r"^[ \t]*[A-Z][A-Z0-9_]*[ \t]*\([^;{}\n]*\)[ \t]*$", re.M)


def blank_macro_lines(code):
    return MACRO_LINE_RE.sub(lambda m: " " * len(m.group(0)), code)


def parsed(src):
    return P.parse(T.blank_preprocessor(blank_macro_lines(T.strip_comments(src))))


def line_of(prog, pos):
    return prog.where(pos)[1]


def kernels(prog):
    """Kernel definitions (body) and instantiations / declarations (body None)."""
    return [f for f in prog.functions if f.is_kernel]


def functions(prog):
    """Functions at program or namespace scope that have a body."""
    return [f for f in prog.functions if f.body is not None and f.scope == "program"]


def at(prog, fn):
    """Offset of fn's name."""
    return prog.tokens[fn.name_tok].pos


# ------------------------------------------------------------------------------ rules
def rule_includes(fname, src, prog):
    found = []
    for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', src, re.M):
        kind, name = m.groups()
        ln = line_of(prog, m.start())
        if kind == "<" and not name.startswith("metal_"):
            if not (fname == "mk_args.h" and name == "stdint.h"):   # its C-side branch
                found.append(f"{fname}:{ln}: includes <{name}>; only <metal_*> headers")
        if kind == '"' and not os.path.isfile(os.path.join(METAL_DIR, name)):
            found.append(f'{fname}:{ln}: includes "{name}", which is not a metal/ header')
    return found


def rule_forbidden(fname, src, prog):
    found = []
    pats = [(r"\bstd::", "uses std::"),
            (r"\bnew\s+\w|\bdelete\b|\bmalloc\s*\(|\bfree\s*\(", "allocates dynamically"),
            (r"\bthrow\b|\btry\s*\{|\bcatch\s*\(", "uses exceptions"),
            (r"\(\s*\*\s*\w+\s*\)\s*\(", "uses a function pointer")]
    for pat, what in pats:
        for m in re.finditer(pat, prog.text):
            found.append(f"{fname}:{line_of(prog, m.start())}: {what}")
    for fn in functions(prog):
        for callee, tok, _nargs in P.calls(prog, fn):
            if callee == fn.name:
                found.append(f"{fname}:{line_of(prog, prog.tokens[tok].pos)}: {fn.name} calls "
                             "itself (no recursion on the GPU)")
                break
    return found


TG_VAR_RE = re.compile(r"\bthreadgroup\s+((?:const\s+)?[\w:]+(?:\s*<[^;>]*>)?)\s+(\w+)\s*"
                       r"((?:\[[^\]]*\]\s*)*)([;=,{(])")


def rule_threadgroup_vars(fname, src, prog):
    found = []
    kernel_bodies = []
    toks = prog.tokens
    for fn in kernels(prog):
        if fn.body is None:
            continue
        bo, text = P.body_text(prog, fn)
        kernel_bodies.append((bo, bo + len(text)))
        # the body's first token that is not part of a threadgroup declaration
        decls = [(toks[st.first].pos, toks[st.last].end) for st in prog.statements
                 if st.function is fn and TG_VAR_RE.match(prog.text[toks[st.first].pos:toks[st.last].end + 1])]
        first_other = next((toks[k].pos - bo for k in range(*fn.body)
                            if not any(a <= toks[k].pos < b for a, b in decls)), None)
        for m in TG_VAR_RE.finditer(text):
            ln = line_of(prog, bo + m.start())
            dims, end = m.group(3), m.group(4)
            if end != ";":
                found.append(f"{fname}:{ln}: threadgroup variable {m.group(2)} in {fn.name}: "
                             "one per statement, no initialiser")
            for d in re.findall(r"\[([^\]]*)\]", dims):
                if not re.fullmatch(r"[\sA-Z0-9_+\-*/()]+", d):
                    found.append(f"{fname}:{ln}: threadgroup array {m.group(2)}[{d.strip()}] "
                                 "must be sized by a constant expression (literal or MACRO)")
            depth = text.count("{", 0, m.start()) - text.count("}", 0, m.start())
            if depth != 0 or (first_other is not None and m.start() > first_other):
                found.append(f"{fname}:{ln}: threadgroup variable {m.group(2)} in {fn.name} must "
                             "be declared at the top of the kernel body")
    for m in TG_VAR_RE.finditer(prog.text):
        if not any(a <= m.start() < b for a, b in kernel_bodies):
            # parameters like `threadgroup float* p [[threadgroup(0)]]` never match (pointer)
            found.append(f"{fname}:{line_of(prog, m.start())}: threadgroup variable "
                         f"{m.group(2)} outside a kernel body")
    return found


def rule_kernel_params(fname, src, prog):
    found = []
    for fn in kernels(prog):
        ln = line_of(prog, at(prog, fn))
        name = fn.name
        seen = {}
        for span in fn.params:
            p = " ".join(P.param_source(prog, span).split())
            if not p:
                continue
            attrs = re.findall(r"\[\[\s*([^\]]*?)\s*\]\]", p)
            if not attrs:
                found.append(f"{fname}:{ln}: kernel {name}: parameter `{p}` has no attribute")
                continue
            decl = re.sub(r"\[\[.*?\]\]", "", p)
            is_buffer = re.search(r"\b(device|constant)\b", decl) and re.search(r"[*&]", decl)
            m = re.fullmatch(r"buffer\(\s*(\d+)\s*\)", attrs[0])
            if is_buffer and not m:
                found.append(f"{fname}:{ln}: kernel {name}: `{p}` needs an explicit "
                             "[[buffer(i)]]")
            if m:
                i = int(m.group(1))
                if i in seen:
                    found.append(f"{fname}:{ln}: kernel {name}: [[buffer({i})]] bound twice")
                seen[i] = p
            if re.search(r"\bconstant\b", decl) and "&" not in decl and "*" not in decl:
                found.append(f"{fname}:{ln}: kernel {name}: scalar `{p}` must be passed as "
                             "`constant T& x [[buffer(i)]]`")
    return found


BARRIER_RE = re.compile(r"\b(threadgroup_barrier|simdgroup_barrier)\s*\(")


def rule_uniform_barriers(fname, src, prog):
    found = []
    # barriers in helpers the kernel calls count too
    helpers = {fn.name: P.body_text(prog, fn)[1] for fn in functions(prog) if not fn.is_kernel}
    for fn in kernels(prog):
        if fn.body is None:
            continue
        bo, text = P.body_text(prog, fn)
        called = {c for c, _tok, _n in P.calls(prog, fn)}
        reaches = BARRIER_RE.search(text) or any(
            BARRIER_RE.search(helpers[c]) for c in called if c in helpers)
        if reaches:
            for m in re.finditer(r"\breturn\b", text):
                found.append(f"{fname}:{line_of(prog, bo + m.start())}: kernel {fn.name} "
                             "reaches a barrier, so it must not return early (guard the work)")
    return found


def rule_literals_and_overloads(fname, src, prog):
    found = []
    for m in re.finditer(r"(?<![\w.])(\d+\.\d*|\.\d+|\d+)[hH]\b", prog.text):
        found.append(f"{fname}:{line_of(prog, m.start())}: half literal `{m.group(0)}`; "
                     f"write half({m.group(1)})")
    sigs = {}
    for fn in functions(prog):
        if fn.is_kernel:
            continue
        norm, full = [], []
        for span in fn.params:
            _ts, words = P.param_words(prog, span)
            full.append(" ".join(words))
            norm.append(" ".join(w for w in words[:-1] if w not in T.SPACE_WORDS))   # no name
        key = (fn.name, tuple(norm))
        ln = line_of(prog, at(prog, fn))
        if key in sigs and sigs[key][0] != tuple(full):
            found.append(f"{fname}:{ln}: {fn.name} overloads line {sigs[key][1]} differing only "
                         "in address space")
        sigs.setdefault(key, (tuple(full), ln))
    return found


# metal/mk_common.h's instantiation macros: MK_PER_DTYPE(fn) -> fn_f32, fn_f16;
# MK_INSTANTIATE(fn, T, sfx) -> fn_sfx (a kernel that exists for one dtype only)
INST_RE = re.compile(r"\bMK_PER_DTYPE\s*\(\s*(\w+)\s*\)"
                     r"|\bMK_INSTANTIATE\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
SUFFIX = {"float": "f32", "half": "f16"}


def rule_kernel_names(fname, src, prog):
    """One style for every kernel: a template kernel <stem>_<variant> over the storage type,
    instantiated by MK_PER_DTYPE (or MK_INSTANTIATE for a one-dtype kernel), whose host
    names are <stem>_<variant>_<f32|f16> (mpskern.paths.kernel_name)."""
    found = []
    stem = os.path.splitext(fname)[0]
    names = {}
    for m in INST_RE.finditer(T.blank_preprocessor(T.strip_comments(src))):
        ln = line_of(prog, m.start())
        fn = m.group(1) or m.group(2)
        if m.group(1):
            sfxs = ("f32", "f16")
        elif SUFFIX.get(m.group(3)) != m.group(4):
            found.append(f"{fname}:{ln}: MK_INSTANTIATE({fn}, {m.group(3)}, {m.group(4)}): the "
                         f"suffix of {m.group(3)} is {SUFFIX.get(m.group(3), 'none')}")
            continue
        else:
            sfxs = (m.group(4),)
        for sfx in sfxs:
            host = f"{fn}_{sfx}"
            if not NAME_RE.match(host) or not host.startswith(stem + "_"):
                found.append(f"{fname}:{ln}: kernel name {host!r} is not "
                             f"{stem}_<variant>_<f32|f16>")
            names.setdefault(fn, set()).add(sfx)
    for m in re.finditer(r'\[\[\s*host_name\s*\(', prog.text):
        found.append(f"{fname}:{line_of(prog, m.start())}: a hand-written instantiation; "
                     f"use MK_PER_DTYPE(fn) (metal/mk_common.h)")
    for fn in kernels(prog):
        if fn.body is None:
            continue
        ln = line_of(prog, at(prog, fn))
        if not fn.is_template:    # (the parser blanks attributes such as [[max_total_threads...]])
            found.append(f"{fname}:{ln}: kernel {fn.name} is not a template over the storage "
                         f"type instantiated by MK_PER_DTYPE (metal/mk_common.h)")
        elif not names.get(fn.name):
            found.append(f"{fname}:{ln}: template kernel {fn.name} has no instantiation "
                         f"(MK_PER_DTYPE({fn.name}))")
    return found


RULES = (rule_includes, rule_forbidden, rule_threadgroup_vars, rule_kernel_params,
         rule_uniform_barriers, rule_literals_and_overloads, rule_kernel_names)
HEADER_RULES = (rule_includes, rule_forbidden, rule_threadgroup_vars, rule_uniform_barriers,
                rule_literals_and_overloads)


def lint(fname, src, rules=RULES):
    prog = parsed(src)
    return [f for r in rules for f in r(fname, src, prog)]


# ------------------------------------------------------------------------------ the files
def metal_files():
    return sorted(f for f in os.listdir(METAL_DIR) if f.endswith(".metal"))


def headers():
    return sorted(f for f in os.listdir(METAL_DIR) if f.endswith(".h"))


def read(name):
    with open(os.path.join(METAL_DIR, name), encoding="utf-8") as f:
        return f.read()


def test_there_are_kernels():
    assert "gemm.metal" in metal_files() and "conv2d.metal" in metal_files()


@pytest.mark.parametrize("fname", metal_files())
def test_metal_file_follows_the_rules(fname):
    src = read(fname)
    assert kernels(parsed(src)), f"{fname} defines no kernel"
    assert lint(fname, src) == []


@pytest.mark.parametrize("fname", headers())
def test_header_follows_the_rules(fname):
    assert lint(fname, read(fname), HEADER_RULES) == []


# ------------------------------------------------------------------------------ planted bugs
GOOD = """
#include <metal_stdlib>
#include "mk_args.h"
using namespace metal;
template <typename T>
kernel void demo_plain(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                       constant mk_softmax_args& a [[buffer(2)]],
                       uint tid [[thread_index_in_threadgroup]])
{
    threadgroup float tile[MK_BM * 4];
    tile[tid] = float(x[tid]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (int(tid) < a.n) {
        y[tid] = T(tile[tid] + half(1.0));
    }
}
MK_PER_DTYPE(demo_plain)
"""

# the lines of GOOD that several planted bugs rewrite
TG_DECL = "threadgroup float tile[MK_BM * 4];"
Y_ARG = "device T* y [[buffer(1)]],\n"
PER_DTYPE = "MK_PER_DTYPE(demo_plain)"

PLANTED = {      # what: (a line of GOOD, the bug in its place, what the finding says)
    "std": ("y[tid] = T(tile[tid]", "y[tid] = T(std::max(tile[tid], 0.0f)", "std::"),
    "include": ('#include "mk_args.h"', '#include "mk_args.h"\n#include <vector>', "<vector>"),
    "missing header": ('#include "mk_args.h"', '#include "nothere.h"', "nothere.h"),
    "malloc": ("tile[tid] = float(x[tid]);", "float* p = (float*)malloc(4);", "dynamically"),
    "tg late": (f"    {TG_DECL}\n    tile[tid] = float(x[tid]);",
                f"    float q = 0;\n    {TG_DECL}\n    tile[tid] = float(x[tid]);",
                "top of the kernel body"),
    "tg init": (TG_DECL, "threadgroup float tile[MK_BM * 4] = {0};", "no initialiser"),
    "tg two": (TG_DECL, "threadgroup float tile[64], t2[64];", "one per statement"),
    "tg size": (TG_DECL, "threadgroup float tile[a.n];", "constant expression"),
    "no attr": ("uint tid [[thread_index_in_threadgroup]])\n{", "uint tid)\n{", "no attribute"),
    "no buffer": (Y_ARG, "device T* y [[user(y)]],\n", "[[buffer(i)]]"),
    "dup buffer": (Y_ARG, "device T* y [[buffer(0)]],\n", "bound twice"),
    "early return": ("    tile[tid] = float(x[tid]);",
                     "    if (tid > 3) { return; }\n    tile[tid] = float(x[tid]);",
                     "must not return early"),
    "half literal": ("half(1.0)", "1.0h", "half literal"),
    "name": (PER_DTYPE, PER_DTYPE + "\nMK_INSTANTIATE(demo_plain, half, half)",
             "the suffix of half is f16"),
    "not demo_": (PER_DTYPE, PER_DTYPE + "\nMK_PER_DTYPE(plain)", "'plain_f32' is not demo_<variant>"),
    "missing instantiation": (PER_DTYPE, "", "has no instantiation"),
    "hand-written instantiation": (
        PER_DTYPE,
        'template [[host_name("demo_plain_f32")]] kernel void demo_plain<float>(\n'
        "    const device float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
        "    constant mk_softmax_args& a [[buffer(2)]], uint tid [[thread_index_in_threadgroup]]);",
        "hand-written instantiation"),
    "wrapper kernel": (PER_DTYPE, PER_DTYPE + "\n"
                       "kernel void demo_plain_f64(const device float* x [[buffer(0)]])\n"
                       "{\n}\n", "not a template"),
}


def test_clean_snippet_passes():
    assert lint("demo.metal", GOOD) == []


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_planted_bug_is_found(what):
    old, new, expect = PLANTED[what]
    assert old in GOOD
    found = lint("demo.metal", GOOD.replace(old, new, 1))
    assert any(expect in f for f in found), (what, found)
    assert all(f.startswith("demo.metal:") for f in found)


def test_recursion_function_pointer_and_overload_are_found():
    src = GOOD + """
inline float walk(float v) { return v > 1.0f ? walk(v * 0.5f) : v; }
inline float pick(float (*f)(float), float v) { return f(v); }
inline float ld(const device float* p) { return p[0]; }
inline float ld(const threadgroup float* p) { return p[0]; }
"""
    found = lint("demo.metal", src)
    assert any("walk calls itself" in f for f in found), found
    assert any("function pointer" in f for f in found), found
    assert any("differing only in address space" in f for f in found), found


def test_preprocessor_lines_and_comments_are_not_code():
    # a macro's continuation lines and comments are blanked before parsing: what they hold is
    # no finding, and the findings after them keep their lines
    src = GOOD.replace("using namespace metal;", "using namespace metal;\n#define MK_CLAMP(v) \\\n"
                       "    std::max(v, 0)  \\\n    + std::min(v, 1)\n// std:: in a comment\n"
                       "/* new int; \n delete p; */")
    assert lint("demo.metal", src) == []
    bad = src.replace("y[tid] = T(tile[tid]", "y[tid] = T(std::abs(tile[tid])")
    line = bad[:bad.index("std::abs")].count("\n") + 1
    assert lint("demo.metal", bad) == [f"demo.metal:{line}: uses std::"]
