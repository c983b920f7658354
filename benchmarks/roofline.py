"""Modelled % of roofline of mpskern's shipped Metal kernels, per op and GPU family, and the
model's view of metal-flash-attention's published M1 Max GEMM figures beside them.

Every number this prints is MODELLED, none measured: each op runs once at one
representative shape in the simulator's profiling mode as a GPU of the family (its shipped
default configuration), and mpskern/profiling/model.py turns the counters into a time on
the family's base chip (uncalibrated: +-30% or worse; docs/profiling.md). "% of roofline"
is the op's nominal FLOPs and bytes at the chip's peaks over that estimate.

    python benchmarks/roofline.py                       # the tables (markdown), ~3 minutes
    python benchmarks/roofline.py --quick               # softmax on apple7, float32
    python benchmarks/roofline.py --write docs/roofline.md   # refresh the docs' tables
    python benchmarks/roofline.py --ops softmax --write docs/roofline.md   # only softmax's cells
    python benchmarks/roofline.py --ops softmax --families 7,9 --check docs/roofline.md

--check compares the cells it computes with the page's tables (exit 1 on a difference of
more than 2 percentage points, or a bound that differs), so a test can tell the docs are
current without regenerating all of them.
"""
import argparse
import re
import sys
import warnings

# op -> the representative shape (the op table's --shape grammar)
SHAPES = {
    "gemm": "M=1024,N=1024,K=1024",
    "conv2d": "1,64,56,56,64,3,pad=1",
    "max_pool2d": "1,64,112,112,3,2,1",
    "avg_pool2d": "1,64,112,112,3,2,1",
    "softmax": "4096,1024",
    "log_softmax": "4096,1024",
    "layer_norm": "4096,1024",
    "rms_norm": "4096,1024",
    "batch_norm": "8,256,14,14",
    "group_norm": "8,256,28,28,G=32",
}
FAMILIES = (7, 8, 9, 10)
DTYPES = ("float32", "float16")
BEGIN, END = "<!-- roofline:begin (python benchmarks/roofline.py --write) -->", "<!-- roofline:end -->"
# metal-flash-attention's README, "Performance: Overview" (32-core Apple 7 GPU, i.e. M1 Max;
# GFLOPS of square GEMMs, NN): https://github.com/philipturner/metal-flash-attention
MFA = {("float32", 1024): 8185, ("float16", 1024): 9353,
       ("float32", 2048): 8992, ("float16", 2048): 9618}


def cell(op, dtype, family):
    """(% of roofline, bound, estimate ms) of `op` at its shape as apple`family`."""
    from mpskern.profiling.run import model_of, profile_op
    prof, info = profile_op(op, SHAPES[op], dtype, family=family)
    s = model_of(prof, info)
    bound = max(s.dispatches, key=lambda e: e.estimate_ms).bound if s.dispatches else "-"
    return s.roofline_pct, bound, s.estimate_ms


def roofline_table(ops, dtype, families, known=None):
    """Markdown rows of `ops`; cells in `known` ({(op, dtype, family): (pct, bound)}, from
    the page --write refreshes) are kept as they are, the others modelled now."""
    lines = [f"| op ({dtype}) | shape | " + " | ".join(f"apple{f}" for f in families) + " |",
             "| --- | --- | " + " | ".join("---" for _ in families) + " |"]
    for op in ops:
        cells = []
        for f in families:
            if known and (op, dtype, f) in known:
                pct, bound = known[(op, dtype, f)]
            else:
                pct, bound, _ = cell(op, dtype, f)
            cells.append(f"{pct:.0f}% ({bound})")
        lines.append(f"| {op} | `{SHAPES[op]}` | " + " | ".join(cells) + " |")
    return lines


def mfa_table(dtypes):
    """The model on Apple M1 Max at MFA's sizes: mpskern's gemm (apple7 defaults) and the
    model's own ceiling (its lower bound) beside MFA's measured GFLOPS."""
    from mpskern.profiling.run import model_of, profile_op
    lines = ["| GEMM on Apple M1 Max | MFA measured (published) | mpskern gemm, modelled | "
             "model's ceiling (lower bound) | MFA / ceiling |",
             "| --- | --- | --- | --- | --- |"]
    for dtype in dtypes:
        for n in (1024, 2048):
            prof, info = profile_op("gemm", f"M={n},N={n},K={n}", dtype, family=7)
            s = model_of(prof, info, chip="Apple M1 Max")
            flop = 2.0 * n ** 3
            est, low = flop / (s.estimate_ms * 1e6), flop / (s.lower_ms * 1e6)
            mfa = MFA[(dtype, n)]
            lines.append(f"| {n}x{n}x{n} {dtype} | {mfa} GFLOPS | {est:.0f} GFLOPS | "
                         f"{low:.0f} GFLOPS | {100 * mfa / low:.0f}% |")
    return lines


def tables(ops, dtypes, families, mfa=True):
    out = []
    for dt in dtypes:
        out += roofline_table(ops, dt, families) + [""]
    if mfa:
        out += mfa_table(dtypes) + [""]
    return out


def refreshed(text, ops, dtypes, families):
    """The page's whole block with the cells of `ops` x `dtypes` x `families` modelled
    again and every other cell (and the MFA table, unless gemm is among `ops`) kept."""
    block = text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text else ""
    known = {k: v for k, v in parse(block).items()
             if not (k[0] in ops and k[1] in dtypes and k[2] in families)}
    out = []
    for dt in DTYPES:
        out += roofline_table(list(SHAPES), dt, FAMILIES, known) + [""]
    if "gemm" in ops:
        out += mfa_table(DTYPES) + [""]
    else:
        mfa = block[block.index("| GEMM on"):] if "| GEMM on" in block else ""
        out += mfa.strip().splitlines() + [""]
    return out


_ROW = re.compile(r"^\| (\w+) \((float\d+)\) \|")


def parse(text):
    """{(op, dtype, family): (pct, bound)} from a page's roofline tables."""
    got, families, dtype = {}, None, None
    for ln in text.splitlines():
        m = _ROW.match(ln)
        if m:
            dtype = m.group(2)
            families = [int(c.strip()[5:]) for c in ln.strip("|").split("|")[2:]]
            continue
        if dtype and ln.startswith("| ") and not ln.startswith("| ---"):
            parts = [c.strip() for c in ln.strip().strip("|").split("|")]
            if len(parts) != 2 + len(families):
                dtype = None
                continue
            for f, c in zip(families, parts[2:]):
                cm = re.match(r"(\d+)% \((\w+)\)", c)
                if cm:
                    got[(parts[0], dtype, f)] = (int(cm.group(1)), cm.group(2))
        elif not ln.strip():
            dtype = None
    return got


def check(path, ops, dtypes, families):
    with open(path, encoding="utf-8") as f:
        doc = parse(f.read())
    bad = 0
    for dt in dtypes:
        for op in ops:
            for fam in families:
                want = doc.get((op, dt, fam))
                pct, bound, _ = cell(op, dt, fam)
                if want is None:
                    print(f"{path}: no cell for {op} {dt} apple{fam}")
                    bad += 1
                elif abs(want[0] - pct) > 2 or want[1] != bound:
                    print(f"{path}: {op} {dt} apple{fam} says {want[0]}% ({want[1]}), the model "
                          f"now gives {pct:.0f}% ({bound}): run python benchmarks/roofline.py "
                          f"--write {path}")
                    bad += 1
    print(f"checked {len(ops) * len(dtypes) * len(families)} cells of {path}: "
          f"{'all current' if not bad else f'{bad} stale'}")
    return 1 if bad else 0


def write(path, lines):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + BEGIN + "\n" + "\n".join(lines).rstrip() + "\n" + END + tail)
    print(f"wrote the tables into {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(SHAPES), help="comma-separated ops (default: all)")
    p.add_argument("--families", default=",".join(map(str, FAMILIES)), help="e.g. 7,9")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="float32,float16")
    p.add_argument("--quick", action="store_true", help="softmax, apple7, float32, no MFA table")
    p.add_argument("--write", metavar="PAGE", help="replace PAGE's roofline block with the tables")
    p.add_argument("--check", metavar="PAGE", help="compare with PAGE's tables (exit 1 if stale)")
    a = p.parse_args(argv)
    ops, fams, dts = a.ops.split(","), [int(f) for f in a.families.split(",")], a.dtypes.split(",")
    if a.quick:
        ops, fams, dts = ["softmax"], [7], ["float32"]
    unknown = [o for o in ops if o not in SHAPES]
    if unknown:
        p.error(f"--ops: {', '.join(unknown)} not among {', '.join(SHAPES)}")
    if any(f not in FAMILIES for f in fams):
        p.error(f"--families: each of {', '.join(map(str, FAMILIES))}")
    try:
        import checkout_path  # noqa: F401  (this checkout's mpskern if built, else the installed one)
        from mpskern import sim
        from mpskern.sim import profile_build
    except ImportError as e:
        print(f"roofline: mpskern is not importable ({e}); pip install . first", file=sys.stderr)
        return 2
    if not sim.available()[0] or profile_build.clang()[0] is None:
        print("roofline: the profiling mode needs the simulator's host compiler and clang",
              file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    if a.check:
        return check(a.check, ops, dts, fams)
    if a.write:
        with open(a.write, encoding="utf-8") as f:
            write(a.write, refreshed(f.read(), ops, dts, fams))
    else:
        print("\n".join(tables(ops, dts, fams, mfa=not a.quick and "gemm" in ops)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
