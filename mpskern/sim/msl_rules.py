"""MSL's language rules, checked by the front-end's parser (mpskern/sim/parse.py) over the
preprocessed source: what Apple's compiler refuses and the simulator's C++ compiler would
accept. Each rule is a function Program -> [Finding]; RULES lists them (mpskern/sim/strict.py
runs them before every simulator build and in `mpskern check-msl`).

  includes: only <metal_*> (guard_includes turns the others into markers before
            preprocessing, so a foreign header is never opened; one in an `#if` branch not
            taken is no finding)
  no double, virtual, new/delete, try/throw/catch, goto, thread_local, asm, extern "C",
  function pointers, recursion (call-graph cycles), static locals; program scope holds
  only `constant`/constexpr variables; threadgroup variables only in a kernel's body;
  simdgroup_matrix of float or half; kernel pointer/reference parameters name device,
  constant or threadgroup; [[buffer(i)]] with i in 0..30;
  no host code: host attributes/pragmas/builtins, lambdas, load-time initialisation
  (mpskern/sim/msl_host_rules.py).
"""
import re

from mpskern.sim import msl_host_rules
from mpskern.sim import msl_tokens as T
from mpskern.sim import parse as P
from mpskern.sim.findings import Finding
from mpskern.sim.frontend import MAX_BUFFER_INDEX


# Each #include/#import that is not <metal_*> becomes a marker before preprocessing; a
# marker that survives was active (one in an `#if` branch not taken, like metal/mk_args.h's
# C-side <stdint.h>, is not). So the preprocessor never opens a foreign file.
_INCLUDE = re.compile(r'^([ \t]*#[ \t]*(include|include_next|import)\b[^\n]*)$', re.M)
_METAL_INCLUDE = re.compile(r'[ \t]*#[ \t]*include[ \t]*<metal_\w+>[ \t]*$')
_MARK = "__mk_foreign_include__"


def guard_includes(source):
    """source with every include but <metal_*> replaced by a marker (lines kept)."""
    code = T.strip_comments(source)
    out, pos = [], 0
    for m in _INCLUDE.finditer(code):
        if _METAL_INCLUDE.fullmatch(m.group(1)):
            continue
        text = " ".join(m.group(1).split())
        out.append(source[pos:m.start()])
        out.append(f"{_MARK}({_c_string(text)});")
        pos = m.end()
    out.append(source[pos:])
    return "".join(out)


def _c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rule_includes(prog):
    out = []
    toks = prog.tokens
    for i, t in enumerate(toks):
        if t.text == _MARK and i + 2 < len(toks) and toks[i + 2].kind == "str":
            what = toks[i + 2].text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            out.append(_find(prog, i, f"{what}: only the Metal standard library headers "
                                      f"(<metal_stdlib>, <metal_*>) can be included; put your "
                                      f"own helpers in the kernel's source"))
    return out


# ------------------------------------------------------------------ rules
_FORBIDDEN = {
    "double": "MSL has no double (64-bit floating point); use float",
    "virtual": "MSL has no virtual functions",
    "new": "MSL has no dynamic allocation (new)",
    "delete": "MSL has no dynamic allocation (delete)",
    "try": "MSL has no exceptions (try)",
    "catch": "MSL has no exceptions (catch)",
    "throw": "MSL has no exceptions (throw)",
    "goto": "MSL has no goto",
    "thread_local": "thread_local is host-only; MSL has no thread storage duration",
    "asm": "inline assembly (asm) is host-only",
    "__asm": "inline assembly (__asm) is host-only",
    "__asm__": "inline assembly (__asm__) is host-only",
    "dynamic_cast": "MSL has no run-time type information (dynamic_cast)",
    "typeid": "MSL has no run-time type information (typeid)",
}


def _at(prog, tok):
    f, ln = prog.where(prog.tokens[tok].pos)
    return f, ln


def _find(prog, tok, msg):
    f, ln = _at(prog, tok)
    return Finding(f, ln, msg)


def rule_forbidden_words(prog):
    out = []
    toks = prog.tokens
    for i, t in enumerate(toks):
        if t.kind != "id" or t.text not in _FORBIDDEN:
            if t.text == "extern" and i + 1 < len(toks) and toks[i + 1].kind == "str":
                out.append(_find(prog, i, f"extern {toks[i + 1].text} is host-only (MSL has no "
                                          f"language linkage)"))
            continue
        if t.text == "delete" and i > 0 and toks[i - 1].text == "=":
            continue                       # a deleted function: `f() = delete;`
        out.append(_find(prog, i, _FORBIDDEN[t.text]))
    return out


def rule_function_pointers(prog):
    """`(*name)(` or `(&name)(` -- a function pointer or reference, declared or called."""
    out = []
    toks = prog.tokens
    for i in range(len(toks) - 3):
        if toks[i].text != "(" or toks[i + 1].text not in ("*", "&"):
            continue
        j = i + 2
        while j < len(toks) and (toks[j].kind == "id" or toks[j].text == "::") and \
                toks[j].text not in ("const",):
            j += 1
        while j < len(toks) and toks[j].text == "const":
            j += 1
        if j + 1 < len(toks) and toks[j].text == ")" and toks[j + 1].text == "(":
            out.append(_find(prog, i, "MSL has no function pointers (use a template parameter "
                                      "or a switch)"))
    return out


def rule_static_locals(prog):
    out = []
    for i, t in enumerate(prog.tokens):
        if t.text == "static" and prog.function_at(i) is not None:
            out.append(_find(prog, i, "static local variables are not allowed in MSL; use a "
                                      "`constant` at program scope or a kernel argument"))
    return out


_DECL_SKIP = frozenset(("typedef", "using", "template", "namespace", "static_assert", "friend",
                        "public", "private", "protected", "enum", "extern"))


def _declared_names(prog, a, b):
    """Token indices of the names a declaration statement tokens[a..b] declares: in each
    comma-separated declarator, the last identifier before its top-level `=`, `[`, `{` or
    `(` (an initialiser's names are not declared)."""
    toks = prog.tokens
    end = b if toks[b].text == ";" else b + 1
    names = []
    for s, e in T.split_params(toks, a - 1, end):
        last, depth = None, 0
        for j in range(s, e):
            t = toks[j].text
            if depth == 0 and t in ("=", "[", "{", "("):
                break
            if t == "<":
                depth += 1
            elif t == ">":
                depth -= 1
            elif depth == 0 and toks[j].kind == "id":
                last = j
        if last is not None:
            names.append(last)
    return names


def rule_program_scope(prog):
    """Program-scope (and static member) variables must be `constant` or constexpr; no
    threadgroup variables outside a kernel's body."""
    out = []
    toks = prog.tokens
    for st in prog.statements:
        a, b = st.first, st.last
        words = [toks[k].text for k in range(a, b + 1)]
        if not words:
            continue
        # threadgroup T x[...]; anywhere but a kernel's body (pointers/references are fine)
        lead = [w for w in words[:4] if w in ("static", "const", "threadgroup", "volatile")]
        if "threadgroup" in lead and (st.scope != "body" or not st.function.is_kernel):
            if not _declares_pointer(prog, a, b):
                where = "at program scope" if st.scope != "body" else \
                    f"in '{st.function.name}', which is not a kernel"
                out.append(_find(prog, a, f"threadgroup variable declared {where}: threadgroup "
                                          f"memory is declared in a kernel's body (pass it to "
                                          f"helpers as a threadgroup pointer)"))
                continue
        if st.scope == "body":
            continue
        if words[0] in _DECL_SKIP or words[0] in ("struct", "class", "union") and "{" not in words:
            continue
        if st.scope == "class" and words[0] != "static":
            continue                                      # a member: not a variable
        if any(w in ("constant", "constexpr") for w in words[:words.index("=")
                                                              if "=" in words else len(words)]):
            continue
        if P.function_head(toks, a, b) is not None:
            continue                                      # a function's declaration
        if words[0] in ("struct", "class", "union"):
            # `struct S {...} s;`: only the declarators after the body are variables
            close = next((k for k in range(b, a - 1, -1) if toks[k].text == "}"), None)
            if close is None or close + 1 > b - 1:
                continue
            a = close + 1
        names = [toks[k].text for k in _declared_names(prog, a, b)]
        if names:
            out.append(_find(prog, st.first,
                             f"program-scope variable '{names[0]}' must be in the constant address "
                             f"space (constant T {names[0]} = ...;) or constexpr: MSL has no "
                             f"mutable program-scope variables"))
    return out


def _declares_pointer(prog, a, b):
    """Whether the declaration tokens[a..b] declares a pointer or reference (a `*`/`&`
    before the first declarator's end, outside template brackets)."""
    return P.is_pointer_or_ref([t.text for t in prog.tokens[a:b + 1]], stop=("=", "[", ";", "("))


def rule_recursion(prog):
    """Call-graph cycles among the source's functions (overloads told apart by argument
    count), reported at the call that closes the cycle."""
    defs = {}
    for f in prog.functions:
        if f.body is not None:
            defs.setdefault(f.name, []).append(f)
    edges = {}
    for name, fs in defs.items():
        for f in fs:
            for callee, tok, nargs in P.calls(prog, f):
                for g in defs.get(callee, ()):
                    lo, hi = P.arity(prog, g)
                    if lo <= nargs <= hi:
                        edges.setdefault(id(f), []).append((g, tok))
    out, reported = [], set()
    byid = {id(f): f for fs in defs.values() for f in fs}

    def walk(start):
        # depth-first search for a path from start back to start
        stack = [(start, [start], None)]
        seen = set()
        while stack:
            f, path, first_tok = stack.pop()
            for g, tok in edges.get(id(f), ()):
                t0 = first_tok if first_tok is not None else tok
                if g is start:
                    return path, t0
                if id(g) not in seen:
                    seen.add(id(g))
                    stack.append((g, path + [g], t0))
        return None

    for fid, f in byid.items():
        r = walk(f)
        if r is None:
            continue
        path, tok = r
        key = frozenset(id(g) for g in path)
        if key in reported:
            continue
        reported.add(key)
        chain = " -> ".join([g.name for g in path] + [f.name])
        out.append(_find(prog, tok, f"recursion ({chain}): Metal does not allow recursive calls"))
    return out


def rule_kernel_params(prog):
    out = []
    toks = prog.tokens
    for f in prog.functions:
        if not f.is_kernel:
            continue
        for span in f.params:
            ts, words = P.param_words(prog, span)
            if not ts or not P.is_pointer_or_ref(words):
                continue
            name = next((toks[k].text for k in reversed(ts) if toks[k].kind == "id"), "?")
            spaces = T.SPACE_WORDS.intersection(words)
            if not spaces:
                out.append(_find(prog, ts[0], f"kernel '{f.name}': parameter '{name}' is a pointer "
                                              f"or reference without an address space; write "
                                              f"device, constant or threadgroup"))
            elif spaces == {"thread"}:
                out.append(_find(prog, ts[0], f"kernel '{f.name}': parameter '{name}' is in the "
                                              f"thread address space; kernel arguments are device, "
                                              f"constant or threadgroup"))
    for m in re.finditer(r"\[\[\s*buffer\s*\(\s*(\d+)\s*\)\s*\]\]", prog.text):
        if int(m.group(1)) > MAX_BUFFER_INDEX:
            f, ln = prog.where(m.start())
            out.append(Finding(f, ln, f"[[buffer({m.group(1)})]]: Metal's buffer indices are "
                                      f"0..{MAX_BUFFER_INDEX}"))
    return out


def rule_simdgroup_matrix(prog):
    out = []
    toks = prog.tokens
    for i in range(len(toks) - 2):
        if toks[i].text == "simdgroup_matrix" and toks[i + 1].text == "<":
            el = toks[i + 2].text
            if (el in T.SCALARS or el in T.VECTOR_TYPES) and el not in ("float", "half") or \
                    el in ("const", "unsigned", "signed"):
                out.append(_find(prog, i, f"simdgroup_matrix<{el}, ...>: the element type must be "
                                          f"float or half"))
    return out


RULES = (rule_includes, rule_forbidden_words, rule_function_pointers, rule_static_locals, rule_program_scope,
         rule_recursion, rule_kernel_params, rule_simdgroup_matrix) + msl_host_rules.RULES


def check_rules(prog):
    """Findings of MSL's language rules over a parsed, preprocessed source."""
    return [f for rule in RULES for f in rule(prog)]
