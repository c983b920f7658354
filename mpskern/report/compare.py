"""Comparing two sets of results: which cases got slower (or faster) beyond noise, and what
differs between the two runs' environments.

The rule, per case (op, shape, dtype, backend) measured ok in both:
- with every sample recorded in both rows (`mpskern bench --keep-samples`): a percentile
  bootstrap of the ratio of medians (new / old; BOOTSTRAP resamples of each run's samples,
  seeded): a regression when the 95 % interval lies wholly above 1 + threshold, an
  improvement when wholly below 1 / (1 + threshold);
- otherwise, from the recorded quantiles: a regression when the median ratio exceeds
  1 + threshold AND the new p10-p90 range lies wholly above the old one (new p10 > old p90),
  an improvement symmetrically: both a meaningful size and a difference the noise of either
  run cannot explain.
A case that passed its check before and fails or errors now is a regression too.
"""
import numpy as np
import pandas as pd

from mpskern.report.data import CASE, latest

THRESHOLD = 0.05
BOOTSTRAP = 2000
MIN_SAMPLES = 5          # fewer recorded samples: the quantile rule
# what can make two runs differ besides the code's speed
ENV_FIELDS = ["device", "cpu", "cpu_count", "gpu", "os", "threads", "mpskern_version",
              "git_commit", "python", "numpy", "peer_version", "budget_s", "command"]


def rule_text(threshold=THRESHOLD):
    t = f"{100 * threshold:g} %"
    return (f"A regression is a case whose new median is more than {t} slower with the noise "
            "of both runs excluded: with recorded samples (bench --keep-samples) the 95 % "
            f"bootstrap interval of the ratio of medians ({BOOTSTRAP} resamples) lies wholly "
            f"above 1 + {threshold:g}; otherwise the new p10-p90 range lies wholly above the "
            "old one. An improvement is the same the other way; a case that passed its check "
            "before and fails now is a regression too.")


def _samples(v):
    return np.asarray(v, float) if isinstance(v, (list, tuple, np.ndarray)) and \
        len(v) >= MIN_SAMPLES else None


def bootstrap_ratio(old, new, n=BOOTSTRAP, seed=0):
    """95 % percentile interval of median(new*) / median(old*) over n resamples."""
    rng = np.random.default_rng(seed)
    mo = np.median(rng.choice(old, (n, len(old))), axis=1)
    mn = np.median(rng.choice(new, (n, len(new))), axis=1)
    lo, hi = np.percentile(mn / mo, [2.5, 97.5])
    return float(lo), float(hi)


def compare(old, new, threshold=THRESHOLD):
    """DataFrame of matched cases with old/new medians and p10/p90, ratio (new/old), the
    bootstrap interval where samples exist, the rule used and the verdict: regression,
    improvement, same (within noise), broken (was ok, now failing), fixed, failing, or
    only-old / only-new."""
    if not 0 <= threshold < float("inf"):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold}")
    o, n = latest(old), latest(new)
    m = o.merge(n, on=CASE, how="outer", suffixes=("_old", "_new"), indicator=True)
    out = []
    for _, r in m.iterrows():
        case = f"{r['op']} {r.get('shape_label_new') or r.get('shape_label_old')} {r['dtype']} {r['backend']}"
        rec = dict(case=case, op=r["op"], shape_key=r["shape_key"], dtype=r["dtype"],
                   backend=r["backend"], old_ms=r.get("median_ms_old"),
                   old_p10=r.get("p10_ms_old"), old_p90=r.get("p90_ms_old"),
                   new_ms=r.get("median_ms_new"), new_p10=r.get("p10_ms_new"),
                   new_p90=r.get("p90_ms_new"), ratio=None, ci_lo=None, ci_hi=None, rule=None)
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
                so, sn = _samples(r.get("samples_ms_old")), _samples(r.get("samples_ms_new"))
                if so is not None and sn is not None:
                    lo, hi = bootstrap_ratio(so, sn)
                    rec.update(ci_lo=lo, ci_hi=hi, rule="bootstrap")
                    slower, faster = lo > 1 + threshold, hi < 1 / (1 + threshold)
                else:
                    rec["rule"] = "p10-p90"
                    slower = ratio > 1 + threshold and r["p10_ms_new"] > r["p90_ms_old"]
                    faster = ratio < 1 / (1 + threshold) and r["p90_ms_new"] < r["p10_ms_old"]
                rec["verdict"] = "regression" if slower else "improvement" if faster else "same"
        out.append(rec)
    return pd.DataFrame(out, columns=["case", "op", "shape_key", "dtype", "backend", "old_ms",
                                      "old_p10", "old_p90", "new_ms", "new_p10", "new_p90",
                                      "ratio", "ci_lo", "ci_hi", "rule", "verdict"])


def _values(df, field):
    if field not in df:
        return []
    return sorted({str(v) for v in df[field].dropna().unique()})


def environment(old, new):
    """[(field, old values, new values)] for each ENV_FIELDS column whose values differ
    between the two result sets, plus their load averages while measuring."""
    diff = []
    for f in ENV_FIELDS:
        a, b = _values(old, f), _values(new, f)
        if a != b:
            diff.append((f, ", ".join(a) or "-", ", ".join(b) or "-"))
    la = []
    for df in (old, new):
        v = df["load_avg"].dropna().astype(float) if "load_avg" in df else pd.Series([], dtype=float)
        la.append(f"{v.min():.1f} to {v.max():.1f}" if len(v) else "-")
    diff.append(("load average (1 min)", la[0], la[1]))
    return diff


def regressions(cmp):
    return cmp[cmp.verdict.isin(["regression", "broken"])]
