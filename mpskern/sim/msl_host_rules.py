"""MSL rules against host code: what a kernel's source (its macros expanded) could use to
make the simulator's C++ build run host code, or run code when the library loads. Apple's
compiler refuses all of it; the simulator compiles kernels as host C++ and would not.

  host attributes   __attribute__((constructor)), [[gnu::...]]/[[clang::...]], __declspec
  host pragmas      #pragma / _Pragma other than unroll, clang loop/diagnostic, METAL
  host builtins     __builtin_*, __sync_*, __atomic_* (MSL has atomic_*_explicit), std::
  lambdas           MSL has no lambda expressions
  load-time code    program-scope variables whose initialisation runs code: a type with a
                    constructor/destructor that is not constexpr (or a member of one), an
                    initialiser calling a function that is not constexpr

These checks narrow what a kernel can do; they are no sandbox: a kernel run in the
simulator is host code with the user's rights (README, docs/simulator.md). Each rule is a
function Program -> [Finding] (mpskern/sim/msl_rules.py's RULES lists them).
"""
import re

from mpskern.sim import msl_tokens as T
from mpskern.sim import parse as P
from mpskern.sim.findings import Finding

# GNU attributes with a meaning in MSL code (Metal's headers use always_inline)
_GNU_ATTRIBUTES = frozenset(("always_inline", "noinline", "unused", "aligned", "packed", "pure",
                             "const", "overloadable", "flatten", "maybe_unused"))
_ATTR_NAMESPACES = frozenset(("gnu", "clang", "msvc", "omp"))
_PRAGMAS = ("unroll", "nounroll", "clang loop", "clang unroll", "clang nounroll",
            "clang diagnostic", "METAL", "once", "GCC unroll", "GCC ivdep", "GCC diagnostic")
_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma\b[ \t]*([^\n]*)", re.M)
_BUILTIN = re.compile(r"__(builtin|sync|atomic)_\w+")
_WHY = "the simulator would build it into host code"


def _find(prog, tok, msg):
    return Finding(*prog.where(prog.tokens[tok].pos), msg)


def _find_at(prog, pos, msg):
    return Finding(*prog.where(pos), msg)


def _bare(name):
    return name.strip("_") if name.startswith("__") and name.endswith("__") else name


def rule_host_attributes(prog):
    out = []
    toks = prog.tokens
    for i, t in enumerate(toks):
        if t.text == "__declspec":
            out.append(_find(prog, i, f"__declspec is a host compiler's attribute; {_WHY}"))
        if t.text not in ("__attribute__", "__attribute") or i + 1 >= len(toks) or toks[i + 1].text != "(":
            continue
        close = T.match(toks, i + 1, "(", ")")
        for s, e in T.split_params(toks, i + 2, close - 1) if i + 2 < close else ():
            name = toks[s].text if s < e and toks[s].kind == "id" else "?"
            if _bare(name) not in _GNU_ATTRIBUTES:
                out.append(_find(prog, i, f"__attribute__(({name})) is a host compiler's attribute "
                                          f"(MSL's attributes are [[...]]: [[kernel]], [[buffer(n)]], "
                                          f"...); {_WHY}"))
    code = T.blank_preprocessor(prog.text)
    for m in T._ATTR.finditer(code):
        for item in m.group(1).split(","):
            ns = item.split("::")[0].strip() if "::" in item else ""
            if _bare(ns) in _ATTR_NAMESPACES:
                out.append(_find_at(prog, m.start(), f"[[{item.strip()}]] is a host compiler's "
                                                     f"attribute; {_WHY}"))
    return out


def rule_host_pragmas(prog):
    """#pragma lines of the preprocessed source (a macro's _Pragma("...") is one there)."""
    out = []
    for m in _PRAGMA.finditer(prog.text):
        what = " ".join(m.group(1).split())
        if not any(what == p or what.startswith(p + " ") or what.startswith(p + "(")
                   for p in _PRAGMAS):
            out.append(_find_at(prog, m.start(), f"#pragma {what} (or _Pragma(\"{what}\")) is a "
                                                 f"host compiler's pragma: MSL kernels take #pragma "
                                                 f"unroll, clang loop, clang diagnostic, METAL"))
    return out


def rule_host_builtins(prog):
    out = []
    toks = prog.tokens
    for i, t in enumerate(toks):
        if t.kind == "id" and _BUILTIN.fullmatch(t.text):
            out.append(_find(prog, i, f"{t.text} is a host compiler builtin; MSL has none ({_WHY})"))
        elif t.text == "std" and (i + 1 < len(toks) and toks[i + 1].text == "::" or
                                  i > 0 and toks[i - 1].text == "namespace"):
            out.append(_find(prog, i, "MSL has no C++ standard library (namespace std); use "
                                      "metal:: (<metal_stdlib>)"))
    return out


# a `[` after one of these opens a lambda when its `]` is followed by ( { mutable or ->
_EXPR_START = frozenset(("=", "(", ",", "{", ";", "}", "return", "?", ":", "&&", "||", "!",
                         "+", "-", "*", "/", "<<", ">>", "+=", "-=", "*=", "/="))


def rule_lambdas(prog):
    out = []
    toks = prog.tokens
    for i, t in enumerate(toks):
        if t.text != "[" or (i > 0 and toks[i - 1].text not in _EXPR_START):
            continue
        close = T.match(toks, i, "[", "]")
        if close + 1 < len(toks) and toks[close + 1].text in ("(", "{", "mutable", "->"):
            out.append(_find(prog, i, "MSL has no lambda expressions (write a helper function)"))
    return out


def _is_constexpr(toks, name_tok):
    """Whether the declaration whose name is tokens[name_tok] says constexpr (or = default)."""
    k = name_tok - 1
    while k >= 0 and toks[k].text not in (";", "{", "}", ":"):
        if toks[k].text in ("constexpr", "consteval"):
            return True
        k -= 1
    close = T.match(toks, name_tok + 1, "(", ")") if name_tok + 1 < len(toks) else len(toks)
    return close + 2 < len(toks) and toks[close + 1].text == "=" and \
        toks[close + 2].text in ("default", "delete")


def _runtime_functions(prog):
    """Program-scope functions whose calls are not constant expressions."""
    return {f.name for f in prog.functions if f.scope == "program" and
            not _is_constexpr(prog.tokens, f.name_tok)}


def _runtime_types(prog, runtime_fns):
    """{type: why} for classes whose construction or destruction runs code: a constructor
    or destructor not constexpr, a call in a member's initialiser, a member of such a type."""
    toks = prog.tokens
    bodies = {}
    for i, t in enumerate(toks[:-2]):
        if t.text in ("struct", "class", "union") and toks[i + 1].kind == "id":
            j = i + 2
            while j < len(toks) and toks[j].text not in ("{", ";"):
                j += 1
            if j < len(toks) and toks[j].text == "{":
                bodies[toks[i + 1].text] = (j + 1, T.match(toks, j, "{", "}"))
    why = {}
    for name, (a, b) in bodies.items():
        for k in range(a, b):
            t = toks[k].text
            if t == name and k + 1 < b and toks[k + 1].text == "(" and \
                    not _is_constexpr(toks, k) and prog.function_at(k) is None:
                kind = "destructor" if toks[k - 1].text == "~" else "constructor"
                why[name] = f"its {kind} is not constexpr"
                break
            if t in runtime_fns and k + 1 < b and toks[k + 1].text == "(" and prog.function_at(k) is None:
                why[name] = f"a member's initialiser calls '{t}', which is not constexpr"
                break
    changed = True
    while changed:                 # a member of such a type makes its class one too
        changed = False
        for name, (a, b) in bodies.items():
            inner = next((toks[k].text for k in range(a, b) if toks[k].text in why and
                          toks[k].text != name and prog.function_at(k) is None), None)
            if name not in why and inner:
                why[name] = f"it has a member of type '{inner}' ({why[inner]})"
                changed = True
    return why


def rule_load_time_code(prog):
    """Program-scope variables that the library would initialise by running code at load
    (in every process that loads it, whichever kernel it asks for)."""
    out = []
    toks = prog.tokens
    fns = _runtime_functions(prog)
    types = _runtime_types(prog, fns)
    for st in prog.statements:
        if st.scope != "program" or toks[st.first].text in ("typedef", "using", "template",
                                                            "struct", "class", "union", "enum"):
            continue
        if P.function_head(toks, st.first, st.last) is not None:
            continue
        for k in range(st.first, st.last + 1):
            t = toks[k].text
            if t in types:
                out.append(_find(prog, st.first, f"program-scope variable of type '{t}' would be "
                                                 f"initialised by running code when the library "
                                                 f"loads ({types[t]}); MSL program-scope constants "
                                                 f"are compile-time constants"))
                break
            if t in fns and k + 1 <= st.last and toks[k + 1].text == "(":
                out.append(_find(prog, st.first, f"program-scope initialiser calls '{t}', which is "
                                                 f"not constexpr: it would run when the library "
                                                 f"loads; MSL program-scope constants are "
                                                 f"compile-time constants"))
                break
    return out


RULES = (rule_host_attributes, rule_host_pragmas, rule_host_builtins, rule_lambdas, rule_load_time_code)
