"""Issue 16's gemm and conv2d criteria at the shipped defaults, per case, dtype and GPU family:
the threadgroup bank-conflict factor (loads / stores, 32 x 4-byte banks), the share of
interior threadgroups' device loads at vector width, integer divisions by runtime values in
loops, accumulators per lane, resident SIMD-groups per core (model) and the modelled time.

Counts come from the simulator's profiling mode (each case run as a GPU of the family, with
its packaged default configuration only: no user tuning database), times from
mpskern/profiling/model.py: MODELLED and uncalibrated (+-30% or worse), nothing measured.

    python benchmarks/gpu_criteria.py                     # the markdown table, ~10 minutes
    python benchmarks/gpu_criteria.py --cases stem --jsonl out.jsonl
"""
import argparse
import json
import os
import sys
import tempfile

GEMM = {"gemm 1024^3": "M=1024,N=1024,K=1024", "gemm 320x320x1000": "M=320,N=320,K=1000",
        "gemm 1024^3 A^T": "M=1024,N=1024,K=1024,ta=1",
        "gemm 1024^3 B^T": "M=1024,N=1024,K=1024,tb=1",
        "gemm 1024^3 A^T B^T": "M=1024,N=1024,K=1024,ta=1,tb=1"}
CONV = {"3x3 64->64 @56 b1": "1,64,56,56,64,3,pad=1",
        "3x3 256->256 @14 b8": "8,256,14,14,256,3,pad=1",
        "3x3 512->512 @7 b1": "1,512,7,7,512,3,pad=1",
        "3x3 128->128 @28 b1": "1,128,28,28,128,3,pad=1",
        "7x7/2 3->64 @224 (stem)": "1,3,224,224,64,7,stride=2,pad=3",
        "7x7/2 3->64 @80 (stem, W % 4 = 0)": "1,3,80,80,64,7,stride=2,pad=3",
        "7x7/2 3->64 @79 (W % 4 != 0)": "1,3,79,79,64,7,stride=2,pad=3",
        "7x7 8->32 @29": "1,8,29,29,32,7,pad=3",
        "3x3/2 128->128 @56": "1,128,56,56,128,3,stride=2,pad=1",
        "3x3 20->24 @13 (odd)": "1,20,13,13,24,3,pad=1",
        "3x3 dil 2 32->32 @28": "1,32,28,28,32,3,pad=2,dil=2",
        "5x5 32->32 @28": "1,32,28,28,32,5,pad=2",
        "1x1 256->64 @56 (bias)": "1,256,56,56,64,1"}
CASES = {**{k: ("gemm", v) for k, v in GEMM.items()}, **{k: ("conv2d", v) for k, v in CONV.items()}}
FAMILIES = (7, 8, 9)          # 8: for the occupancy criterion (Apple7/8)


_PROFILES = {}      # (op, shape, dtype, the configuration that ran) -> (Profile, info)


def _profile(op, shape, dtype, family, max_groups):
    """(Profile, info) of the call as apple`family`: the counters depend on the configuration
    only (one bank model for every family), so a family whose default is one already
    profiled (found by running one threadgroup) takes that profile."""
    from mpskern.profiling.run import profile_op
    _, probe = profile_op(op, shape, dtype, family=family, max_groups=1)
    key = (op, shape, dtype, json.dumps(probe["config"], sort_keys=True))
    if key not in _PROFILES:
        _PROFILES[key] = profile_op(op, shape, dtype, family=family, max_groups=max_groups)
    prof, info = _PROFILES[key]
    return prof, dict(info, family=family)


def measure(op, shape, dtype, family, max_groups):
    """One profiled call: its criteria counters and modelled numbers (a dict)."""
    from mpskern.profiling.run import model_of
    from mpskern.tuning import tiles
    prof, info = _profile(op, shape, dtype, family, max_groups)
    cfg = info["config"]
    main = prof.dispatches[0]          # the GEMM kernel (a split-K reduce follows it)
    est = model_of(prof, info)
    interior = main["device"]["interior"]
    tg = {k: max(d["threadgroup"][k]["bank_factor"] or 1.0 for d in prof.dispatches)
          for k in ("load", "store")}       # (None: no such access, the split-K reduce)
    keys = ("variant", "BM", "BN", "BK", "WM", "WN", "tiles", "split_k")
    return dict(op=op, shape=shape, dtype=dtype, family=family,
                config={k: cfg[k] for k in keys if k in cfg}, kernel=main["kernel"],
                bank_load=tg["load"], bank_store=tg["store"],
                interior_vector=interior["vector"] if interior["loads"] else None,
                load_vector=main["device"]["load"]["vector"],
                div_in_loops=sum(d["int_div"]["in_loops"] for d in prof.dispatches),
                accumulators=tiles.accumulators(cfg),
                simdgroups_per_core=est.dispatches[0].simdgroups_per_core,
                estimate_us=est.estimate_ms * 1e3, dispatches=len(prof.dispatches))


def _tiles(r):
    c = r["config"]
    t = f"{c['BM']}x{c['BN']}"
    if r["op"] == "conv2d":
        t += f" t{c.get('tiles', 1)}" + (f" s{c['split_k']}" if c.get("split_k", 1) > 1 else "")
    return t


def table(rows):
    """Markdown: one row per case and dtype, apple7 / apple9 side by side (apple8's
    SIMD-groups per core too); a cell that misses a criterion is marked MISS."""
    by = {(r["case"], r["dtype"], r["family"]): r for r in rows}
    out = ["| case | dtype | tiles a7 / a9 | interior vector loads a7 / a9 | bank factor load/store "
           "a7 / a9 | div. in loops | acc./lane | SIMD-groups/core a7 / a8 / a9 | modelled us a7 / a9 |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    seen = []
    for r in rows:
        if (r["case"], r["dtype"]) not in seen:
            seen.append((r["case"], r["dtype"]))
    for case, dtype in seen:
        f = {fam: by.get((case, dtype, fam)) for fam in FAMILIES}
        a7, a9 = f[7], f[9]

        def vec(r):
            if r["interior_vector"] is None:
                return f"n/a (all {r['load_vector']:.0%})"
            return f"{r['interior_vector']:.0%}" + (" MISS" if r["interior_vector"] < 0.9 else "")

        def bank(r):
            s = f"{r['bank_load']:.2f}/{r['bank_store']:.2f}"
            return s + (" MISS" if max(r["bank_load"], r["bank_store"]) > 1.0 + 1e-6 else "")

        def occ(fam):
            r = f[fam]
            if r is None:
                return "-"
            return f"{r['simdgroups_per_core']}" + (" MISS" if fam in (7, 8) and r["simdgroups_per_core"] < 8 else "")

        div = max(r["div_in_loops"] for r in f.values() if r)
        acc = max(r["accumulators"] for r in f.values() if r)
        out.append(f"| {case} | {'f32' if dtype == 'float32' else 'f16'} | {_tiles(a7)} / {_tiles(a9)} "
                   f"| {vec(a7)} / {vec(a9)} | {bank(a7)} / {bank(a9)} | {div:g}{' MISS' if div else ''} "
                   f"| {acc}{' MISS' if acc > 64 else ''} | {occ(7)} / {occ(8)} / {occ(9)} "
                   f"| {a7['estimate_us']:,.0f} / {a9['estimate_us']:,.0f} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", help="comma-separated substrings of case names (default: all)")
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--max-groups", type=int, default=16, help="threadgroups profiled (0: all)")
    p.add_argument("--jsonl", help="also write the raw rows here, one JSON object a line")
    a = p.parse_args(argv)
    import checkout_path  # noqa: F401  (which mpskern: this checkout's when it is built)
    os.environ["MPSKERN_TUNING_DB"] = os.path.join(tempfile.mkdtemp(), "none.json")
    want = [w.strip() for w in a.cases.split(",")] if a.cases else None
    rows = []
    for case, (op, shape) in CASES.items():
        if want and not any(w in case for w in want):
            continue
        for dtype in a.dtypes.split(","):
            for fam in FAMILIES:
                r = dict(case=case, **measure(op, shape, dtype, fam, a.max_groups))
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    if a.jsonl:
        with open(a.jsonl, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    print(table(rows))


if __name__ == "__main__":
    main()
