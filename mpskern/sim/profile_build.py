"""Kernel libraries for the simulator's profiling mode (docs/profiling.md).

The translated C++ (frontend.translate(..., profiled=True)) is compiled by clang to
optimized LLVM IR with ThreadSanitizer's instrumentation, which calls __tsan_readN /
__tsan_writeN before every load and store that may touch shared memory. Vectorizers are
off, so the IR's memory operations and arithmetic are the scalar operations the source
asks for (the MSL vector types are structs of elements in the simulator), and exceptions
are off, so a call does not end a basic block. This module then rewrites the IR text:

  - each __tsan_* access call becomes __mk_prof_acc(address, site, key, size|write<<8|
    merge<<9): `site` numbers the access instruction; accesses made inside the
    simulator's headers (the element accesses of one MSL vector expression, of
    simdgroup_load/store) carry one `key` per source location and may be joined by the
    runtime into one vector access (objc/sim/profile.cc); calls on globals (the runtime
    table pointer) are dropped;
  - every basic block of an instrumented function starts with __mk_prof_bb(block).

and records, per site and per block, what the debug information and the instructions
say: the .metal line, the header operation, the floating-point operations (by type, with
an FMA counted as two FLOPs), special functions, conversions, integer operations,
integer divisions and remainders (by a runtime value or by a constant), simdgroup_matrix
multiply-accumulates by type, SIMD collectives. Arithmetic inside mk_sim_sync.h is the
simulator's emulation of collectives and matrix multiplies, counted as those operations,
never as FLOPs. The table is stored beside the library (<key>.prof.json); mpskern/sim/
profile.py multiplies it with the runtime's block counts. The IR is the host compiler's,
not Apple's: counts are the source's operations after clang -O2 (constant folding, loop
unrolling and CSE as a GPU compiler would also do), not Apple GPU instructions.
"""
import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from functools import lru_cache

from mpskern._errors import KernelCompileError
from mpskern.paths import SIM_INCLUDE_DIR

TABLE_VERSION = 2          # part of the profiling build key: bump when instrument() changes
IR_FLAGS = ["-x", "c++", "-std=c++17", "-O2", "-g", "-fPIC", "-fno-math-errno", "-fno-exceptions",
            "-fvisibility=hidden", "-w", "-fsanitize=thread",
            "-mllvm", "-tsan-instrument-func-entry-exit=0",
            "-fno-vectorize", "-fno-slp-vectorize", "-ffp-contract=off",
            "-D__MPSKERN_PROFILE__=1"]
# half arithmetic rounded per operation, as the sim's other builds (clang >= 16)
OPTIONAL_IR_FLAGS = [["-Xclang", "-ffloat16-excess-precision=none"]]
HEADERS = ("metal_", "mk_sim_")          # basenames of the simulator's compatibility headers
EMULATION = "mk_sim_sync.h"              # collectives and simdgroup_matrix: never FLOPs
MATH = "mk_sim_math.h"
SPECIAL = {"sqrt", "rsqrt", "exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "tan",
           "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "pow",
           "powr", "fmod", "atan2", "cbrt", "erf", "sinpi", "cospi", "divide"}


@lru_cache(maxsize=None)
def clang():
    """(path, version) of the clang that builds profiling libraries, or (None, why):
    $MPSKERN_PROFILE_CXX, else $CXX when it is clang, else clang++ / clang (newest first)."""
    cands = []
    if os.environ.get("MPSKERN_PROFILE_CXX"):
        cands = [os.environ["MPSKERN_PROFILE_CXX"]]
    else:
        if os.environ.get("CXX"):
            cands.append(os.environ["CXX"])
        cands += ["clang++", "clang"] + [f"clang++-{v}" for v in range(22, 13, -1)] + \
            [f"clang-{v}" for v in range(22, 13, -1)]
    for c in cands:
        path = shutil.which(c)
        if not path:
            continue
        try:
            ver = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            continue
        if "clang" in ver:
            return path, ver
    return None, ("the profiling mode needs clang (it instruments clang's IR); none found "
                  f"(tried {', '.join(cands)}); set MPSKERN_PROFILE_CXX")


@lru_cache(maxsize=None)
def ir_flags():
    cc, _ = clang()
    flags = list(IR_FLAGS)
    for extra in OPTIONAL_IR_FLAGS:
        r = subprocess.run([cc, "-Werror"] + extra + ["-x", "c++", "-fsyntax-only", "-"],
                           input="int x;\n", capture_output=True, text=True)
        if r.returncode == 0:
            flags += extra
    return flags


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise KernelCompileError(f"simulator (profiling): cannot run {cmd[0]}: {e}") from None


def build(cc_path, so_path, log):
    """Compile the translated C++ at `cc_path` into the profiling library `so_path` and write
    its table (so_path with .prof.json). `log(stderr)` formats compiler output."""
    cc, why = clang()
    if cc is None:
        raise KernelCompileError("simulator: " + why)
    base = cc_path[:-3]
    ll, ll2, obj = base + ".ll", base + ".prof.ll", base + ".o"
    try:
        r = _run([cc] + ir_flags() + ["-I", SIM_INCLUDE_DIR, "-S", "-emit-llvm", cc_path, "-o", ll])
        if r.returncode != 0:
            raise KernelCompileError("simulator: the kernel source does not compile:\n" + log(r.stderr))
        with open(ll, encoding="utf-8") as f:
            text, table = instrument(f.read())
        with open(ll2, "w", encoding="utf-8") as f:
            f.write(text)
        r = _run([cc, "-c", "-O2", "-fPIC", "-w", "-Xclang", "-disable-llvm-optzns", "-x", "ir", ll2,
                  "-o", obj])
        if r.returncode == 0:
            r = _run([cc, "-shared", "-fPIC", obj, "-o", so_path + ".tmp", "-lm"])
        if r.returncode != 0:
            raise KernelCompileError("simulator (profiling): the instrumented library does not build "
                                     "(mpskern bug):\n" + log(r.stderr))
        tmp = so_path + ".prof.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(table, f)
        os.replace(tmp, table_path(so_path))
        os.replace(so_path + ".tmp", so_path)
    finally:
        for p in (ll, ll2, obj, so_path + ".tmp"):
            if os.path.exists(p) and not os.environ.get("MPSKERN_SIM_KEEP"):
                os.unlink(p)


def table_path(so_path):
    return so_path[:-3] + ".prof.json"


def load_table(so_path):
    with open(table_path(so_path), encoding="utf-8") as f:
        t = json.load(f)
    if t.get("version") != TABLE_VERSION:
        raise ValueError(f"{table_path(so_path)}: profile table version {t.get('version')}")
    return t


# ---------------------------------------------------------------- IR text

_META = re.compile(r"^!(\d+) = (?:distinct )?!(\w+)\((.*)\)\s*$")
_FIELD = re.compile(r'(\w+): (?:"((?:[^"\\]|\\.)*)"|(!\d+|[\w.+-]+))')
_DEFINE = re.compile(r"^define .*?@([\w.$]+|\"[^\"]+\")\(")
_LABEL = re.compile(r"^([\w.$-]+):(\s|$)")
_DBG = re.compile(r"!dbg !(\d+)")
_ATTRS_REF = re.compile(r"\)\s*((?:[\w_]+ )*)(#\d+)")
_ATTR_GROUP = re.compile(r"^attributes (#\d+) = \{(.*)\}")
_TSAN = re.compile(r"^(\s*)(?:tail |notail )?call void @__tsan_(?:unaligned_|volatile_)?(read|write)(\d+)"
                   r"\(ptr (?:noundef |nonnull )*([^)]*)\)(.*)$")
_BINOP = re.compile(r"= (fadd|fsub|fmul|fdiv|frem|fneg|add|sub|mul|shl|lshr|ashr|and|or|xor|sdiv|udiv|"
                    r"srem|urem|icmp|fcmp|select|fpext|fptrunc|sitofp|uitofp|fptosi|fptoui|getelementptr)"
                    r"\b((?: (?:nuw|nsw|exact|disjoint|inbounds|fast|nnan|ninf|nsz|arcp|contract|afn|"
                    r"reassoc|samesign))*) ?(.*)$")
_CALL = re.compile(r"call (?:[\w.]+ )*?(?:[\w<> x.]+|\{[^}]*\}) @([\w.$]+)\(")
_FP_TYPE = re.compile(r"^(?:<(\d+) x )?(half|float|double|bfloat)\b")
_MATH_INTRINSIC = re.compile(r"^llvm\.(sqrt|exp|exp2|exp10|log|log2|log10|sin|cos|tan|pow|powi|"
                             r"asin|acos|atan|atan2|sinh|cosh|tanh)\.")
_LIBM = re.compile(r"^(sqrt|exp|exp2|exp10|log|log2|log10|sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|"
                   r"tanh|asinh|acosh|atanh|pow|fmod|cbrt|erf|lgamma|tgamma)f?$")


class _Debug:
    """Source locations of the IR's debug metadata: a DILocation's inline chain as frames
    (file basename, line, function name), innermost first."""

    def __init__(self, lines):
        self.nodes = {}
        for ln in lines:
            m = _META.match(ln)
            if m:
                fields = {f.group(1): (f.group(2) if f.group(2) is not None else f.group(3))
                          for f in _FIELD.finditer(m.group(3))}
                self.nodes[int(m.group(1))] = (m.group(2), fields)
        self._frames = {}

    def _file(self, ref):
        node = self.nodes.get(int(ref[1:])) if ref else None
        if not node:
            return "?"
        return os.path.basename(node[1].get("filename", "?"))

    def _scope(self, ref):
        """(file, function name) of a scope reference."""
        seen = 0
        while ref and seen < 64:
            kind, f = self.nodes.get(int(ref[1:]), (None, {}))
            if kind == "DISubprogram":
                return self._file(f.get("file")), f.get("name", "?")
            if kind in ("DILexicalBlock", "DILexicalBlockFile"):
                ref = f.get("scope")
                seen += 1
                continue
            return "?", "?"
        return "?", "?"

    def frames(self, loc):
        if loc in self._frames:
            return self._frames[loc]
        out, ref, seen = [], loc, 0
        while ref is not None and seen < 64:
            kind, f = self.nodes.get(ref, (None, {}))
            if kind != "DILocation":
                break
            file, fn = self._scope(f.get("scope"))
            lf = file
            out.append((lf, int(f.get("line", "0") or 0), fn))
            inl = f.get("inlinedAt")
            ref = int(inl[1:]) if inl else None
            seen += 1
        self._frames[loc] = out
        return out


def _is_header(file):
    return file.startswith(HEADERS) or file in ("<mpskern glue>",)


def _source_line(frames):
    """The innermost frame outside the simulator's headers and glue: "file:line" (line 0,
    compiler-made code, gives way to the frame that inlined it)."""
    for file, line, _ in frames:
        if not _is_header(file) and file != "?" and line:
            return f"{file}:{line}"
    return "?"


def _loop_depths(blocks, succ):
    """Loop nesting depth of each block of one function (natural loops of its CFG):
    blocks: [(label, block dict)] in order, the first the entry; succ: label -> labels."""
    index = {lab: i for i, (lab, _) in enumerate(blocks)}
    preds = defaultdict(list)
    for a, outs in succ.items():
        for b in outs:
            preds[b].append(a)
    depth = defaultdict(int)
    state, stack = {}, [(blocks[0][0], iter(succ.get(blocks[0][0], ())))] if blocks else []
    backs = []
    if blocks:
        state[blocks[0][0]] = 1
    while stack:                         # iterative DFS; an edge to a block on the stack closes a loop
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            state[node] = 2
            stack.pop()
            continue
        if nxt not in index:
            continue
        if state.get(nxt) == 1:
            backs.append((node, nxt))
        elif nxt not in state:
            state[nxt] = 1
            stack.append((nxt, iter(succ.get(nxt, ()))))
    for latch, header in set(backs):
        body, work = {header}, [latch]
        while work:
            b = work.pop()
            if b not in body:
                body.add(b)
                work.extend(preds[b])
        for b in body:
            depth[b] += 1
    return {lab: depth[lab] for lab, _ in blocks}


def _base_name(fn):
    name = fn.split("<", 1)[0]
    return name.rsplit("::", 1)[-1]


def _new_block(fn, label):
    return {"fn": fn, "label": label, "line": None, "f32": defaultdict(int), "f16": defaultdict(int),
            "special": defaultdict(int), "conv": 0, "int": 0, "div_rt": 0, "div_const": 0,
            "divs": defaultdict(int), "mma": defaultdict(int), "simd": defaultdict(int), "mem": 0}


_VECTOR_ACCESS = re.compile(r"(?:= load (?:volatile )?<\d+ x |^\s*store (?:volatile )?<\d+ x )")
# a pointer into an MSL vector (the simulator's metal::vec) or an offset from one
_VEC_GEP = re.compile(r"^\s*(%[\w.$-]+) = getelementptr (?:inbounds |nuw |nusw |inrange\S* )*"
                      r"(%\"struct\.metal::(?:packed_)?vec(?:\.\d+)?\"|i8), ptr (%[\w.$-]+)")


def _vector_access(lines, at, vec_ptrs):
    """Whether the load/store that the sanitizer call at lines[at] guards is a piece of an
    MSL vector value: its address points into a metal::vec (`float4 v = p[i]` lowered to
    element loads) or it moves an LLVM vector (the host ABI's <2 x float> halves)."""
    operand = _TSAN.match(lines[at]).group(4).strip().split()[-1]
    if operand in vec_ptrs:
        return True
    for ln in lines[at + 1:at + 4]:
        s = ln.strip()
        if s and not s.startswith(("#dbg_", ";")):
            return bool(_VECTOR_ACCESS.search(s))
    return False


def instrument(text):
    """(instrumented IR text, table) for clang's IR `text` (see the module docstring)."""
    lines = text.split("\n")
    dbg = _Debug(lines)
    groups = {}                          # attribute group -> instrumented (sanitize_thread)
    for ln in lines:
        m = _ATTR_GROUP.match(ln)
        if m:
            groups[m.group(1)] = "sanitize_thread" in m.group(2)
    out = []
    sites, blocks = [None], [None]       # id 0: unattributed / unused
    site_keys = {}                       # (function, dbg node) -> key of header accesses
    fn, in_fn, block = None, False, None
    pending_bb = False
    fn_blocks, succ = [], defaultdict(list)     # this function's blocks and CFG

    def start_block(label):
        nonlocal block, pending_bb
        block = _new_block(fn, label)
        blocks.append(block)
        fn_blocks.append((label, block))
        pending_bb = True

    def end_function():
        for lab, depth in _loop_depths(fn_blocks, succ).items():
            dict(fn_blocks)[lab]["loop"] = depth
        fn_blocks.clear()
        succ.clear()

    def flush_bb_hook():
        nonlocal pending_bb
        if pending_bb:
            out.append(f"  call void @__mk_prof_bb(i32 {len(blocks) - 1})")
            pending_bb = False

    for at, ln in enumerate(lines):
        if not in_fn:
            m = _DEFINE.match(ln)
            if m and ln.rstrip().endswith("{"):
                fn = m.group(1).strip('"')
                am = _ATTRS_REF.search(ln[ln.index("("):])
                instrumented = bool(am and groups.get(am.group(2)))
                instrumented = instrumented and not fn.startswith(("__tsan_", "__mk_prof_"))
                in_fn = True
                out.append(ln)
                block = None
                vec_ptrs = set()         # SSA pointers into MSL vectors (_vector_access)
                if instrumented:
                    start_block("entry")
                else:
                    fn = None
                continue
            out.append(ln)
            continue
        if ln.startswith("}"):
            if fn is not None:
                end_function()
            in_fn, fn, block, pending_bb = False, None, None, False
            out.append(ln)
            continue
        if fn is None:                   # a function we leave alone
            out.append(ln)
            continue
        lm = _LABEL.match(ln)
        if lm:
            out.append(ln)
            start_block(lm.group(1))
            continue
        s = ln.strip()
        if not s or s.startswith("#dbg_") or s.startswith(";"):
            out.append(ln)
            continue
        if " = phi " in s or s.startswith("landingpad") or " = landingpad" in s:
            out.append(ln)
            continue
        flush_bb_hook()
        dm = _DBG.search(ln)
        frames = dbg.frames(int(dm.group(1))) if dm else []
        made_by_compiler = not frames or frames[0][1] == 0
        if frames and frames[0][1]:
            block["_ctx"] = frames
        elif block.get("_ctx"):          # no location (or line 0): the code around it
            frames = block["_ctx"] + frames
        inner_file = frames[0][0] if frames else "?"
        inner_fn = frames[0][2] if frames else "?"
        if block["line"] is None and frames:
            src = _source_line(frames)
            if src != "?":
                block["line"] = src
        tm = _TSAN.match(ln)
        if tm:
            operand = tm.group(4).strip()
            if not operand.startswith("%"):
                continue                 # a global (the runtime table pointer): not the kernel's
            size, write = int(tm.group(3)), tm.group(2) == "write"
            # the pieces of one vector / aggregate value: made inside the simulator's headers
            # (vector operators, simdgroup_load/store), by the compiler (line 0: the copy
            # of a struct such as float4 lowered to loads), or an access of an LLVM vector
            # type (`float4 v = p[i]`: the host ABI splits the copy into <2 x float>
            # halves; with the vectorizers off only MSL vector values have such types)
            header = _is_header(inner_file)
            merge = dm is not None and (header or made_by_compiler or
                                        _vector_access(lines, at, vec_ptrs))
            sid = len(sites)
            key = site_keys.setdefault((fn, dm.group(1)), sid) if merge else sid
            line = _source_line(frames)
            sites.append({"size": size, "write": int(write), "key": key, "merge": int(merge),
                          "line": line if line != "?" else (block["line"] or "?"),
                          "op": _base_name(inner_fn) if header else None, "fn": fn})
            block["mem"] += 1
            info = size | int(write) << 8 | int(merge) << 9
            out.append(f"{tm.group(1)}call void @__mk_prof_acc(ptr {operand}, i32 {sid}, i32 {key}, "
                       f"i32 {info}){tm.group(5)}")
            continue
        out.append(ln)
        gm = _VEC_GEP.match(ln)
        if gm and (gm.group(2) != "i8" or gm.group(3) in vec_ptrs):
            vec_ptrs.add(gm.group(1))
        if s.startswith(("br ", "switch ", "indirectbr ")):
            succ[block["label"]].extend(re.findall(r"label %([\w.$-]+)", s))
        _count(block, s, inner_file, inner_fn, frames)
    text2 = "\n".join(out)
    nsites, nblocks = len(sites) - 1, len(blocks) - 1
    for name, value in (("__mk_prof_nsites", nsites), ("__mk_prof_nblocks", nblocks)):
        text2, n = re.subn(rf"^@{name} = external (?:dso_local )?(?:hidden )?(?:local_unnamed_addr )?constant i32"
                           r"(?:, align \d+)?$", f"@{name} = hidden constant i32 {value}, align 4", text2, flags=re.M)
        if n != 1:
            raise KernelCompileError(f"simulator (profiling): no declaration of {name} in the IR "
                                     "(the glue was not built with profiled=True)")
    table = {"version": TABLE_VERSION, "sites": sites,
             "blocks": [None] + [_freeze(b) for b in blocks[1:]]}
    return text2, table


def _freeze(b):
    out = {k: (dict(v) if isinstance(v, defaultdict) else v) for k, v in b.items() if k != "_ctx"}
    return {k: v for k, v in out.items() if v not in ({}, 0, None) or k in ("fn", "line", "loop")}


def _count(block, s, inner_file, inner_fn, frames):
    """Add instruction `s` (an IR line) to its block's counts."""
    base = _base_name(inner_fn)
    cm = _CALL.search(s)
    if cm:
        callee = cm.group(1)
        if "__mk_xchg" in callee:        # one SIMD exchange = one collective or one multiply
            if base in ("simdgroup_multiply_accumulate", "simdgroup_multiply"):
                targs = inner_fn[inner_fn.find("<") + 1:inner_fn.rfind(">")] if "<" in inner_fn else "?"
                block["mma"][",".join(t.strip() for t in targs.split(","))] += 1
            else:
                block["simd"][base] += 1
            return
        if inner_file == EMULATION:
            return
        math = _MATH_INTRINSIC.match(callee) or _LIBM.match(callee)
        if math:
            name = base if (inner_file == MATH and base in SPECIAL) else math.group(1)
            block["special"][name] += 1
            return
        fm = re.match(r"^llvm\.(fma|fmuladd)\.(?:v(\d+))?(f16|f32|f64)", callee)
        if fm:
            n = int(fm.group(2) or 1)
            block["f16" if fm.group(3) == "f16" else "f32"]["fma"] += n
            return
        fo = re.match(r"^llvm\.(minnum|maxnum|minimum|maximum|fabs|floor|ceil|trunc|rint|round|"
                      r"nearbyint|copysign)\.(?:v(\d+))?(f16|f32|f64)", callee)
        if fo:
            if not (inner_file == MATH and base in SPECIAL):
                block["f16" if fo.group(3) == "f16" else "f32"]["other"] += int(fo.group(2) or 1)
            return
        if re.match(r"^llvm\.(smin|smax|umin|umax|abs)\.", callee):
            block["int"] += 1
        return
    bm = _BINOP.search(s)
    if not bm or inner_file == EMULATION:
        return
    op, rest = bm.group(1), bm.group(3).split(", !", 1)[0]     # without metadata attachments
    if inner_file == MATH and base in SPECIAL:
        if op == "fdiv" and base == "divide":
            block["special"]["divide"] += 1
        return                           # the function's own arithmetic: one special op
    if op in ("fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fcmp"):
        tm = _FP_TYPE.match(rest.split(" ", 1)[1] if op == "fcmp" and " " in rest else rest)
        if not tm:
            return
        n = int(tm.group(1) or 1)
        kind = {"fadd": "add", "fsub": "add", "fmul": "mul", "fdiv": "div", "frem": "div",
                "fneg": "neg", "fcmp": "other"}[op]
        block["f16" if tm.group(2) == "half" else "f32"][kind] += n
    elif op in ("fpext", "fptrunc", "sitofp", "uitofp", "fptosi", "fptoui"):
        if inner_file != MATH:           # the math header widens half to float and back
            block["conv"] += 1
    elif op in ("sdiv", "udiv", "srem", "urem"):
        parts = rest.split(",")
        divisor = parts[-1].strip() if len(parts) > 1 else ""
        const = re.match(r"^-?\d+$", divisor) is not None
        if const and int(divisor) > 0 and int(divisor) & (int(divisor) - 1) == 0:
            block["int"] += 1            # by a power of two: a shift (and a sign fix-up)
        elif const:
            block["div_const"] += 1      # a multiply-high sequence (no runtime divisor)
        else:
            block["div_rt"] += 1
            block["divs"][_source_line(frames)] += 1
    elif op == "getelementptr":
        # address arithmetic: one add (and a multiply for a scaled index) per variable index
        if re.search(r", (?:i64|i32) %", rest):
            block["int"] += 1
    elif op == "select" and _FP_TYPE.match(rest.split(",")[1].strip() if "," in rest else ""):
        block["f32"]["other"] += 1
    else:
        block["int"] += 1
