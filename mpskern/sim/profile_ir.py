"""The profiling mode's IR rewrite (mpskern/sim/profile_build.py compiles the IR it gets
and the IR this returns). clang's optimized IR with ThreadSanitizer's instrumentation
calls __tsan_readN / __tsan_writeN before every load and store that may touch shared
memory. This module rewrites the IR text:

  - each __tsan_* access call becomes __mk_prof_acc(address, site, key, size|write<<8|
    merge<<9): `site` numbers the access instruction; accesses made inside the
    simulator's headers (the element accesses of one MSL vector expression, of
    simdgroup_load/store) carry one `key` per source location and may be joined by the
    runtime into one vector access (objc/sim/profile.cc); calls on globals (the runtime
    table pointer) are dropped;
  - every basic block of an instrumented function starts with __mk_prof_bb(block).

and records, per site and per block, what the debug information and the instructions
say (each instruction's counts: mpskern/sim/profile_ops.py): the .metal line, the header operation, the floating-point operations (by type, with
an FMA counted as two FLOPs), special functions, conversions, integer operations,
integer divisions and remainders (by a runtime value or by a constant), simdgroup_matrix
multiply-accumulates by type, SIMD collectives. Arithmetic inside mk_sim_sync.h is the
simulator's emulation of collectives and matrix multiplies, counted as those operations,
never as FLOPs. The table is stored beside the library (<key>.prof.json); mpskern/sim/
profile.py multiplies it with the runtime's block counts. The IR is the host compiler's,
not Apple's: counts are the source's operations after clang -O2 (constant folding, loop
unrolling and CSE as a GPU compiler would also do), not Apple GPU instructions.
"""
import os
import re
from collections import defaultdict

from mpskern._errors import KernelCompileError
from mpskern.sim.profile_ops import base_name, count, is_header, source_line

TABLE_VERSION = 3          # part of the profiling build key: bump when instrument() changes


_META = re.compile(r"^!(\d+) = (?:distinct )?!(\w+)\((.*)\)\s*$")
_FIELD = re.compile(r'(\w+): (?:"((?:[^"\\]|\\.)*)"|(!\d+|[\w.+-]+))')
_DEFINE = re.compile(r"^define .*?@([\w.$]+|\"[^\"]+\")\(")
_LABEL = re.compile(r"^([\w.$-]+):(\s|$)")
_DBG = re.compile(r"!dbg !(\d+)")
_ATTRS_REF = re.compile(r"\)\s*((?:[\w_]+ )*)(#\d+)")
_ATTR_GROUP = re.compile(r"^attributes (#\d+) = \{(.*)\}")
_TSAN = re.compile(r"^(\s*)(?:tail |notail )?call void @__tsan_(?:unaligned_|volatile_)?(read|write)(\d+)"
                   r"\(ptr (?:noundef |nonnull )*([^)]*)\)(.*)$")


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
    site_keys = {}                       # (function, dbg node, write) -> key of header accesses
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
            src = source_line(frames)
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
            header = is_header(inner_file)
            merge = dm is not None and (header or made_by_compiler or
                                        _vector_access(lines, at, vec_ptrs))
            sid = len(sites)
            # one key per source location and direction: a copy's loads and stores can share
            # a location (a macro's body) and interleave, yet are never one access
            key = site_keys.setdefault((fn, dm.group(1), write), sid) if merge else sid
            line = source_line(frames)
            sites.append({"size": size, "write": int(write), "key": key, "merge": int(merge),
                          "line": line if line != "?" else (block["line"] or "?"),
                          "op": base_name(inner_fn) if header else None, "fn": fn})
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
        count(block, s, inner_file, inner_fn, frames)
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
