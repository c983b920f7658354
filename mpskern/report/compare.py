"""Comparing two sets of results: which cases got slower (or faster) beyond noise.

A case (op, shape, dtype, backend) regressed when its new median is more than `threshold`
slower than the old one AND the two runs' p10-p90 ranges do not overlap (new p10 above old
p90): both a meaningful size and a difference the noise cannot explain. A case that passed
its check before and fails or errors now is a regression too.
"""
import pandas as pd

from mpskern.report.data import CASE, latest

THRESHOLD = 0.05


def compare(old, new, threshold=THRESHOLD):
    """DataFrame of matched cases with old/new medians, ratio (new/old) and verdict:
    regression, improvement, same (within noise), broken (was ok, now failing),
    fixed, or only-old / only-new."""
    if not 0 <= threshold < float("inf"):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold}")
    o, n = latest(old), latest(new)
    m = o.merge(n, on=CASE, how="outer", suffixes=("_old", "_new"), indicator=True)
    out = []
    for _, r in m.iterrows():
        case = f"{r['op']} {r.get('shape_label_new') or r.get('shape_label_old')} {r['dtype']} {r['backend']}"
        rec = dict(case=case, op=r["op"], shape_key=r["shape_key"], dtype=r["dtype"],
                   backend=r["backend"], old_ms=r.get("median_ms_old"),
                   new_ms=r.get("median_ms_new"), ratio=None)
        if r["_merge"] != "both":
            rec["verdict"] = "only-old" if r["_merge"] == "left_only" else "only-new"
        else:
            ok_o, ok_n = r["status_old"] == "ok", r["status_new"] == "ok"
            if ok_o and not ok_n:
                rec["verdict"] = "broken"
            elif ok_n and not ok_o:
                rec["verdict"] = "fixed"
            elif not ok_o:
                rec["verdict"] = "failing"
            else:
                ratio = r["median_ms_new"] / r["median_ms_old"]
                rec["ratio"] = ratio
                if ratio > 1 + threshold and r["p10_ms_new"] > r["p90_ms_old"]:
                    rec["verdict"] = "regression"
                elif ratio < 1 / (1 + threshold) and r["p90_ms_new"] < r["p10_ms_old"]:
                    rec["verdict"] = "improvement"
                else:
                    rec["verdict"] = "same"
        out.append(rec)
    return pd.DataFrame(out, columns=["case", "op", "shape_key", "dtype", "backend", "old_ms",
                                      "new_ms", "ratio", "verdict"])


def regressions(cmp):
    return cmp[cmp.verdict.isin(["regression", "broken"])]
