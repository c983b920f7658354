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
  - appends the launch glue: one function per kernel that binds buffers and built-ins,
    and the module table the runtime reads (objc/sim/include/mk_sim_abi.h).
Every rewrite keeps the number of newlines, so compiler errors and findings point at
the .metal line. Errors in the source's kernel signatures raise TranslateError with
file:line.
"""
import re
from dataclasses import dataclass, field

from mpskern._native import MAX_BINDINGS

FRONTEND_VERSION = 4
MAX_BUFFER_INDEX = MAX_BINDINGS - 1     # Metal: [[buffer(0)]] .. [[buffer(30)]] (objc/mpskern.h)


class TranslateError(Exception):
    pass


BUILTINS3 = {
    "thread_position_in_grid", "threadgroup_position_in_grid", "thread_position_in_threadgroup",
    "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid",
    "dispatch_threads_per_threadgroup",
}
BUILTINS1 = {
    "thread_index_in_threadgroup": "thread_index_in_threadgroup",
    "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
    "thread_index_in_simdgroup": "thread_index_in_simdgroup",
    "threads_per_simdgroup": "threads_per_simdgroup",
    "thread_execution_width": "threads_per_simdgroup",
    "simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "quadgroup_index_in_threadgroup": "quadgroup_index_in_threadgroup",
    "thread_index_in_quadgroup": "thread_index_in_quadgroup",
}
ALIASES3 = {"grid_size": "threads_per_grid"}

_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"[^\n]*$', re.M)
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


class _Lines:
    """Maps an offset in preprocessed text to (file, line) using its line markers."""

    def __init__(self, text):
        self.marks = [(m.end() + 1, m.group(2), int(m.group(1))) for m in _MARKER.finditer(text)]
        self.text = text

    def at(self, pos):
        start, fname, line = 0, "<source>", 1
        for off, f, ln in self.marks:
            if off > pos:
                break
            start, fname, line = off, f, ln
        return fname, line + self.text.count("\n", start, pos)


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


def _blank(s):
    """Spaces for s, keeping its newlines."""
    return re.sub(r"[^\n]", " ", s)


def rewrite_types(s):
    s = _ATTR.sub(lambda m: _blank(m.group(0)), s)
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


def _arg_expr(p, i):
    """The glue's argument for parameter i (role from `p`); its type is read off the
    kernel's own function type (F), so template parameters need no textual substitution."""
    t = f"__mk_arg<F, {i}>::type"
    if p.attr == "buffer":
        return f"__mk_bind<{t}>(B[{p.index}])"
    if p.attr == "threadgroup":
        return f"({t})(TG[{p.index}])"
    if p.attr == "grid_origin":
        return f"__mk_builtin3<{t}>(__mk_zero3)"
    name = ALIASES3.get(p.attr, p.attr)
    if name in BUILTINS3:
        return f"__mk_builtin3<{t}>(L->{name})"
    return f"__mk_builtin1<{t}>(L->{BUILTINS1[name]})"


# The type of parameter I of a function pointer type F.
_ARG_TRAIT = """template <class F, int I> struct __mk_arg;
template <class R, class H, class... A> struct __mk_arg<R (*)(H, A...), 0> { typedef H type; };
template <class R, class H, class... A, int I> struct __mk_arg<R (*)(H, A...), I> {
  typedef typename __mk_arg<R (*)(A...), I - 1>::type type; };"""


def _c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def glue(kernels, needs_fibers, checked, profiled=False):
    out = ['\n# 1 "<mpskern glue>"',
           "static const uint32_t __mk_zero3[3] = {0, 0, 0};", _ARG_TRAIT]
    for i, k in enumerate(kernels):
        args = ",\n      ".join(_arg_expr(p, j) for j, p in enumerate(k.params))
        out.append(f'#line {k.line} {_c_string(k.file)}')
        out.append(f"static void __mk_glue_{i}(void *const *B, void *const *TG, const mk_sim_lane *L) {{"
                   f" (void)B; (void)TG; (void)L; typedef decltype(&{k.callee}) F;"
                   f" {k.callee}({args}); }}")
    out.append('# 1 "<mpskern glue>"')
    rows = []
    for i, k in enumerate(kernels):
        refs = [(j, p) for j, p in enumerate(k.params)
                if p.attr == "buffer" and p.type.rstrip().endswith("&")]
        bufs = sum(1 << p.index for p in k.params if p.attr == "buffer")
        byts = sum(1 << p.index for _, p in refs)
        tgs = sum(1 << p.index for p in k.params if p.attr == "threadgroup")
        sizes = ", ".join(f"{{{p.index}u, (uint32_t)sizeof(std::remove_reference<"
                          f"__mk_arg<decltype(&{k.callee}), {j}>::type>::type)}}"
                          for j, p in refs)
        out.append(f"static const mk_sim_bytes_param __mk_bytes_{i}[] = {{{sizes or '{0u, 0u}'}}};")
        rows.append(f"  {{{_c_string(k.host_name)}, __mk_glue_{i}, {_c_string(k.file)}, {k.line}, "
                    f"{bufs}u, {byts}u, {tgs}u, (uint32_t)({k.max_threads}), {len(refs)}u, __mk_bytes_{i}}},")
    if not rows:
        rows.append('  {"", 0, "", 0, 0u, 0u, 0u, 0u, 0u, 0},')
    out.append("static const mk_sim_kernel __mk_kernels[] = {\n" + "\n".join(rows) + "\n};")
    # profiling: the site and block counts are defined by mpskern/sim/profile_build.py
    # once it has instrumented the library's IR
    out.append(f"static {'' if profiled else 'const '}mk_sim_module __mk_module = {{MK_SIM_ABI_VERSION, "
               f"{len(kernels)}, __mk_kernels, {int(needs_fibers)}, {int(checked)}, {int(profiled)}, 0, 0}};")
    if profiled:
        out.append('extern "C" const uint32_t __mk_prof_nsites, __mk_prof_nblocks;')
    out.append('extern "C" __attribute__((visibility("default"), no_sanitize_thread)) const mk_sim_module *'
               "mk_sim_module_init(const mk_sim_rt *rt) {\n"
               "  if (!rt || rt->abi != MK_SIM_ABI_VERSION) return 0;\n"
               "  __mk_rt = rt;\n" +
               ("  __mk_module.nsites = __mk_prof_nsites;\n  __mk_module.nblocks = __mk_prof_nblocks;\n"
                if profiled else "") +
               "  return &__mk_module;\n}")
    if checked:
        out.append(TSAN_SHIM)
    elif profiled:
        out.append(PROFILE_SHIM + TSAN_SHIM.replace(
            "#define MK_HOOK(a, n, w) if (__mk_rt) __mk_rt->check_access(a, n, w, __builtin_return_address(0))",
            "#define MK_HOOK(a, n, w) if (__mk_rt) __mk_rt->profile_access(a, 0, 0, (n) | (w) << 8)"))
    return "\n".join(out) + "\n"


# Checking mode: the library is compiled with -fsanitize=thread for its instrumentation
# only; these definitions (not instrumented themselves) forward to the runtime.
TSAN_SHIM = r'''
#define MK_NS __attribute__((no_sanitize_thread, visibility("hidden")))
extern "C" {
#define MK_HOOK(a, n, w) if (__mk_rt) __mk_rt->check_access(a, n, w, __builtin_return_address(0))
#define MK_RW(n) \
  MK_NS void __tsan_read##n(void *a) { MK_HOOK(a, n, 0); } \
  MK_NS void __tsan_write##n(void *a) { MK_HOOK(a, n, 1); } \
  MK_NS void __tsan_unaligned_read##n(void *a) { MK_HOOK(a, n, 0); } \
  MK_NS void __tsan_unaligned_write##n(void *a) { MK_HOOK(a, n, 1); } \
  MK_NS void __tsan_volatile_read##n(void *a) { MK_HOOK(a, n, 0); } \
  MK_NS void __tsan_volatile_write##n(void *a) { MK_HOOK(a, n, 1); }
MK_RW(1) MK_RW(2) MK_RW(4) MK_RW(8) MK_RW(16)
MK_NS void __tsan_read_range(void *a, unsigned long n) { MK_HOOK(a, (unsigned)n, 0); }
MK_NS void __tsan_write_range(void *a, unsigned long n) { MK_HOOK(a, (unsigned)n, 1); }
// clang instruments memcpy/memset/memmove through these (gcc calls the libc functions)
MK_NS void *__tsan_memcpy(void *d, const void *s, unsigned long n) {
  MK_HOOK((void *)s, (unsigned)n, 0); MK_HOOK(d, (unsigned)n, 1); return __builtin_memcpy(d, s, n); }
MK_NS void *__tsan_memmove(void *d, const void *s, unsigned long n) {
  MK_HOOK((void *)s, (unsigned)n, 0); MK_HOOK(d, (unsigned)n, 1); return __builtin_memmove(d, s, n); }
MK_NS void *__tsan_memset(void *d, int c, unsigned long n) {
  MK_HOOK(d, (unsigned)n, 1); return __builtin_memset(d, c, n); }
MK_NS void __tsan_func_entry(void *) {}
MK_NS void __tsan_func_exit(void) {}
MK_NS void __tsan_init(void) {}
MK_NS void __tsan_vptr_update(void **, void *) {}
MK_NS void __tsan_vptr_read(void **) {}
MK_NS void __tsan_atomic_thread_fence(int) {}
MK_NS void __tsan_atomic_signal_fence(int) {}
#define MK_AT(n, T) \
  MK_NS T __tsan_atomic##n##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_RELAXED); } \
  MK_NS void __tsan_atomic##n##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_exchange(volatile T *a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_sub(volatile T *a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_and(volatile T *a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_or(volatile T *a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_xor(volatile T *a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_nand(volatile T *a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_RELAXED); } \
  MK_NS int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) { \
    return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); } \
  MK_NS int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) { \
    return __atomic_compare_exchange_n(a, c, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int) { \
    __atomic_compare_exchange_n(a, &c, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return c; }
MK_AT(8, unsigned char) MK_AT(16, unsigned short) MK_AT(32, unsigned int) MK_AT(64, unsigned long long)
}
'''


# Profiling mode: profile_build.py replaces the instrumentation's __tsan_* calls with
# these (site, merge key, size/direction as arguments) and calls __mk_prof_bb at the start of
# every basic block; accesses it leaves to the __tsan_* hooks count as site 0.
PROFILE_SHIM = r'''
#define MK_PNS __attribute__((no_sanitize_thread, visibility("hidden"), used, noinline))
extern "C" {
MK_PNS void __mk_prof_acc(void *a, uint32_t site, uint32_t key, uint32_t info) {
  __mk_rt->profile_access(a, site, key, info); }
MK_PNS void __mk_prof_bb(uint32_t block) { __mk_rt->profile_block(block); }
}
'''


def rewrite(pre, constant="const"):
    """The line-preserving rewrites C++ needs: attributes blanked, `1.0h` -> `half(1.0)`,
    the `constant` address space -> `constant` (None: kept), threadgroup variables in
    kernel bodies -> references into the threadgroup arena."""
    text = _ATTR.sub(lambda m: _blank(m.group(0)), pre)
    text = _HALF_LIT.sub(lambda m: f"half({m.group(1)})", text)
    if constant is not None:
        text = _CONSTANT.sub(constant, text)
    return _rewrite_tg_decls(text)


def translate(pre, *, checked=False, profiled=False):
    """C++ for preprocessed MSL `pre`: a Translation (text, kernels, needs_fibers).
    profiled: the glue of a profiling build (mpskern/sim/profile_build.py)."""
    lines = _Lines(pre)
    kernels = find_kernels(pre, lines)
    text = rewrite(pre)
    needs_fibers = _SYNC.search(text) is not None
    head = "#include <metal_stdlib>\nusing namespace metal;\n"
    body = head + text + glue(kernels, needs_fibers, checked, profiled)
    return Translation(body, kernels, needs_fibers)
