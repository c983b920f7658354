"""What one instruction of the profiling build's IR counts as (profile_ir.instrument calls
count() for each): floating-point operations by type (an FMA is two FLOPs), special
functions, conversions, integer operations, integer divisions and remainders (by a runtime
value or by a constant), simdgroup_matrix multiply-accumulates by type, SIMD collectives.
Arithmetic inside mk_sim_sync.h is the simulator's emulation of collectives and matrix
multiplies, counted as those operations, never as FLOPs; the math header's own arithmetic is
one special function."""
import re

HEADERS = ("metal_", "mk_sim_")          # basenames of the simulator's compatibility headers
EMULATION = "mk_sim_sync.h"              # collectives and simdgroup_matrix: never FLOPs
MATH = "mk_sim_math.h"
SPECIAL = {"sqrt", "rsqrt", "exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "tan",
           "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "pow",
           "powr", "fmod", "atan2", "cbrt", "erf", "sinpi", "cospi", "divide"}
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


def is_header(file):
    return file.startswith(HEADERS) or file in ("<mpskern glue>",)


def source_line(frames):
    """The innermost frame outside the simulator's headers and glue: "file:line" (line 0,
    compiler-made code, gives way to the frame that inlined it)."""
    for file, line, _ in frames:
        if not is_header(file) and file != "?" and line:
            return f"{file}:{line}"
    return "?"


def base_name(fn):
    """A C++ function name without its template arguments and scope."""
    name = fn.split("<", 1)[0]
    return name.rsplit("::", 1)[-1]


def count(block, s, inner_file, inner_fn, frames):
    """Add instruction `s` (an IR line) to its block's counts."""
    base = base_name(inner_fn)
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
            block["divs"][source_line(frames)] += 1
    elif op == "getelementptr":
        # address arithmetic: one add (and a multiply for a scaled index) per variable index
        if re.search(r", (?:i64|i32) %", rest):
            block["int"] += 1
    elif op == "select" and _FP_TYPE.match(rest.split(",")[1].strip() if "," in rest else ""):
        block["f32"]["other"] += 1
    else:
        block["int"] += 1
