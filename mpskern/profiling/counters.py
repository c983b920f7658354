"""What one profiled dispatch did: the simulator's runtime report (objc/sim/profile.cc,
weighted counts per access site and per basic block) joined with its library's table
(mpskern/sim/profile_build.py: what each site and block is) into counters a kernel writer
can act on. Every count is for the whole dispatch; when the grid was sampled, it is the
sampled threadgroups' counts scaled by the groups each stands for (`sampled`).

How each counter is obtained (docs/profiling.md says the same for users):
  device / threadgroup memory   measured: every access of the kernel, gathered into SIMD-group
                                instructions by the runtime (coalescing, bank conflicts, width)
  flops, special, conversions,  counted: executions of each basic block (measured) times the
  int_ops, int_div              operations clang's optimized IR has in that block (static)
  simdgroup_matrix              counted: the multiply-accumulates in executed blocks (8x8x8 each)
  barriers                      measured: barriers each threadgroup passed
"""
from collections import defaultdict

WIDTHS = (1, 2, 4, 8, 16)
VECTOR_BYTES = 8          # a lane access of at least 8 bytes (float2, half4, ...) is "vector"


def _ratio(a, b, empty=None):
    return a / b if b else empty


def _mem(sites, region, write):
    out = dict(instr=0.0, lanes=0.0, bytes=0.0, lines=0.0, min_lines=0.0, bank_cycles=0.0,
               bank_ideal=0.0, width={str(w): 0.0 for w in WIDTHS})
    for s in sites:
        if s["region"] != region or bool(s["write"]) != write:
            continue
        for k in ("instr", "lanes", "bytes", "lines", "min_lines", "bank_cycles", "bank_ideal"):
            out[k] += s[k]
        for w, n in zip(WIDTHS, s["width"]):
            out["width"][str(w)] += n
    accesses = sum(out["width"].values())
    out["vector"] = _ratio(sum(out["width"][str(w)] for w in WIDTHS if w >= VECTOR_BYTES), accesses)
    if region == "device":
        out["coalescing"] = _ratio(out["min_lines"], out["lines"])
        for k in ("bank_cycles", "bank_ideal"):
            del out[k]
    else:
        out["bank_factor"] = _ratio(out["bank_cycles"], out["bank_ideal"])
        for k in ("lines", "min_lines"):
            del out[k]
    return out


def counters(raw, table):
    """The counters (a JSON-friendly dict) of runtime report `raw` with its library table."""
    tsites, tblocks = table["sites"], table["blocks"]
    sites = []
    for sid, s in raw["sites"].items():
        info = tsites[int(sid)] if int(sid) < len(tsites) and tsites[int(sid)] else {}
        sites.append(dict(s, site=int(sid), line=info.get("line", "?"), op=info.get("op")))
    threads = raw["threads"] or 0.0
    out = dict(kernel=raw["kernel"], grid=raw["groups_per_grid"], group_size=raw["threads_per_group"],
               threads_per_group=raw["threads_per_group"][0] * raw["threads_per_group"][1] *
               raw["threads_per_group"][2],
               groups=int(raw["groups"]), groups_profiled=int(raw["groups_profiled"]),
               sampled=raw["sampled"], sampled_only=raw["sampled_only"], threads=threads,
               tg_memory=int(raw["tg_memory"]))
    # ---- memory
    dev_load, dev_store = _mem(sites, "device", False), _mem(sites, "device", True)
    L = raw["line_bytes"]
    footprint = sum(b["lines_touched"] for b in raw["buffers"]) * L
    classes = {}
    for name, c in raw["classes"].items():
        classes[name] = dict(loads=c["instr"], bytes=c["bytes"], vector=_ratio(c["vec_instr"], c["instr"]),
                             vector_bytes=_ratio(c["vec_bytes"], c["bytes"]),
                             coalescing=_ratio(c["min_lines"], c["lines"]))
    out["device"] = dict(load=dev_load, store=dev_store, bytes_read=dev_load["bytes"],
                         bytes_written=dev_store["bytes"],
                         line_traffic=(dev_load["lines"] + dev_store["lines"]) * L,
                         group_line_traffic=raw["group_lines"] * L,
                         footprint=footprint, footprint_exact=not raw["sampled"],
                         buffers=raw["buffers"], interior=classes.get("interior"),
                         edge=classes.get("edge"), line_bytes=L)
    tg_load, tg_store = _mem(sites, "threadgroup", False), _mem(sites, "threadgroup", True)
    cyc = tg_load["bank_cycles"] + tg_store["bank_cycles"]
    ideal = tg_load["bank_ideal"] + tg_store["bank_ideal"]
    out["threadgroup"] = dict(load=tg_load, store=tg_store, bank_factor=_ratio(cyc, ideal),
                              bank_cycles=cyc, bank_model=f"{raw['banks']} banks x {raw['bank_bytes']} B")
    instr = dev_load["instr"] + dev_store["instr"] + tg_load["instr"] + tg_store["instr"]
    lanes = dev_load["lanes"] + dev_store["lanes"] + tg_load["lanes"] + tg_store["lanes"]
    out["simd_lanes_active"] = _ratio(lanes, 32 * instr)
    out["const_reads"] = raw["const_reads"]
    # ---- operations from the executed blocks
    f32, f16 = defaultdict(float), defaultdict(float)
    special, mma, simd = defaultdict(float), defaultdict(float), defaultdict(float)
    divs_by_line = defaultdict(float)
    conv = int_ops = div_rt = div_const = div_loop = 0.0
    for bid, count in raw["blocks"].items():
        b = tblocks[int(bid)] if int(bid) < len(tblocks) else None
        if not b:
            continue
        for k, v in b.get("f32", {}).items():
            f32[k] += v * count
        for k, v in b.get("f16", {}).items():
            f16[k] += v * count
        for k, v in b.get("special", {}).items():
            special[k] += v * count
        for k, v in b.get("mma", {}).items():
            mma[k] += v * count / 32.0          # one per SIMD-group: 32 lanes execute it
        for k, v in b.get("simd", {}).items():
            simd[k] += v * count / 32.0
        conv += b.get("conv", 0) * count
        int_ops += b.get("int", 0) * count
        div_rt += b.get("div_rt", 0) * count
        div_const += b.get("div_const", 0) * count
        if b.get("loop", 0) > 0:
            div_loop += b.get("div_rt", 0) * count
        for line, n in b.get("divs", {}).items():
            divs_by_line[line] += n * count

    def flops(d):
        return d["add"] + d["mul"] + 2 * d["fma"] + d["div"]
    macs = sum(mma.values()) * 512
    out["flops"] = dict(f32=dict(f32), f16=dict(f16), f32_total=flops(f32), f16_total=flops(f16),
                        total=flops(f32) + flops(f16), other_fp=f32["other"] + f16["other"])
    out["simdgroup_matrix"] = dict(by_type=dict(mma), instructions=sum(mma.values()), macs=macs,
                                   flops=2 * macs)
    out["special"] = dict(special)
    out["conversions"] = conv
    out["int_ops"] = int_ops
    out["int_div"] = dict(total=div_rt, in_loops=div_loop, per_thread=_ratio(div_rt, threads, 0.0),
                          by_line=dict(sorted(divs_by_line.items(), key=lambda kv: -kv[1])),
                          by_constant=div_const)
    out["barriers"] = raw["barriers"]
    out["barriers_per_group"] = _ratio(raw["barriers"], raw["groups"], 0.0)
    out["simd_barriers"] = raw["simd_barriers"]
    out["simd_collectives"] = dict(simd)
    out["lines"] = _by_line(sites)
    return out


def _by_line(sites):
    """Memory instructions per source line: what to look at first."""
    rows = {}
    for s in sites:
        key = (s["line"], s["region"], bool(s["write"]))
        r = rows.setdefault(key, dict(line=s["line"], region=s["region"], write=bool(s["write"]),
                                      op=s["op"], instr=0.0, bytes=0.0, lines=0.0, min_lines=0.0,
                                      bank_cycles=0.0, bank_ideal=0.0, vec=0.0, accesses=0.0))
        for k in ("instr", "bytes", "lines", "min_lines", "bank_cycles", "bank_ideal"):
            r[k] += s[k]
        r["accesses"] += sum(s["width"])
        r["vec"] += sum(n for w, n in zip(WIDTHS, s["width"]) if w >= VECTOR_BYTES)
    out = []
    for r in rows.values():
        d = dict(line=r["line"], region=r["region"], write=r["write"], op=r["op"], instr=r["instr"],
                 bytes=r["bytes"], vector=_ratio(r["vec"], r["accesses"]))
        if r["region"] == "device":
            d["coalescing"] = _ratio(r["min_lines"], r["lines"])
        else:
            d["bank_factor"] = _ratio(r["bank_cycles"], r["bank_ideal"])
        out.append(d)
    out.sort(key=lambda d: -d["instr"])
    return out
