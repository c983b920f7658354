"""The profile as a table a kernel writer can act on (after Xcode's GPU counters: memory
traffic, its efficiency, ALU mix, occupancy inputs, and the source lines behind them), and
as JSON. Used by `mpskern profile` and by Kernel(..., profile=True)'s Profile.text()."""


def count(v):
    """1234567 -> "1.23M"."""
    if v is None:
        return "-"
    v = float(v)
    for unit, div in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}" if v != int(v) else str(int(v))


def nbytes(v):
    if v is None:
        return "-"
    v = float(v)
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if v >= div:
            return f"{v / div:.3g} {unit}"
    return f"{int(v)} B"


def ms(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.3g} us" if v < 1 else f"{v:.3g} ms"


def pct(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def factor(v):
    return "-" if v is None else f"{v:.2f}x"


def dispatch_rows(d):
    """(section, what, value) rows of one dispatch's counters."""
    rows = []
    dev, tg = d["device"], d["threadgroup"]
    ld, st = dev["load"], dev["store"]
    sample = (f"{d['groups_profiled']} of {d['groups']} threadgroups profiled, counts scaled"
              if d["sampled"] else f"all {d['groups']} threadgroups profiled")
    g, t = d["grid"], d["group_size"]
    rows.append(("dispatch", "grid", f"{g[0]}x{g[1]}x{g[2]} threadgroups of {t[0]}x{t[1]}x{t[2]} threads"))
    rows.append(("dispatch", "profiled", sample + (" (only those ran)" if d["sampled_only"] else "")))
    rows.append(("dispatch", "threadgroup memory", nbytes(d["tg_memory"]) + " per threadgroup"))
    rows.append(("device", "loads", f"{count(ld['instr'])} instr, {nbytes(ld['bytes'])}, coalescing "
                 f"{pct(ld.get('coalescing'))}, vector {pct(ld['vector'])}"))
    rows.append(("device", "stores", f"{count(st['instr'])} instr, {nbytes(st['bytes'])}, coalescing "
                 f"{pct(st.get('coalescing'))}, vector {pct(st['vector'])}"))
    for cls in ("interior", "edge"):
        c = dev.get(cls)
        if c and c["loads"]:
            rows.append(("device", f"loads, {cls} threadgroups",
                         f"{count(c['loads'])} instr, vector {pct(c['vector'])}, coalescing "
                         f"{pct(c['coalescing'])}"))
    rows.append(("device", "footprint", nbytes(dev["footprint"]) +
                 ("" if dev["footprint_exact"] else " (sampled threadgroups only)") +
                 f"; lines moved {nbytes(dev['line_traffic'])}"))
    tl, ts = tg["load"], tg["store"]
    if tl["instr"] or ts["instr"]:
        rows.append(("threadgroup", "loads", f"{count(tl['instr'])} instr, {nbytes(tl['bytes'])}, "
                     f"bank conflicts {factor(tl.get('bank_factor'))}, vector {pct(tl['vector'])}"))
        rows.append(("threadgroup", "stores", f"{count(ts['instr'])} instr, {nbytes(ts['bytes'])}, "
                     f"bank conflicts {factor(ts.get('bank_factor'))}, vector {pct(ts['vector'])}"))
        rows.append(("threadgroup", "bank model", tg["bank_model"] + " (assumed; docs/profiling.md)"))
    mm = d["simdgroup_matrix"]
    if mm["instructions"]:
        types = ", ".join(f"{count(n)} x <{k}>" for k, n in mm["by_type"].items())
        rows.append(("compute", "simdgroup_matrix", f"{types} ({count(mm['macs'])} MAC)"))
    fl = d["flops"]
    rows.append(("compute", "other FLOPs", f"{count(fl['total'])} (f32 {count(fl['f32_total'])}, "
                 f"f16 {count(fl['f16_total'])})"))
    if d["special"]:
        rows.append(("compute", "special functions",
                     ", ".join(f"{k} {count(v)}" for k, v in sorted(d["special"].items()))))
    div = d["int_div"]
    per = div["per_thread"]
    rows.append(("compute", "integer div/mod", f"{count(div['total'])} by runtime values "
                 f"({per:.3g} per thread, {count(div['in_loops'])} in loops)"))
    if div["by_line"]:
        top = list(div["by_line"].items())[:3]
        rows.append(("compute", "  at", ", ".join(f"{ln} ({count(n)})" for ln, n in top)))
    rows.append(("compute", "integer ops", f"{count(d['int_ops'])} (approximate)"))
    rows.append(("sync", "barriers", f"{d['barriers_per_group']:.3g} per threadgroup"))
    if d["simd_collectives"]:
        rows.append(("sync", "SIMD collectives",
                     ", ".join(f"{k} {count(v)}" for k, v in sorted(d["simd_collectives"].items()))))
    if d["simd_lanes_active"] is not None:
        rows.append(("sync", "active lanes", f"{pct(d['simd_lanes_active'])} per memory instruction"))
    return rows


def hot_lines(d, n=6):
    """The source lines with the most memory instructions, with what is wrong with them."""
    out = []
    for r in d["lines"][:n]:
        what = ("store" if r["write"] else "load") + (" (" + r["op"] + ")" if r["op"] else "")
        if r["region"] == "device":
            q = f"coalescing {pct(r.get('coalescing'))}, vector {pct(r['vector'])}"
        else:
            q = f"bank conflicts {factor(r.get('bank_factor'))}, vector {pct(r['vector'])}"
        out.append((r["line"], f"{r['region']} {what}", f"{count(r['instr'])} instr, {q}"))
    return out
