"""Writes the report: OUT/index.html and OUT/report.md (the same content), figures under
OUT/figures/. The content is built once as a list of blocks (headings, paragraphs,
tables, images) and rendered twice."""
import datetime
import html
import os
import re

from mpskern.atomic_write import atomic_write
from mpskern.report import figures
from mpskern.report.compare import regressions
from mpskern.report.data import backend_sort_key, latest, shape_order, with_throughput

MACHINE_COLS = ["os", "cpu", "cpu_count", "gpu", "python", "numpy", "mpskern_version",
                "git_commit", "command"]
OVER_PEAK = ("Rows above 100 % of peak: conv2d's GFLOP/s count the direct convolution's FLOPs "
             "(2 N K C/g R S P Q) whatever the algorithm. The cpu backend runs 3x3 stride-1 "
             "convolutions as Winograd F(4x4, 3x3) (about 4x fewer multiplications) or "
             "F(2x2, 3x3) (2.25x fewer), so its effective rate can pass the FMA peak; the time "
             "is what to compare.")


def _f(v, fmt="{:.3g}"):
    try:
        if v is None or v != v:
            return "-"
    except TypeError:
        return "-"
    return fmt.format(v)


def _slug(s):
    return re.sub(r"[^A-Za-z0-9]+", "-", str(s)).strip("-").lower()


def _machine(df):
    rows = []
    for c in MACHINE_COLS:
        vals = sorted({str(v) for v in df[c].dropna().unique()}) if c in df else []
        rows.append([c, ", ".join(vals) or "-"])
    ts = df.timestamp.dropna()
    if not ts.empty:
        rows.append(["measured", f"{ts.min():%Y-%m-%d %H:%M} to {ts.max():%Y-%m-%d %H:%M} UTC"])
    peers = sorted({f"{b} {v}" for b, v in zip(df.backend, df.peer_version)
                    if isinstance(v, str) and v})
    if peers:
        rows.append(["peers", ", ".join(peers)])
    rows.append(["runs", str(df.run_id.nunique())])
    la = df.load_avg.dropna().astype(float) if "load_avg" in df else None
    if la is not None and not la.empty:
        rows.append(["load average (1 min)", f"{la.min():.1f} to {la.max():.1f} while measuring"])
    return ("table", ["", ""], rows)


def _devices(df):
    rows = []
    for (b, dev), g in df.groupby(["backend", "device"], dropna=False, sort=False):
        pk = g.dropna(subset=["peak_gbps"])
        src = pk.peak_source.iloc[0] if not pk.empty else (
            "none: simulator" if g.simulated.fillna(False).astype(bool).any() else "unknown")
        rows.append([b, str(dev), _f(pk.peak_gflops.max() if not pk.empty else None, "{:,.0f}"),
                     _f(pk.peak_gbps.max() if not pk.empty else None, "{:,.0f}"), src,
                     ", ".join(sorted({str(t) for t in g.timer.dropna()}))])
    rows.sort(key=lambda r: backend_sort_key(r[0]))
    return ("table", ["backend", "device", "peak GFLOP/s", "peak GB/s", "peak source", "timer"],
            rows)


def _case_table(d):
    """One row per shape x backend. Backends with a device clock (gpu, sim) time the
    kernel alone; their wall time per call (with Python and dispatch) gets its own column."""
    dev_clock = bool((d.timer.fillna("wall") != "wall").any())
    vs_cpu = bool((d.backend != "cpu").any())     # cpu alone: a column of 1.00x says nothing
    rows = []
    for k in shape_order(d):
        for _, r in d[d.shape_key == k].sort_values(
                "backend", key=lambda s: s.map(backend_sort_key)).iterrows():
            be = f"{r.backend} ({'modelled' if r.timer == 'model' else 'simulator' if r.simulated else r.timer})" \
                if r.timer != "wall" else r.backend
            wall = [_f(r.wall_median_ms, "{:.4g}")] if dev_clock else []
            if r.status != "ok":
                rows.append([r.shape_label, be, "-", "-"] + ["-"] * len(wall)
                            + ["-", "-"] + ["-"] * vs_cpu + [_f(r.max_err, "{:.1e}"),
                                                             _config(r.config, r.zero_copy),
                               f"{r.status}: {r.error}"])
                continue
            note = f"unstable ({r.unstable_reason})" if r.unstable else ""
            rows.append([r.shape_label, be, _f(r.median_ms, "{:.4g}"),
                         f"{_f(r.p10_ms, '{:.4g}')} - {_f(r.p90_ms, '{:.4g}')}"] + wall
                        + [_f(r.value, "{:,.1f}"), _f(r.pct_peak, "{:.0f}%")]
                        + [_f(r.speedup_vs_cpu, "{:.2f}x")] * vs_cpu
                        + [_f(r.max_err, "{:.1e}"),
                           _config(r.config, r.zero_copy), note])
    unit = d.unit.dropna().iloc[0] if d.unit.notna().any() else "throughput"
    return ("table", ["shape", "backend (timer)", "median ms", "p10 - p90 ms"]
            + (["wall median ms"] if dev_clock else [])
            + [unit, "% peak"] + ["vs cpu"] * vs_cpu + ["max err", "kernel", "note"], rows)


def _config(c, zero_copy=None):
    """The kernel (ours, and how its tiles were chosen) or MPS primitive a GPU backend
    reported, and whether it had to copy the numpy arrays."""
    if not isinstance(c, dict):
        return ""
    name = c.get("kernel") or c.get("primitive")
    if not name:
        return ""
    text = f"{name} ({c['level']})" if c.get("level") else str(name)
    if zero_copy is not None and zero_copy == zero_copy and not bool(zero_copy):
        text += "; arrays copied"
    return text


def build(df, out, cmp=None, title="mpskern benchmark report", info=None):
    """Write the report for results DataFrame `df` (all rows; the latest per case is
    shown) and optional comparison `cmp` into folder `out`; `info`: the comparison's
    {"old", "new" (file names), "env" (compare.environment), "threshold"}. Returns the
    index.html path."""
    figdir = os.path.join(out, "figures")
    os.makedirs(figdir, exist_ok=True)
    df = with_throughput(latest(df))
    now = datetime.datetime.now(datetime.timezone.utc)
    blocks = [("h1", title), ("p", f"Generated {now:%Y-%m-%d %H:%M} UTC from {len(df)} cases.")]
    if df.simulated.fillna(False).astype(bool).any():
        blocks.append(("warn", "Rows marked sim ran mpskern's Metal kernels in the CPU simulator. "
                       "Their times measure CPU emulation and say nothing about GPU speed; they "
                       "are here to show the kernels run and pass the check, and are left out of the "
                       "speedup figures and the roofline."))
    if (df.timer == "model").any():
        blocks.append(("warn", "Rows marked model-appleN are estimates of mpskern's performance "
                       "model (docs/profiling.md) from the simulator's counters, not measurements "
                       "(uncalibrated: +-30% or worse); they are never compared with measured rows."))
    blocks += [("h2", "Machine"), _machine(df), ("h3", "Devices and peaks"), _devices(df)]
    blocks.append(("p", "Times are per call: median and p10-p90 of at least 10 samples (each "
                        "sample a calibrated loop of >= 1 ms) after a warm-up, or of at least 3 "
                        "for a case too slow for 10 in 4x its budget; every case was checked "
                        "against a float64 reference before timing. 'unstable' marks a spread "
                        "(IQR) above 10 % of the median, over 10 % outliers (MAD z-score > 3.5) "
                        "or fewer than 10 samples. Throughput uses mpskern.structs' FLOP and "
                        "compulsory byte counts."))
    ops = sorted(df.op.unique())
    blocks.append(("toc", (["Comparison with the old results"] if cmp is not None else [])
                   + ops + ["Roofline"]))
    if cmp is not None:
        blocks += _compare_blocks(cmp, figdir, info or {})
    for op in ops:
        blocks.append(("h2", op))
        for dt in sorted(df[df.op == op].dtype.unique()):
            d = df[(df.op == op) & (df.dtype == dt)]
            blocks.append(("h3", f"{op} {dt}"))
            for kind, fn in (("throughput", figures.throughput), ("speedup", figures.speedup)):
                name = f"{_slug(op)}-{dt}-{kind}.png"
                if fn(df, op, dt, os.path.join(figdir, name)):
                    blocks.append(("img", f"figures/{name}", f"{op} {dt} {kind}"))
            if (d.op == "conv2d").any() and (d.pct_peak.astype(float) > 100).any():
                blocks.append(("p", OVER_PEAK))
            blocks.append(_case_table(d))
    blocks.append(("h2", "Roofline"))
    devs = df[df.peak_gflops.notna() & ~df.simulated.fillna(False).astype(bool)].device.dropna().unique()
    if len(devs) == 0:
        blocks.append(("p", "No device with a known peak in these results (the simulator has "
                            "none), so no roofline."))
    for dev in sorted(devs):
        name = f"roofline-{_slug(dev)}.png"
        if figures.roofline(df, dev, os.path.join(figdir, name)):
            blocks.append(("img", f"figures/{name}", f"roofline {dev}"))
    blocks.append(("p", "Roofs: min(peak FLOP/s, intensity x peak bandwidth). Intensity counts "
                        "compulsory traffic only; a memory-bound point above the bandwidth roof "
                        "ran from cache. Left out: simulator rows, and dtypes without a known "
                        "FLOP/s peak (float16 on a CPU). A measured CPU peak is the best of "
                        "numpy's sgemm and of the cases measured on the machine."))
    index = os.path.join(out, "index.html")
    with atomic_write(index) as f:
        f.write(to_html(blocks, title))
    with atomic_write(os.path.join(out, "report.md")) as f:
        f.write(to_markdown(blocks))
    return index


def _compare_blocks(cmp, figdir, info):
    from mpskern.report.compare import THRESHOLD, rule_text
    reg = regressions(cmp)
    b = [("h2", "Comparison with the old results")]
    if info.get("old"):
        b.append(("p", f"Old: {info['old']}. New: {info['new']}."))
    env = info.get("env") or []
    if env:
        b.append(("p", "What differs between the two runs' environments (a difference here "
                       "can explain a change as well as the code can):"))
        b.append(("table", ["", "old", "new"], [list(e) for e in env]))
    b.append(("p", f"{len(reg)} regression(s) beyond noise, "
                   f"{int((cmp.verdict == 'improvement').sum())} improvement(s), "
                   f"{int((cmp.verdict == 'same').sum())} within noise. "
                   + rule_text(info.get("threshold", THRESHOLD))))
    if reg.shape[0]:
        b.append(("warn", "Regressions: " + "; ".join(reg.case)))
    if figures.comparison(cmp, os.path.join(figdir, "comparison.png")):
        b.append(("img", "figures/comparison.png", "comparison"))
    rows = [[r.case, _f(r.old_ms, "{:.4g}"), f"{_f(r.old_p10, '{:.4g}')} - {_f(r.old_p90, '{:.4g}')}",
             _f(r.new_ms, "{:.4g}"), f"{_f(r.new_p10, '{:.4g}')} - {_f(r.new_p90, '{:.4g}')}",
             _f(r.ratio, "{:.3f}") + (f" [{r.ci_lo:.3f}, {r.ci_hi:.3f}]" if r.rule == "bootstrap"
                                      else ""), r.verdict + (f" ({r.rule})" if r.rule else "")]
            for r in cmp.sort_values("ratio", ascending=False).itertuples()]
    b.append(("table", ["case", "old median ms", "old p10 - p90", "new median ms",
                        "new p10 - p90", "new / old [95 % interval]", "verdict (rule)"], rows))
    return b


_CSS = """body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;
margin:2em auto;padding:0 1em;color:#222}table{border-collapse:collapse;margin:.6em 0 1.4em;
font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}td{font-variant-numeric:tabular-nums}img{max-width:100%;margin:.4em 0}
.warn{background:#fff4e0;border-left:4px solid #f0a020;padding:.6em 1em}h2{margin-top:1.8em;
border-bottom:1px solid #ddd}"""


def _md_anchor(title):
    """GitHub's heading anchor: lower case, spaces to dashes, punctuation but - and _ gone."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _md_cell(c):
    return str(c).replace("|", "\\|").replace("\n", " ")


def _html_table(head, rows):
    """One table row a line (readable source; two reports diff row by row)."""
    e = html.escape
    lines = ["<table>", "<tr>" + "".join(f"<th>{e(str(h))}</th>" for h in head) + "</tr>"]
    lines += ["<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows]
    return "\n".join(lines + ["</table>"])


def _md_table(head, rows):
    hdr = [h or " " for h in head]
    lines = ["| " + " | ".join(map(_md_cell, hdr)) + " |", "|" + "---|" * len(hdr)]
    return "\n".join(lines + ["| " + " | ".join(map(_md_cell, r)) + " |" for r in rows]) + "\n"


def _html_heading(level):
    return lambda b: f"<h{level} id='{_slug(b[1])}'>{html.escape(b[1])}</h{level}>"


# block kind -> (its HTML, its Markdown); a block is (kind, text or items, ...)
FORMATS = {
    "h1": (_html_heading(1), lambda b: f"# {b[1]}\n"),
    "h2": (_html_heading(2), lambda b: f"## {b[1]}\n"),
    "h3": (_html_heading(3), lambda b: f"### {b[1]}\n"),
    "p": (lambda b: f"<p>{html.escape(b[1])}</p>", lambda b: f"{b[1]}\n"),
    "warn": (lambda b: f"<p class='warn'>{html.escape(b[1])}</p>",
             lambda b: f"> **Note:** {b[1]}\n"),
    "img": (lambda b: f"<img src='{html.escape(b[1])}' alt='{html.escape(b[2])}'>",
            lambda b: f"![{b[2]}]({b[1]})\n"),
    "toc": (lambda b: "<p>" + " | ".join(f"<a href='#{_slug(t)}'>{html.escape(t)}</a>"
                                         for t in b[1]) + "</p>",
            lambda b: " | ".join(f"[{t}](#{_md_anchor(t)})" for t in b[1]) + "\n"),
    "table": (lambda b: _html_table(b[1], b[2]), lambda b: _md_table(b[1], b[2])),
}


def to_html(blocks, title):
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{_CSS}</style></head><body>"]
    out += [FORMATS[b[0]][0](b) for b in blocks if b[0] in FORMATS]
    out.append("</body></html>\n")
    return "\n".join(out)


def to_markdown(blocks):
    return "\n".join(FORMATS[b[0]][1](b) for b in blocks if b[0] in FORMATS)
