"""Cython's view of the C ABI (objc/mpskern.h, metal/mk_args.h): mpskern/_abi.pxd, by hand, and
for the kernel families what setup.py writes from mk_args.h's MK_KERNELS list
(objc/cython_kernels.py: the structs and mk_cpu_/mk_mps_ entry points of mpskern/_kernels.pxi).
Cython trusts it: a field it lacks is never written (left uninitialised), a wrong type is
converted wrongly. Checks that it says exactly what the headers say:

  1. text: the headers as the C preprocessor expands them (the entry points MK_KERNELS
     declares) and the Cython declarations (hand + generated) read into one model (structs
     with their fields, types and order; function prototypes; enumerators and macros) and
     compared; the generator refuses what it cannot declare;
  2. layout: a C program built against the real headers prints sizeof and offsetof of every
     field the declarations name; they must tile each struct with no gap (a field both
     readers missed would show as one) and be where their order and types put them;
  3. the built module: every argument struct packed by mpskern._native from distinct
     values reads back field by field in the declared order and types, at the C struct's
     size; its op table is the one the headers give (a stale build fails).
Planted drifts below prove each kind of difference is found.
"""
import re
import runpy
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from mpskern import _native

ROOT = Path(__file__).resolve().parent.parent
HEADERS = (ROOT / "metal" / "mk_args.h", ROOT / "objc" / "mpskern.h")
PXD = ROOT / "mpskern" / "_abi.pxd"
GEN = runpy.run_path(str(ROOT / "objc" / "cython_kernels.py"))    # what setup.py runs
SIZES = {"char": 1, "int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "double": 8,
         "uint64_t": 8, "size_t": 8}


# ------------------------------------------------------------------------------ the model
_WORDS = {"const", "unsigned", "signed", "struct", "enum", "void", "char", "int", "float",
          "double", "long", "short"}


def _type(decl, typedefs):
    """(normalised type, name) of one declaration: 'const char *const *macros' ->
    ('const char*const*', 'macros'); 'char name[128]' -> ('char[128]', 'name'); typedef
    names resolved (mk_i32 -> int32_t)."""
    tokens = re.findall(r"\w+|\*|\[\s*\w+\s*\]", decl)
    dims = "".join(t.replace(" ", "") for t in tokens if t.startswith("["))
    tokens = [t for t in tokens if not t.startswith("[")]
    name = ""
    if len(tokens) >= 2 and tokens[-1] != "*" and tokens[-1] not in _WORDS:
        name = tokens.pop()
    typ = re.sub(r"\s*\*\s*", "*", " ".join(typedefs.get(t, t) for t in tokens))
    return typ + dims, name


class Model:
    def __init__(self):
        self.structs = {}      # name -> [(field, type)], None when opaque
        self.functions = {}    # name -> (return type, (parameter types))
        self.constants = set()  # macros and enumerators
        self.enums = {}        # enum type -> (enumerators)
        self.values = {}       # macro -> its value text

    def __repr__(self):
        return f"<Model {len(self.structs)} structs, {len(self.functions)} functions>"


def _fields(body, typedefs):
    out = []
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        first, *more = [p.strip() for p in decl.split(",")]
        typ, name = _type(first, typedefs)
        out.append((name, typ))
        base = typ.rstrip("*").split("[")[0]
        for extra in more:               # "int32_t a, b, c": the others share the base type
            t, n = _type(base + " " + extra, typedefs)
            out.append((n, t))
    return out


def _params(text, typedefs):
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if parts == ["void"]:
        return ()
    return tuple(_type(p, typedefs)[0] for p in parts)


def read_c(texts):
    """The model of C headers (comments and preprocessor conditionals ignored: the
    non-Metal branch of mk_args.h comes last, so its typedefs win)."""
    m = Model()
    typedefs = {}
    for text in texts:
        text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
        for name, value in re.findall(r"^\s*#\s*define\s+(MK_\w+)[ \t]+([^\n]+)", text, re.M):
            m.constants.add(name)
            m.values[name] = value.strip()
        text = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)   # (continued lines too)
        for a, b in re.findall(r"\btypedef\s+([\w ]+?)\s+(\w+)\s*;", text):
            if not a.startswith(("struct", "enum")):
                typedefs[b] = a
            else:
                m.structs.setdefault(b, None)           # typedef struct mk_device mk_device;
        for body, name in re.findall(r"typedef\s+struct\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
            m.structs[name] = _fields(body, typedefs)
        for body, name in re.findall(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
            names = tuple(e.split("=")[0].strip() for e in body.split(",") if e.strip())
            m.enums[name] = names
            m.constants.update(names)
        flat = re.sub(r"typedef[^;]*?\{.*?\}[^;]*;", " ", text, flags=re.S)
        for ret, name, params in re.findall(r"([A-Za-z_][\w \*]*?)\s*\b(mk_\w+)\s*\(([^)]*)\)\s*;",
                                            flat):
            m.functions[name] = (_type(ret + " x", typedefs)[0], _params(params, typedefs))
    return m


def read_pxd(text):
    """The model of _abi.pxd's `cdef extern from` blocks."""
    m = Model()
    lines = [ln.split("#")[0].rstrip() for ln in text.splitlines()]
    i = 0
    while i < len(lines):
        ln = lines[i].strip()
        i += 1
        sm = re.fullmatch(r"ctypedef\s+(struct|enum)\s+(\w+)\s*:", ln)
        if sm:
            body = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" " * 8)):
                body.append(lines[i].strip())
                i += 1
            if sm.group(1) == "enum":
                names = tuple(n.strip() for n in " ".join(body).split(",") if n.strip())
                m.enums[sm.group(2)] = names
                m.constants.update(names)
            elif body and [b for b in body if b] == ["pass"]:
                m.structs[sm.group(2)] = None
            else:
                m.structs[sm.group(2)] = _fields(";".join(b for b in body if b), {})
            continue
        if re.fullmatch(r"enum\s*:\s*(\w+)", ln):
            m.constants.add(re.fullmatch(r"enum\s*:\s*(\w+)", ln).group(1))
            continue
        fm = re.match(r"([A-Za-z_][\w \*]*?)\s*\b(mk_\w+)\s*\(", ln)
        if fm:
            sig = ln
            while sig.count("(") > sig.count(")"):
                sig += " " + lines[i].strip()
                i += 1
            params = sig[sig.index("(") + 1:sig.rindex(")")]
            m.functions[fm.group(2)] = (_type(fm.group(1) + " x", {})[0], _params(params, {}))
            continue
        cm = re.fullmatch(r"int\s+(MK_\w+(?:\s*,\s*MK_\w+)*)", ln)
        if cm:
            m.constants.update(n.strip() for n in cm.group(1).split(","))
    return m


def drift(c, pxd):
    """Every way the pxd's model differs from the headers' (empty: in step)."""
    out = []
    for name, fields in pxd.structs.items():
        if name not in c.structs:
            out.append(f"struct {name}: not in the headers")
        elif fields is None:
            if c.structs[name] is not None:
                out.append(f"struct {name}: opaque in _abi.pxd, has fields in the headers")
        elif fields != c.structs[name]:
            out.append(f"struct {name}: _abi.pxd has {fields}, the headers {c.structs[name]}")
    for name in c.structs:
        if name.endswith("_args") and name not in pxd.structs:
            out.append(f"struct {name}: in metal/mk_args.h, not in _abi.pxd")
    for name, sig in pxd.functions.items():
        if name not in c.functions:
            out.append(f"function {name}: not in the headers")
        elif sig != c.functions[name]:
            out.append(f"function {name}: _abi.pxd says {sig}, the headers {c.functions[name]}")
    for name, values in pxd.enums.items():
        if c.enums.get(name) != values:
            out.append(f"enum {name}: _abi.pxd has {values}, the headers {c.enums.get(name)}")
    for name in sorted(pxd.constants - c.constants):
        out.append(f"constant {name}: not in the headers")
    return out


def preprocessed(mk_args, mpskern_h):
    """The two headers' text as `cc -E -dD` expands them (macros kept, MK_KERNELS's entry
    points written out), without what the system headers they include add."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "mk_args.h").write_text(mk_args)
        (Path(d) / "mpskern.h").write_text(mpskern_h)
        out = subprocess.run(["cc", "-E", "-dD", "-I", d, str(Path(d) / "mpskern.h")], check=True,
                             capture_output=True, text=True).stdout
    keep, ours = [], False
    for line in out.splitlines():
        m = re.match(r'#\s*\d+\s+"([^"]*)"', line)
        if m:
            ours = Path(m.group(1)).name in ("mk_args.h", "mpskern.h")
        elif ours:
            keep.append(line)
    return "\n".join(keep) + "\n"


def generated(mk_args):
    """The declarations setup.py writes for the kernel families of mk_args.h's text."""
    return GEN["declarations"](GEN["families"](mk_args))


def c_model(mk_args=None, mpskern_h=None):
    """The headers' model: as written, with the functions as the preprocessor declares them."""
    texts = [mk_args or HEADERS[0].read_text(), mpskern_h or HEADERS[1].read_text()]
    m = read_c(texts)
    m.functions.update(read_c([preprocessed(*texts)]).functions)
    return m


def pxd_model(pxd=None, gen=None):
    return read_pxd((pxd or PXD.read_text()) + "\n" + (gen or generated(HEADERS[0].read_text())))


def models():
    return c_model(), pxd_model()


# ------------------------------------------------------------------------------ 1. text
def test_the_readers_see_the_abi():
    c, pxd = models()
    assert {"mk_gemm_args", "mk_dispatch", "mk_device_info"} <= set(c.structs)
    assert c.structs["mk_dispatch"][-1] == ("bindings", "mk_binding[MK_MAX_BINDINGS]")
    assert c.functions["mk_cpu_gemm"] == ("mk_status", ("const mk_gemm_args*", "int",
                                                        "const void*", "const void*",
                                                        "const void*", "void*"))
    assert pxd.functions["mk_run"][1][1] == "const mk_dispatch*"
    assert "MK_MAX_BINDINGS" in pxd.constants and "MK_ERR_CHECK" in c.constants


def test_pxd_says_what_the_headers_say():
    c, pxd = models()
    assert drift(c, pxd) == []


PLANTED = {   # what: (file, old text, new text, the finding starts with); "gen" is the generated
    # declarations as a stale build or a wrong generator would have them
    "field dropped": ("gen", "int32_t outer, n, inner\n        int32_t log\n", "int32_t outer, n, inner\n",
                      "struct mk_softmax_args"),
    "fields swapped": ("gen", "float alpha, beta", "float beta, alpha", "struct mk_gemm_args"),
    "field type": ("gen", "has_bias\n        float eps\n    ctypedef struct mk_batch",
                   "has_bias\n        int32_t eps\n    ctypedef struct mk_batch", "struct mk_group_norm_args"),
    "field added in C": ("mk_args.h", "mk_i32 log;", "mk_i32 log, dim;", "struct mk_softmax_args"),
    "array size": ("pxd", "architecture[64]", "architecture[32]", "struct mk_device_info"),
    "pointer level": ("pxd", "int index, mk_device **out", "int index, mk_device *out", "function mk_device_create"),
    "parameter added in C": ("mk_args.h", 'K(softmax, "MPSGraph softMax", IN(void, x) OUT(void, y))',
                             'K(softmax, "MPSGraph softMax", IN(void, x) IN(int, flags) OUT(void, y))',
                             "function mk_cpu_softmax"),
    "entry point changed in C": ("mpskern.h", "int dtype arrays, mk_timing *t);",
                                 "int dtype arrays, mk_timing *t, int flags);", "function mk_mps_"),
    "const lost": ("gen", "mk_pool2d_args *a, int dtype, const void *x", "mk_pool2d_args *a, int dtype, void *x",
                   "function mk_cpu_pool2d"),
    "enumerator": ("mpskern.h", "MK_ERR_UNSUPPORTED = 7,", "MK_ERR_UNSUPPORTED = 7, MK_ERR_BUSY = 8,", "enum mk_status"),
    "constant renamed": ("mpskern.h", "#define MK_GRID_THREADS 1", "#define MK_GRID_THREAD 1", "constant MK_GRID_THREADS"),
    "struct missing": ("mk_args.h", "} mk_batch_norm_args;",
                       "} mk_batch_norm_args;\ntypedef struct mk_new_args { mk_i32 n; } mk_new_args;", "struct mk_new_args"),
}


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_planted_drift_is_found(what):
    where, old, new, expect = PLANTED[what]
    texts = {"mk_args.h": HEADERS[0].read_text(), "mpskern.h": HEADERS[1].read_text(),
             "pxd": PXD.read_text(), "gen": generated(HEADERS[0].read_text())}
    assert texts[where].count(old) == 1, (what, "the planted text must occur once")
    texts[where] = texts[where].replace(old, new)
    found = drift(c_model(texts["mk_args.h"], texts["mpskern.h"]), pxd_model(texts["pxd"], texts["gen"]))
    assert any(f.startswith(expect) for f in found), (what, found)


def test_generated_declarations_follow_the_list():
    """A family added to MK_KERNELS (struct + one line) is declared by the generator exactly as
    the preprocessor expands it: nothing else to write."""
    mk_args = HEADERS[0].read_text().replace(
        "#define MK_KERNELS(K, IN, OUT) \\\n",
        "typedef struct mk_scale_args { mk_i32 n; mk_f32 s; } mk_scale_args;\n"
        "#define MK_KERNELS(K, IN, OUT) \\\n"
        '    K(scale, "MPSGraph multiplication", IN(void, x) OUT(float, y) OUT(int64_t, where)) \\\n')
    c, pxd = c_model(mk_args), pxd_model(gen=generated(mk_args))
    assert c.functions["mk_cpu_scale"] == ("mk_status", ("const mk_scale_args*", "int", "const void*",
                                                         "float*", "int64_t*"))
    assert pxd.structs["mk_scale_args"] == [("n", "int32_t"), ("s", "float")]
    assert drift(c, pxd) == []
    row = GEN["rows"](GEN["families"](mk_args)).splitlines()[0]
    assert row == ("cpu_scale, mps_scale = _row(<mk_scale_args*>NULL, 'scale', 'x y! where!', "
                   "'MPSGraph multiplication', _cpu_scale, _mps_scale)")


@pytest.mark.parametrize("old, new, says", [
    ("mk_i32 outer, n, inner;", "double outer; mk_i32 n, inner;", "mk_softmax_args field(s) 'double outer'"),
    ("typedef struct mk_softmax_args {", "typedef struct mk_softmax2_args {", "declares no struct mk_softmax_args"),
    ('K(softmax, "MPSGraph softMax", IN(void, x) OUT(void, y))', "K(softmax, IN(void, x) OUT(void, y))",
     "an MK_KERNELS entry is not"),
    ("#define MK_KERNELS(K, IN, OUT)", "#define MK_FAMILIES(K, IN, OUT)", "no #define MK_KERNELS"),
])
def test_generator_refuses_what_it_cannot_declare(old, new, says):
    text = HEADERS[0].read_text()
    assert text.count(old) == 1
    with pytest.raises(ValueError, match=re.escape(says)):
        GEN["families"](text.replace(old, new))


# ------------------------------------------------------------------------------ 2. layout
def _natural(fields, c):
    """(offsets, size, alignment) the fields take in order with natural alignment, as the
    pxd's view implies on the LP64 targets this builds for (array sizes named by macros
    read from the headers; struct members laid out the same way)."""
    off, offs, align = 0, [], 1
    for _, t in fields:
        base, dims = re.fullmatch(r"(.*?)((?:\[\w+\])*)", t).groups()
        if base.endswith("*"):
            size = a = 8
        elif base in c.structs:
            _, size, a = _natural(c.structs[base], c)
        else:
            size = a = SIZES[base.replace("const ", "")]
        for d in re.findall(r"\[(\w+)\]", dims):
            size *= int(c.values.get(d, d))
        off = -(-off // a) * a
        offs.append(off)
        off += size
        align = max(align, a)
    return offs, -(-off // align) * align, align


def _compiled_layout(pxd, tmp_path):
    """struct -> (sizeof, [offsetof of each field the pxd names]) from the C compiler."""
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "mpskern.h"',
             "int main(void) {"]
    for name, fields in pxd.structs.items():
        if fields:
            offs = " ".join(f'printf(" %zu", offsetof({name}, {f}));' for f, _ in fields)
            lines.append(f'printf("{name} %zu", sizeof({name})); {offs} printf("\\n");')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I", str(ROOT / "objc"), "-I",
                    str(ROOT / "metal"), str(src), "-o", str(exe)], check=True,
                   capture_output=True, text=True)
    out = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, size, *offs = line.split()
        out[name] = (int(size), [int(o) for o in offs])
    return out


@pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler")
def test_pxd_fields_tile_the_c_structs(tmp_path):
    c, pxd = models()
    real = _compiled_layout(pxd, tmp_path)
    for name, fields in pxd.structs.items():
        if not fields:
            continue
        size, offs = real[name]
        assert (offs, size) == _natural(fields, c)[:2], name


@pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler")
def test_planted_layout_gap_is_found(tmp_path):
    """A field missing from both readers' view leaves a gap the compiled layout shows."""
    c, pxd = models()
    for name, field in (("mk_pool2d_args", "divisor"), ("mk_sim_options", "seed")):
        pxd.structs = {name: [f for f in models()[1].structs[name] if f[0] != field]}
        size, offs = _compiled_layout(pxd, tmp_path)[name]
        assert (offs, size) != _natural(pxd.structs[name], c)[:2], name


# ------------------------------------------------------------------------------ 3. the module
ARGS = sorted(n[3:-5] for n in pxd_model().structs if n.startswith("mk_") and n.endswith("_args"))


@pytest.mark.parametrize("op", ARGS)
def test_packed_structs_read_back_in_pxd_order(op):
    """pack_args(op) from distinct values reads back in the pxd's field order and types, at
    the C struct's size (a field Cython skipped would read back as 0)."""
    fields = pxd_model().structs[f"mk_{op}_args"]
    values = {f: (i + 0.5 if t == "float" else 1000 + i) for i, (f, t) in enumerate(fields)}
    raw = _native.pack_args(op, values)
    fmt = "=" + "".join("f" if t == "float" else "i" for _, t in fields)
    assert len(raw) == struct.calcsize(fmt)
    assert struct.unpack(fmt, raw) == tuple(values[f] for f, _ in fields)


def test_the_built_op_table_is_the_headers():
    """_native.OPS (mpskern/_kernels_rows.pxi as built) holds the families, arrays, written
    arrays, mps labels and fields that mk_args.h declares now: a build older than the
    headers fails here."""
    fams = GEN["families"](HEADERS[0].read_text())
    assert list(_native.OPS) == [f.name for f in fams]
    for f in fams:
        row = _native.OPS[f.name]
        assert row.arrays == tuple(n for _, n, _ in f.arrays), f.name
        assert row.written == tuple(w for _, _, w in f.arrays), f.name
        assert row.primitive == f.mps and row.fields == tuple(n for _, ns in f.fields for n in ns), f.name
