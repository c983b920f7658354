"""Mechanical checks of docs/design.md's kernel rules over every metal/*.metal file and the
project headers they include (the rules keep each file valid MSL and runnable on the CPU
simulator). Each rule is a function from source text to findings ("file:line: message");
planted-bug snippets below prove every rule can fail.

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

ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread")
NAME_RE = re.compile(r"^(?P<op>[a-z0-9]+(?:_[a-z0-9]+)*?)_(?P<variant>[a-z0-9]+)_(?P<dtype>f32|f16|bf16)$")


# ------------------------------------------------------------------------------ parsing
def strip_comments(src):
    """Comments replaced by spaces (newlines kept, so offsets map to the same lines)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, src, flags=re.S)


def strip_preprocessor(src):
    """Preprocessor lines (with continuations) blanked, lines kept."""
    out, cont = [], False
    for line in src.split("\n"):
        is_pp = cont or line.lstrip().startswith("#")
        cont = is_pp and line.rstrip().endswith("\\")
        out.append(" " * len(line) if is_pp else line)
    return "\n".join(out)


def line_of(src, pos):
    return src.count("\n", 0, pos) + 1


def match_close(src, i, open_ch, close_ch):
    """Index of the bracket closing the one at src[i]."""
    depth = 0
    for j in range(i, len(src)):
        c = src[j]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unbalanced {open_ch} at offset {i}")


def split_top(text, sep=","):
    """Split at `sep` outside (), [], <> and {}."""
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


KERNEL_RE = re.compile(r"(?:\bkernel|\[\[\s*kernel\s*\]\])\s+void\s+(\w+)\s*(<[^>(]*>)?\s*\(")


def kernels(code):
    """(name, template_args, params, body or None, offset) of every kernel definition
    (body: its text) and instantiation / declaration (body None)."""
    out = []
    for m in KERNEL_RE.finditer(code):
        po = m.end() - 1
        pc = match_close(code, po, "(", ")")
        rest = code[pc + 1:].lstrip()
        body = None
        if rest.startswith("{"):
            bo = code.index("{", pc)
            body = (bo, code[bo + 1:match_close(code, bo, "{", "}")])
        out.append((m.group(1), m.group(2), code[po + 1:pc], body, m.start()))
    return out


def match_open(src, j, open_ch, close_ch):
    """Index of the bracket opening the one closed at src[j]."""
    depth = 0
    for i in range(j, -1, -1):
        c = src[i]
        if c == close_ch:
            depth += 1
        elif c == open_ch:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {close_ch} at offset {j}")


def functions(code):
    """(name, params, body, body offset, is_kernel) of every function definition: a
    top-level `{` right after `name(...)` (namespaces are entered, other blocks skipped)."""
    out = []
    depth, start, i = 0, 0, 0
    while i < len(code):
        c = code[i]
        if c == "{" and depth == 0:
            head = code[start:i].rstrip()
            if head.endswith(")"):
                pc = start + len(head) - 1
                po = match_open(code, pc, "(", ")")
                m = re.search(r"(\w+)\s*(?:<[^<>]*>)?\s*$", code[max(start, po - 200):po])
                be = match_close(code, i, "{", "}")
                if m:
                    decl = code[start:po]
                    is_kernel = bool(re.search(r"\bkernel\b|\[\[\s*kernel\s*\]\]", decl))
                    out.append((m.group(1), code[po + 1:pc], code[i + 1:be], i + 1, is_kernel))
                i = start = be + 1
                continue
            if re.search(r"\bnamespace\b[\w\s]*$", head):
                i = start = i + 1          # enter the namespace
                continue
            i = start = match_close(code, i, "{", "}") + 1
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c in ";}" and depth == 0:
            start = i + 1
        i += 1
    return out


# ------------------------------------------------------------------------------ rules
def rule_includes(fname, src, code):
    found = []
    for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', src, re.M):
        kind, name = m.groups()
        ln = line_of(src, m.start())
        if kind == "<" and not name.startswith("metal_"):
            if not (fname == "mk_args.h" and name == "stdint.h"):   # its C-side branch
                found.append(f"{fname}:{ln}: includes <{name}>; only <metal_*> headers")
        if kind == '"' and not os.path.isfile(os.path.join(METAL_DIR, name)):
            found.append(f'{fname}:{ln}: includes "{name}", which is not a metal/ header')
    return found


def rule_forbidden(fname, src, code):
    found = []
    pats = [(r"\bstd::", "uses std::"),
            (r"\bnew\s+\w|\bdelete\b|\bmalloc\s*\(|\bfree\s*\(", "allocates dynamically"),
            (r"\bthrow\b|\btry\s*\{|\bcatch\s*\(", "uses exceptions"),
            (r"\(\s*\*\s*\w+\s*\)\s*\(", "uses a function pointer")]
    for pat, what in pats:
        for m in re.finditer(pat, code):
            found.append(f"{fname}:{line_of(code, m.start())}: {what}")
    for name, _params, body, off, _k in functions(code):
        m = re.search(r"(?<![\w.])" + re.escape(name) + r"\s*(<[^>]*>)?\s*\(", body)
        if m:
            found.append(f"{fname}:{line_of(code, off + m.start())}: {name} calls itself "
                         "(no recursion on the GPU)")
    return found


TG_VAR_RE = re.compile(r"\bthreadgroup\s+((?:const\s+)?[\w:]+(?:\s*<[^;>]*>)?)\s+(\w+)\s*"
                       r"((?:\[[^\]]*\]\s*)*)([;=,{(])")


def top_statements(body):
    """(start, end) of the body's top-level statements."""
    out, depth, start = [], 0, 0
    i = 0
    while i < len(body):
        c = body[i]
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0 and c == "}":
                out.append((start, i + 1))
                start = i + 1
        elif c == ";" and depth == 0:
            out.append((start, i + 1))
            start = i + 1
        i += 1
    return [(s, e) for s, e in out if body[s:e].strip()]


def rule_threadgroup_vars(fname, src, code):
    found = []
    kernel_bodies = []
    for name, _targs, _params, body, _off in kernels(code):
        if body is None:
            continue
        bo, text = body
        kernel_bodies.append((bo + 1, bo + 1 + len(text)))
        stmts = top_statements(text)
        first_other = None
        for s, e in stmts:
            if not TG_VAR_RE.match(text[s:e].strip()):
                first_other = s
                break
        for m in TG_VAR_RE.finditer(text):
            ln = line_of(code, bo + 1 + m.start())
            dims, end = m.group(3), m.group(4)
            if end != ";":
                found.append(f"{fname}:{ln}: threadgroup variable {m.group(2)} in {name}: "
                             "one per statement, no initialiser")
            for d in re.findall(r"\[([^\]]*)\]", dims):
                if not re.fullmatch(r"[\sA-Z0-9_+\-*/()]+", d):
                    found.append(f"{fname}:{ln}: threadgroup array {m.group(2)}[{d.strip()}] "
                                 "must be sized by a constant expression (literal or MACRO)")
            depth = sum(text[:m.start()].count(c) for c in "{") - \
                sum(text[:m.start()].count(c) for c in "}")
            if depth != 0 or (first_other is not None and m.start() > first_other):
                found.append(f"{fname}:{ln}: threadgroup variable {m.group(2)} in {name} must "
                             "be declared at the top of the kernel body")
    for m in TG_VAR_RE.finditer(code):
        if not any(a <= m.start() < b for a, b in kernel_bodies):
            # parameters like `threadgroup float* p [[threadgroup(0)]]` never match (pointer)
            found.append(f"{fname}:{line_of(code, m.start())}: threadgroup variable "
                         f"{m.group(2)} outside a kernel body")
    return found


def rule_kernel_params(fname, src, code):
    found = []
    for name, _targs, params, _body, off in kernels(code):
        ln = line_of(code, off)
        seen = {}
        for p in split_top(params):
            p = " ".join(p.split())
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


def rule_uniform_barriers(fname, src, code):
    found = []
    for name, _targs, _params, body, _off in kernels(code):
        if body is None:
            continue
        bo, text = body
        # barriers in helpers the kernel calls count too
        called = set(re.findall(r"\b(\w+)\s*(?:<[^>]*>)?\s*\(", text))
        helpers = {n: b for n, _p, b, _o, k in functions(code) if not k}
        reaches = BARRIER_RE.search(text) or any(
            BARRIER_RE.search(helpers[c]) for c in called if c in helpers)
        if reaches:
            for m in re.finditer(r"\breturn\b", text):
                found.append(f"{fname}:{line_of(code, bo + 1 + m.start())}: kernel {name} "
                             "reaches a barrier, so it must not return early (guard the work)")
    return found


def rule_literals_and_overloads(fname, src, code):
    found = []
    for m in re.finditer(r"(?<![\w.])(\d+\.\d*|\.\d+|\d+)[hH]\b", code):
        found.append(f"{fname}:{line_of(code, m.start())}: half literal `{m.group(0)}`; "
                     f"write half({m.group(1)})")
    sigs = {}
    for name, params, _body, off, is_kernel in functions(code):
        if is_kernel:
            continue
        norm = []
        for p in split_top(params):
            words = [w for w in re.sub(r"\[\[.*?\]\]", "", p).replace("*", " * ")
                     .replace("&", " & ").split() if w not in ADDRESS_SPACES]
            norm.append(" ".join(words[:-1]))     # drop the parameter name
        key = (name, tuple(norm))
        full = (name, " ".join(params.split()))
        if key in sigs and sigs[key][0] != full:
            found.append(f"{fname}:{line_of(code, off)}: {name} overloads "
                         f"line {sigs[key][1]} differing only in address space")
        sigs.setdefault(key, (full, line_of(code, off)))
    return found


# metal/mk_common.h's instantiation macros: MK_PER_DTYPE(fn) -> fn_f32, fn_f16;
# MK_INSTANTIATE(fn, T, sfx) -> fn_sfx (a kernel that exists for one dtype only)
INST_RE = re.compile(r"\bMK_PER_DTYPE\s*\(\s*(\w+)\s*\)"
                     r"|\bMK_INSTANTIATE\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
SUFFIX = {"float": "f32", "half": "f16"}


def rule_kernel_names(fname, src, code):
    """One style for every kernel: a template kernel <stem>_<variant> over the storage type,
    instantiated by MK_PER_DTYPE (or MK_INSTANTIATE for a one-dtype kernel), whose host
    names are <stem>_<variant>_<f32|f16> (mpskern.paths.kernel_name)."""
    found = []
    stem = os.path.splitext(fname)[0]
    names = {}
    for m in INST_RE.finditer(code):
        ln = line_of(code, m.start())
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
    for m in re.finditer(r'\[\[\s*host_name\s*\(', code):
        found.append(f"{fname}:{line_of(code, m.start())}: a hand-written instantiation; "
                     f"use MK_PER_DTYPE(fn) (metal/mk_common.h)")
    for name, targs, _params, body, off in kernels(code):
        if body is None:
            continue
        # attributes may stand between `template <...>` and `kernel` ([[max_total_threads...]])
        templ = re.search(r"template\s*<[^>]*>\s*(?:\[\[[^\]]*\]\]\s*)*$", code[max(0, off - 300):off])
        if not templ:
            found.append(f"{fname}:{line_of(code, off)}: kernel {name} is not a template over "
                         f"the storage type instantiated by MK_PER_DTYPE (metal/mk_common.h)")
        elif not names.get(name):
            found.append(f"{fname}:{line_of(code, off)}: template kernel {name} has no "
                         f"instantiation (MK_PER_DTYPE({name}))")
    return found


RULES = (rule_includes, rule_forbidden, rule_threadgroup_vars, rule_kernel_params,
         rule_uniform_barriers, rule_literals_and_overloads, rule_kernel_names)
HEADER_RULES = (rule_includes, rule_forbidden, rule_threadgroup_vars, rule_uniform_barriers,
                rule_literals_and_overloads)


def lint(fname, src, rules=RULES):
    code = strip_preprocessor(strip_comments(src))
    return [f for r in rules for f in r(fname, src, code)]


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
    assert kernels(strip_preprocessor(strip_comments(src))), f"{fname} defines no kernel"
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

PLANTED = {
    "std": ("y[tid] = T(tile[tid]", "y[tid] = T(std::max(tile[tid], 0.0f)", "std::"),
    "include": ('#include "mk_args.h"', '#include "mk_args.h"\n#include <vector>', "<vector>"),
    "missing header": ('#include "mk_args.h"', '#include "nothere.h"', "nothere.h"),
    "malloc": ("tile[tid] = float(x[tid]);", "float* p = (float*)malloc(4);", "dynamically"),
    "tg late": ("    threadgroup float tile[MK_BM * 4];\n    tile[tid] = float(x[tid]);",
                "    float q = 0;\n    threadgroup float tile[MK_BM * 4];\n    tile[tid] = float(x[tid]);",
                "top of the kernel body"),
    "tg init": ("threadgroup float tile[MK_BM * 4];", "threadgroup float tile[MK_BM * 4] = {0};",
                "no initialiser"),
    "tg two": ("threadgroup float tile[MK_BM * 4];", "threadgroup float tile[64], t2[64];",
               "one per statement"),
    "tg size": ("threadgroup float tile[MK_BM * 4];", "threadgroup float tile[a.n];",
                "constant expression"),
    "no attr": ("uint tid [[thread_index_in_threadgroup]])\n{", "uint tid)\n{", "no attribute"),
    "no buffer": ("device T* y [[buffer(1)]],\n", "device T* y [[user(y)]],\n", "[[buffer(i)]]"),
    "dup buffer": ("device T* y [[buffer(1)]],\n", "device T* y [[buffer(0)]],\n", "bound twice"),
    "early return": ("    tile[tid] = float(x[tid]);",
                     "    if (tid > 3) { return; }\n    tile[tid] = float(x[tid]);",
                     "must not return early"),
    "half literal": ("half(1.0)", "1.0h", "half literal"),
    "name": ("MK_PER_DTYPE(demo_plain)", "MK_PER_DTYPE(demo_plain)\nMK_INSTANTIATE(demo_plain, "
             "half, half)", "the suffix of half is f16"),
    "not demo_": ("MK_PER_DTYPE(demo_plain)", "MK_PER_DTYPE(demo_plain)\nMK_PER_DTYPE(plain)",
                  "'plain_f32' is not demo_<variant>"),
    "missing instantiation": ("MK_PER_DTYPE(demo_plain)", "", "has no instantiation"),
    "hand-written instantiation": (
        "MK_PER_DTYPE(demo_plain)",
        'template [[host_name("demo_plain_f32")]] kernel void demo_plain<float>(\n'
        "    const device float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
        "    constant mk_softmax_args& a [[buffer(2)]], uint tid [[thread_index_in_threadgroup]]);",
        "hand-written instantiation"),
    "wrapper kernel": ("MK_PER_DTYPE(demo_plain)", "MK_PER_DTYPE(demo_plain)\n"
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
