"""MSL -> C++ for the simulator: a small, line-preserving source translation.

Input is *preprocessed* MSL (see compiler.preprocess: the C preprocessor has already run
with the tile macros, so kernel names and sizes made by macros are visible, and line
markers name the real .metal file). The translation
  - finds the kernels: `kernel void f(...) {...}` definitions and the explicit
    instantiations `template [[host_name("n")]] kernel void f<T>(...);` and
    `template [[host_name("n")]] [[kernel]] decltype(f<T>) f<T>;` (metal/mk_common.h's
    MK_PER_DTYPE), and reads each parameter's role from its attribute ([[buffer(i)]],
    [[threadgroup(i)]], built-ins; an instantiation's from its template);
  - removes every [[...]] attribute (`threadgroup` is an empty macro in C++, so
    [[threadgroup(0)]] would not parse; g++/clang would warn about the others);
  - rewrites what C++ cannot say: `1.0h` half literals, the `constant` address space
    (-> `const`), and threadgroup variables declared in a kernel body (-> references into
    the threadgroup's shared arena, the same offsets in every lane);
  - appends the launch glue (glue.py): one function per kernel that binds buffers and
    built-ins, and the module table the runtime reads (objc/sim/include/mk_sim_abi.h).
Every rewrite keeps the number of newlines, so compiler errors and findings point at
the .metal line. Errors in the source's kernel signatures raise TranslateError with
file:line.
"""
import re
from dataclasses import dataclass, field

from mpskern._native import MAX_BINDINGS
from mpskern.sim.glue import ALIASES3, BUILTINS1, BUILTINS3, glue
from mpskern.sim.msl_tokens import LineMap, blank

FRONTEND_VERSION = 5
MAX_BUFFER_INDEX = MAX_BINDINGS - 1     # Metal: [[buffer(0)]] .. [[buffer(30)]] (objc/mpskern.h)


class TranslateError(Exception):
    pass


_KERNEL = re.compile(r'(?:\[\[\s*kernel\s*\]\]|\bkernel\b)\s*void\s+([A-Za-z_]\w*)\s*')
# `template [[host_name("f_f32")]] [[kernel]] decltype(f<float>) f<float>;` (the form Apple's
# compiler takes without repeating the parameter list; metal/mk_common.h's MK_INSTANTIATE)
_DECLTYPE_INST = re.compile(r'\btemplate\s*\[\[\s*host_name\s*\(\s*"([^"]*)"\s*\)\s*\]\]\s*'
                            r'(?:\[\[\s*kernel\s*\]\]|\bkernel\b)\s*decltype\s*\(\s*([A-Za-z_]\w*)\s*(?=<)')
_ATTR = re.compile(r'\[\[(.*?)\]\]', re.S)
_HALF_LIT = re.compile(r'(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[hH](?![\w.])')
_CONSTANT = re.compile(r'\bconstant\b(\s+const\b)?|\bconst\s+constant\b')
_TG_DECL = re.compile(
    r'(?P<pre>(?:^|(?<=[;{}]))\s*)threadgroup\s+(?P<type>[A-Za-z_][\w:<>,\s]*?)\s+'
    r'(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\];{}]*\]\s*)*);', re.M)
_SYNC = re.compile(r'\b(threadgroup_barrier|simdgroup_barrier|simd_\w+|quad_\w+|'
                   r'simdgroup_multiply\w*)\s*\(')


@dataclass
class Param:
    type: str
    name: str
    attr: str          # "buffer", "threadgroup", or a built-in name
    index: int = -1


@dataclass
class Kernel:
    host_name: str
    callee: str        # C++ expression naming the function (with template arguments)
    params: list
    file: str
    line: int
    max_threads: str = "0"   # [[max_total_threads_per_threadgroup(N)]] (a constant expression)


@dataclass
class Translation:
    text: str
    kernels: list = field(default_factory=list)
    needs_fibers: bool = False


def _match_close(text, pos, open_ch, close_ch):
    """Index just past the bracket matching text[pos] == open_ch."""
    depth = 0
    for i in range(pos, len(text)):
        c = text[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _split_params(s):
    out, depth, cur = [], 0, []
    for c in s:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        out.append("".join(cur))
    return out


def rewrite_types(s):
    s = _ATTR.sub(lambda m: blank(m.group(0)), s)
    return _CONSTANT.sub("const", s)


_TYPE_WORDS = {"const", "volatile", "device", "constant", "threadgroup", "thread", "unsigned",
               "signed", "int", "uint", "float", "half", "bool", "char", "short", "long", "void"}


def _parse_param(raw, where, kname, template=None):
    """A Param from one parameter's text. In an explicit instantiation the name and the
    attribute may be missing: `template` (the definition's Param) supplies them."""
    attrs = [a.strip() for a in _ATTR.findall(raw)]
    decl = _ATTR.sub(" ", raw).strip()
    m = re.match(r"(?s)(.*?)([A-Za-z_]\w*)\s*$", decl)
    unnamed = (not m or not m.group(1).strip() or m.group(2) in _TYPE_WORDS
               or m.group(1).rstrip().endswith("::"))
    if unnamed or (template is not None and not attrs):
        if template is None:
            raise TranslateError(f"{where}: kernel '{kname}': cannot read parameter '{decl}'")
        ptype = " ".join(decl.split()) if unnamed else " ".join(m.group(1).split())
        return Param(rewrite_types(ptype), template.name, template.attr, template.index)
    ptype, pname = " ".join(m.group(1).split()), m.group(2)
    role = None
    for a in attrs:
        am = re.match(r"(buffer|threadgroup)\s*\(\s*(\d+)\s*\)$", a)
        if am:
            role = Param(rewrite_types(ptype), pname, am.group(1), int(am.group(2)))
        elif a in BUILTINS3 or a in BUILTINS1 or a in ALIASES3 or a == "grid_origin":
            role = Param(rewrite_types(ptype), pname, a)
    if role is None:
        raise TranslateError(
            f"{where}: kernel '{kname}': parameter '{pname}' needs an attribute the simulator "
            f"knows ([[buffer(i)]], [[threadgroup(i)]] or a compute built-in); it has "
            f"{', '.join('[[' + a + ']]' for a in attrs) or 'none'}")
    if role.attr == "buffer" and not (0 <= role.index <= MAX_BUFFER_INDEX):
        raise TranslateError(f"{where}: kernel '{kname}': [[buffer({role.index})]] out of range "
                             f"0..{MAX_BUFFER_INDEX} (Metal's buffer indices)")
    if role.attr == "threadgroup" and not (0 <= role.index < 4):
        raise TranslateError(f"{where}: kernel '{kname}': [[threadgroup({role.index})]] out of range 0..3")
    return role


def find_kernels(text, lines):
    kernels = []
    templates = {}     # name -> parameter roles of its template definition
    template_max = {}  # name -> its [[max_total_threads_per_threadgroup]]
    for m in _KERNEL.finditer(text):
        name = m.group(1)
        pos = m.end()
        targs = ""
        if pos < len(text) and text[pos] == "<":
            end = _match_close(text, pos, "<", ">")
            targs = text[pos:end]
            pos = end
            while pos < len(text) and text[pos].isspace():
                pos += 1
        if pos >= len(text) or text[pos] != "(":
            continue
        pend = _match_close(text, pos, "(", ")")
        params_src = text[pos + 1:pend - 1]
        after = text[pend:].lstrip()
        after = _ATTR.sub("", after, count=0).lstrip() if after.startswith("[[") else after
        is_def = after.startswith("{")
        # what precedes the kernel keyword: attributes (host_name), `template`, or `template<...>`
        before = text[:m.start()]
        host = None
        max_threads = None
        b = before.rstrip()
        while b.endswith("]]"):
            start = b.rfind("[[")
            hm = re.search(r'host_name\s*\(\s*"([^"]*)"\s*\)', b[start:])
            if hm:
                host = hm.group(1)
            mt = re.search(r"max_total_threads_per_threadgroup\s*\(([\d\s*+()-]+)\)", b[start:])
            if mt:
                max_threads = mt.group(1).strip()
            b = b[:start].rstrip()
        hm = re.search(r'host_name\s*\(\s*"([^"]*)"\s*\)', text[m.start():pos])
        if hm:
            host = hm.group(1)
        is_template_def = b.endswith(">") and re.search(r"\btemplate\s*<", b[-400:]) is not None \
            and not re.search(r"\btemplate\s*$", b)
        is_instantiation = re.search(r"\btemplate\s*$", b) is not None
        fname, line = lines.at(m.start())
        where = f"{fname}:{line}"
        raw = [p for p in _split_params(params_src) if p.strip() and p.strip() != "void"]
        if is_template_def:
            try:
                templates[name] = [_parse_param(p, where, name) for p in raw]
            except TranslateError:
                templates[name] = None      # reported if an instantiation needs it
            template_max[name] = max_threads
            continue
        tmpl = None
        if is_instantiation:
            if not host:
                raise TranslateError(f"{where}: explicit instantiation of kernel '{name}' needs "
                                     f"[[host_name(\"...\")]]")
            tmpl = templates.get(name)
            if tmpl is not None and len(tmpl) != len(raw):
                raise TranslateError(f"{where}: kernel '{host}': {len(raw)} parameters, the "
                                     f"template '{name}' has {len(tmpl)}")
        elif not is_def:
            continue     # a plain declaration
        params = [_parse_param(p, where, host or name, tmpl[i] if tmpl else None)
                  for i, p in enumerate(raw)]
        if max_threads is None and is_instantiation:
            max_threads = template_max.get(name)
        kernels.append(Kernel(host or name, name + targs, params, fname, line, max_threads or "0"))
    kernels += _decltype_instantiations(text, lines, templates, template_max)
    seen = set()
    for k in kernels:
        if k.host_name in seen:
            raise TranslateError(f"{k.file}:{k.line}: two kernels named '{k.host_name}'")
        seen.add(k.host_name)
    return kernels


def _decltype_instantiations(text, lines, templates, template_max):
    """Kernels instantiated as `template [[host_name("n")]] [[kernel]] decltype(f<A>) f<A>;`:
    the parameters' roles are the template definition's (the glue takes their types from
    the instantiated function itself, see glue)."""
    out = []
    for m in _DECLTYPE_INST.finditer(text):
        host, name = m.group(1), m.group(2)
        end = _match_close(text, m.end(), "<", ">")
        targs = text[m.end():end]
        tail = re.match(r"\s*\)\s*" + re.escape(name) + r"\s*" + re.escape(targs) + r"\s*;",
                        text[end:])
        fname, line = lines.at(m.start())
        if end < 0 or not tail:
            raise TranslateError(f"{fname}:{line}: kernel '{host}': expected "
                                 f"decltype({name}<...>) {name}<...>; with the same arguments")
        if templates.get(name) is None:
            raise TranslateError(f"{fname}:{line}: kernel '{host}' instantiates '{name}', which "
                                 f"is not a template kernel defined above with readable parameters")
        out.append(Kernel(host, name + targs, templates[name], fname, line,
                          template_max.get(name) or "0"))
    return out


def _rewrite_tg_decls(text):
    def sub(m):
        t = " ".join(m.group("type").split())
        if t in ("const", "struct") or "=" in m.group(0):
            return m.group(0)
        dims = "".join(m.group("dims").split())
        rep = (f'{m.group("pre")}auto &{m.group("name")} = '
               f'__mk_tg<{t}{dims}>("{m.group("name")}", __FILE__, __LINE__);')
        return rep + "\n" * (m.group(0).count("\n") - rep.count("\n"))
    return _TG_DECL.sub(sub, text)


_AGGREGATE = re.compile(r'\b(struct|class|union)\s+([A-Za-z_]\w*)\s*(?::[^{};()]*)?\{')
_TYPEDEF_ANON = re.compile(r'\btypedef\s+(struct|union)\s*\{')
_ANON_UNION = re.compile(r'\bunion\s*\{')


def _union_assign(text):
    """Every union, and every struct/class holding an anonymous union, gets a byte-copy
    operator= (objc/sim/include/mk_sim_vec.h __mk_union_assign): MSL assigns them when they
    hold vectors, C++ deletes their operator= (ours is user-provided). A `typedef union {`
    gets a name to hang it on. Aggregates declaring their own operator= are left alone."""
    n = iter(range(1 << 30))
    text = _TYPEDEF_ANON.sub(lambda m: f"typedef {m.group(1)} __mk_anon{next(n)} {{", text)
    at = []
    for m in _AGGREGATE.finditer(text):
        end = _match_close(text, m.end() - 1, "{", "}")
        body = text[m.end():end - 1] if end > 0 else ""
        if (m.group(1) == "union" or _ANON_UNION.search(body)) and \
                not re.search(r"\boperator\s*=\s*\(", body):
            at.append((m.end(), f" __mk_union_assign({m.group(2)}) "))
    for pos, ins in reversed(at):
        text = text[:pos] + ins + text[pos:]
    return text


def rewrite(pre, constant="const"):
    """The line-preserving rewrites C++ needs: attributes blanked, `1.0h` -> `half(1.0)`,
    the `constant` address space -> `constant` (None: kept), threadgroup variables in
    kernel bodies -> references into the threadgroup arena, unions given MSL's assignment."""
    text = _union_assign(_ATTR.sub(lambda m: blank(m.group(0)), pre))
    text = _HALF_LIT.sub(lambda m: f"half({m.group(1)})", text)
    if constant is not None:
        text = _CONSTANT.sub(constant, text)
    return _rewrite_tg_decls(text)


def translate(pre, *, checked=False, profiled=False):
    """C++ for preprocessed MSL `pre`: a Translation (text, kernels, needs_fibers).
    profiled: the glue of a profiling build (mpskern/sim/profile_build.py)."""
    lines = LineMap(pre)
    kernels = find_kernels(pre, lines)
    text = rewrite(pre)
    needs_fibers = _SYNC.search(text) is not None
    head = "#include <metal_stdlib>\nusing namespace metal;\n"
    body = head + text + glue(kernels, needs_fibers, checked, profiled)
    return Translation(body, kernels, needs_fibers)
