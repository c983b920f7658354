"""What a user's MSL kernel declares, and the call's arguments checked against it, before
anything runs (mpskern.metal_kernel): Metal itself checks none of this, so a float32 array
bound to `device half*` would compute garbage, an extra argument would be ignored and a
kernel's writes to a `bytes` argument would be lost.

    signature(source, macros, name) -> [Param] or None   (the front-end's parse, cached)
    check(params, args, kernel)       raises TypeError naming [[buffer(i)]], the parameter
                                      and the fix
    threadgroup_lengths(params, threadgroup_memory, kernel) -> [bytes per [[threadgroup(i)]]]

The signature comes from mpskern/sim/frontend.py (the simulator's own parser) over the
preprocessed source, so it sees what the compiler sees (macros expanded, template
instantiations with their concrete types). Without a host C++ preprocessor (a Mac without
the command line tools) signature() is None and only Metal's own checks remain.
"""
import functools
import re

import numpy as np

# MSL scalar type -> numpy dtype (vectors and packed vectors are arrays of their scalar)
SCALARS = {
    "float": np.float32, "half": np.float16, "int": np.int32, "uint": np.uint32,
    "short": np.int16, "ushort": np.uint16, "char": np.int8, "uchar": np.uint8,
    "bool": np.bool_, "long": np.int64, "ulong": np.uint64,
    "int8_t": np.int8, "uint8_t": np.uint8, "int16_t": np.int16, "uint16_t": np.uint16,
    "int32_t": np.int32, "uint32_t": np.uint32, "int64_t": np.int64, "uint64_t": np.uint64,
    "unsigned int": np.uint32, "unsigned short": np.uint16, "unsigned char": np.uint8,
    "signed char": np.int8, "unsigned long": np.uint64, "unsigned": np.uint32,
    "atomic_int": np.int32, "atomic_uint": np.uint32, "atomic_float": np.float32,
    "atomic<int>": np.int32, "atomic<uint>": np.uint32, "atomic<float>": np.float32,
}
_QUALIFIERS = {"const", "volatile", "device", "constant", "threadgroup", "thread", "restrict",
               "__restrict", "__restrict__"}
_VECTOR = re.compile(r"(?:packed_)?([a-z]+?)([234])$")


class Param:
    """One [[buffer(i)]] or [[threadgroup(i)]] parameter, as the kernel declares it."""

    def __init__(self, p):
        self.name, self.attr, self.index = p.name, p.attr, p.index
        self.decl = _declared(p.type)
        words = p.type.replace("*", " * ").replace("&", " & ").split()
        self.pointer = "*" in words
        self.reference = "&" in words
        # the front-end turns `constant` into `const`: a const pointer or reference that is
        # not `device` (nor threadgroup) was `constant`
        if "threadgroup" in words:
            self.space = "threadgroup"
        elif "device" in words:
            self.space = "device"
        else:
            self.space = "constant"
        self.const = "const" in words or self.space == "constant"
        base = " ".join(w for w in words if w not in _QUALIFIERS and w not in "*&")
        base = base.replace("metal::", "").replace(" ", "") if "<" in base else base.replace("metal::", "")
        self.type_name = base
        m = _VECTOR.match(base)
        self.dtype = SCALARS.get(base) or (SCALARS.get(m.group(1)) if m else None)
        self.dtype = np.dtype(self.dtype) if self.dtype is not None else None

    @property
    def writable(self):
        return self.space == "device" and not self.const

    def where(self):
        return f"[[{self.attr}({self.index})]] '{self.name}' (`{self.decl}`)"


def _declared(ctype):
    """The parameter's type as the user wrote it, near enough for a message."""
    t = " ".join(ctype.split())
    return t if "device" in t or "threadgroup" in t else re.sub(r"\bconst\b", "constant", t, count=1)


@functools.lru_cache(maxsize=256)
def signature(source, macros, name):
    """[Param] of kernel `name` (buffers first, by index; then threadgroup parameters), or
    None when it cannot be read here (no preprocessor, a source the front-end cannot
    parse: then the compile that follows reports the problem)."""
    from mpskern.sim import compiler, frontend, strict
    from mpskern.sim.msl_tokens import LineMap
    ok, _ = compiler.available()
    if not ok:
        return None
    try:
        pre = compiler.preprocess(strict.guard_includes(source), dict(macros))
        kernels = frontend.find_kernels(pre, LineMap(pre))
    except Exception:  # noqa: BLE001 - the build reports it, with the compiler's words
        return None
    for k in kernels:
        if k.host_name == name:
            ps = [Param(p) for p in k.params if p.attr in ("buffer", "threadgroup")]
            return sorted(ps, key=lambda p: (p.attr != "buffer", p.index))
    return None


def _what(a):
    if isinstance(a, np.ndarray):
        return f"a {'read-only ' if not a.flags.writeable else ''}{a.dtype} array"
    if isinstance(a, np.generic):
        return f"a numpy {a.dtype} scalar"
    return f"a {type(a).__name__}"


def _suggest_scalar(p, a):
    """How to pass Python value `a` for parameter p."""
    if p.dtype is not None:
        return f"np.{p.dtype.name}({a!r})" if p.dtype != np.bool_ else f"np.bool_({a!r})"
    return "a numpy scalar of the parameter's type, or a structured scalar / bytes for a struct"


def check(params, args, kernel):
    """Refuse arguments that do not fit the kernel's [[buffer(i)]] parameters: count,
    element type, address space (device pointers need arrays) and writability."""
    bufs = {p.index: p for p in params if p.attr == "buffer"}
    listing = ", ".join(f"[[buffer({i})]] {bufs[i].name}" for i in sorted(bufs)) or "none"
    for i, a in enumerate(args):
        p = bufs.get(i)
        if p is None:
            raise TypeError(f"kernel '{kernel}': argument {i} would bind [[buffer({i})]], which the "
                            f"kernel does not declare (its buffers: {listing}); remove the argument "
                            f"or add the parameter")
        if isinstance(a, (bool, int, float)):
            raise TypeError(f"kernel '{kernel}': argument {i} for {p.where()} is a Python "
                            f"{type(a).__name__}; pass a numpy scalar, {_suggest_scalar(p, a)}, so its type is explicit")
        if p.writable and not isinstance(a, np.ndarray):
            raise TypeError(f"kernel '{kernel}': argument {i} for {p.where()} is {_what(a)}, but the "
                            f"kernel may write this parameter and the writes would be lost; pass a "
                            f"numpy array (e.g. np.frombuffer(bytearray(...), np.uint8)), or declare "
                            f"it `const device` / `constant` if the kernel only reads it")
        if p.writable and not a.flags.writeable:
            raise TypeError(f"kernel '{kernel}': argument {i} for {p.where()} is a read-only array, but "
                            f"the kernel may write this parameter and the writes would be lost; pass "
                            f"a writable array (a.copy()) or declare it `const device {p.type_name}*`")
        if p.pointer and isinstance(a, np.generic) and not isinstance(a, np.void):
            raise TypeError(f"kernel '{kernel}': argument {i} for {p.where()} is {_what(a)}, but the "
                            f"parameter is a pointer (an array); pass a numpy array, or declare it "
                            f"`constant {p.type_name}&` for one value")
        dt = getattr(a, "dtype", None)
        if p.dtype is not None and dt is not None and dt.fields is None and dt != p.dtype:
            fix = (f"pass {p.name}.astype(np.{p.dtype.name})" if isinstance(a, np.ndarray)
                   else f"pass np.{p.dtype.name}(value)")
            raise TypeError(f"kernel '{kernel}': argument {i} for {p.where()} is {_what(a)}, but the "
                            f"parameter's element type is {p.type_name} ({p.dtype.name}); {fix}, or "
                            f"declare the parameter with {_msl_name(dt)}")
    missing = [p for i, p in sorted(bufs.items()) if i >= len(args)]
    if missing:
        raise TypeError(f"kernel '{kernel}': {len(args)} argument(s) given, the kernel declares "
                        f"{len(bufs)} buffers ({listing}); missing: "
                        + ", ".join(p.where() for p in missing))


def _msl_name(dt):
    for k, v in SCALARS.items():
        if np.dtype(v) == dt:
            return k
    return f"a type of {dt.itemsize} bytes"


def threadgroup_lengths(params, threadgroup_memory, kernel, max_allocations=4):
    """Bytes for each [[threadgroup(i)]] (a list by index), from threadgroup_memory: an int
    (for [[threadgroup(0)]]), a sequence (by index) or a dict {index: bytes}. Every
    [[threadgroup(i)]] the kernel declares (where the signature is known) needs one."""
    tg = {p.index: p for p in params or () if p.attr == "threadgroup"}
    if threadgroup_memory is None:
        given = {}
    elif isinstance(threadgroup_memory, (int, np.integer)) and not isinstance(threadgroup_memory, bool):
        given = {0: threadgroup_memory}
    elif isinstance(threadgroup_memory, dict):
        given = dict(threadgroup_memory)
    elif isinstance(threadgroup_memory, (list, tuple)):
        given = dict(enumerate(threadgroup_memory))
    else:
        raise TypeError(f"threadgroup_memory must be bytes for [[threadgroup(0)]] (an int), a list "
                        f"of bytes by index or a dict {{index: bytes}}; got "
                        f"{type(threadgroup_memory).__name__}")
    for i, n in given.items():
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= i < max_allocations:
            raise ValueError(f"threadgroup_memory: index {i!r} is not a [[threadgroup(i)]] index "
                             f"0..{max_allocations - 1}")
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise ValueError(f"threadgroup_memory[{i}] must be a number of bytes >= 0, got {n!r}")
        if params is not None and i not in tg:
            have = ", ".join(p.where() for p in tg.values()) or "none"
            raise TypeError(f"kernel '{kernel}': threadgroup_memory gives [[threadgroup({i})]], which the "
                            f"kernel does not declare (its threadgroup parameters: {have})")
    for i, p in sorted(tg.items()):
        if i not in given:
            raise TypeError(f"kernel '{kernel}': {p.where()} needs its length: pass "
                            f"threadgroup_memory={{{i}: nbytes}} (e.g. 256 * 4 for 256 floats)")
        if p.dtype is not None and given[i] % p.dtype.itemsize:
            raise ValueError(f"kernel '{kernel}': threadgroup_memory[{i}] = {given[i]} bytes is not a "
                             f"whole number of {p.type_name} ({p.dtype.itemsize} bytes)")
    n = max(given) + 1 if given else 0
    return [int(given.get(i, 0)) for i in range(n)]
