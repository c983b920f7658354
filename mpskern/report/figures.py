"""The report's matplotlib figures, drawn on Agg canvases (no pyplot state, no display):
throughput per shape per backend (points with p10-p90 bars), speedup over cpu, roofline, and the
comparison of two runs."""
import math
import textwrap

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from mpskern.report.data import backend_sort_key, shape_order

COLORS = {"cpu": "#1f77b4", "metal": "#ff7f0e", "mps": "#2ca02c", "sim": "#7f7f7f",
          "torch-cpu": "#d62728", "torch-mps": "#9467bd", "mlx": "#8c564b"}
# the roofline's marker per op, one each (an op without one would share conv2d's circle)
MARKERS = {"conv2d": "o", "matmul": "s", "gemm": "D", "max_pool2d": "v", "avg_pool2d": "^",
           "softmax": "<", "log_softmax": ">", "layer_norm": "P", "rms_norm": "X",
           "batch_norm": "h", "group_norm": "*", "linear": "d", "adaptive_avg_pool2d": "p",
           "scaled_dot_product_attention": "H"}
_TIMES = FuncFormatter(lambda v, _: f"{v:.3g}x")
SIM_NOTE = "sim = CPU emulation of the Metal kernels: its speed says nothing about a GPU"


def _color(b):
    return COLORS.get(b, "#17becf")


def _label(b, simulated):
    if str(b).startswith("model-"):
        return f"{b} (modelled)"
    return f"{b} (simulator)" if simulated else b


def _save(fig, path):
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110)


def _wide(n):
    return max(6.5, min(16.0, 1.0 * n + 2.5))


def _fit_title(text, fig):
    """The title on two lines when one would be wider than the figure (long op names:
    scaled_dot_product_attention's was cut off on a figure of few shapes)."""
    per_line = int(fig.get_figwidth() * 11)          # characters of 10 pt per inch, about
    return "\n".join(textwrap.wrap(text, per_line)) if len(text) > per_line else text


def _log_if_wide(ax, values, axis="y"):
    v = [x for x in values if x and x > 0 and math.isfinite(x)]
    if v and max(v) / min(v) > 20:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def throughput(df, op, dtype, path):
    """Metric per shape (x, smallest work first) per backend: a point at the median with a
    p10-p90 bar, backends side by side (the shapes are unrelated: no lines between them)."""
    d = df[(df.op == op) & (df.dtype == dtype) & (df.status == "ok")]
    if d.empty:
        return False
    shapes = shape_order(d)
    x = np.arange(len(shapes))
    labels = [d[d.shape_key == k].shape_label.iloc[0] for k in shapes]
    fig = Figure(figsize=(_wide(len(shapes)), 4.8))
    ax = fig.add_subplot()
    unit = d.unit.iloc[0]
    sim = False
    vals = []
    names = sorted(d.backend.unique(), key=backend_sort_key)
    width = 0.7 / max(len(names), 1)
    for i, b in enumerate(names):
        db = d[d.backend == b].set_index("shape_key").reindex(shapes)
        simulated = bool(db.simulated.fillna(False).any())
        sim |= simulated
        v = db.value.to_numpy(float)
        vals += list(v)
        xb = x + (i - (len(names) - 1) / 2) * width
        err = np.vstack([v - db.lo.to_numpy(float), db.hi.to_numpy(float) - v])
        ax.errorbar(xb, v, yerr=np.where(np.isfinite(err), np.maximum(err, 0), 0), ls="none",
                    marker="s" if simulated else "o", color=_color(b), capsize=3,
                    mfc="white" if simulated else _color(b), label=_label(b, simulated))
        unst = db.unstable.fillna(False).astype(bool).to_numpy()
        if unst.any():
            ax.plot(xb[unst], v[unst], "o", mfc="none", mec="k", ms=11)
    _log_if_wide(ax, vals)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{unit} (higher is better)")
    ax.set_xlabel("shape (ordered by work)")
    ax.set_title(_fit_title(f"{op} {dtype}: throughput per shape (point: median, bar: p10-p90)",
                            fig), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    h, lab = ax.get_legend_handles_labels()
    if d.unstable.fillna(False).astype(bool).any():
        h.append(Line2D([], [], marker="o", ls="", mfc="none", mec="k", ms=11))
        lab.append("unstable timing")
    ax.legend(h, lab, fontsize=8, loc="best")
    if sim:
        fig.text(0.01, 0.01, SIM_NOTE, fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.03 if sim else 0, 1, 1))
    _save(fig, path)
    return True


def speedup(df, op, dtype, path):
    """Speedup over cpu per shape, one bar per non-cpu backend (log scale, 1x marked).
    The simulator is left out: a speedup of an emulation over the CPU means nothing."""
    d = df[(df.op == op) & (df.dtype == dtype) & (df.status == "ok") & (df.backend != "cpu")
           & df.speedup_vs_cpu.notna() & ~df.simulated.fillna(False).astype(bool)]
    if d.empty:
        return False
    shapes = shape_order(df[(df.op == op) & (df.dtype == dtype)])
    shapes = [k for k in shapes if k in set(d.shape_key)]
    labels = [d[d.shape_key == k].shape_label.iloc[0] for k in shapes]
    bes = sorted(d.backend.unique(), key=backend_sort_key)
    fig = Figure(figsize=(_wide(len(shapes)), 4.6))
    ax = fig.add_subplot()
    w = 0.8 / len(bes)
    x = np.arange(len(shapes))
    vals = []
    for i, b in enumerate(bes):
        db = d[d.backend == b].set_index("shape_key").reindex(shapes)
        v = db.speedup_vs_cpu.to_numpy(float)
        vals += list(v)
        # bars grow from 1x (up: faster than cpu, down: slower)
        ax.bar(x + (i - (len(bes) - 1) / 2) * w, v - 1.0, w, bottom=1.0, color=_color(b),
               label=b, edgecolor="white")
    ax.axhline(1.0, color="k", lw=1)
    fin = [v for v in vals if v and math.isfinite(v)]
    ax.set_yscale("log")
    if fin:
        lo, hi = min(fin + [1.0]), max(fin + [1.0])
        ax.set_ylim(lo / 1.6, hi * 1.6)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.yaxis.set_major_formatter(_TIMES)
    # within about a decade the only major tick is 1x: label the minor ones too
    narrow = bool(fin) and max(fin + [1.0]) / min(fin + [1.0]) < 30
    ax.yaxis.set_minor_formatter(_TIMES if narrow else NullFormatter())
    ax.set_ylabel("speedup over cpu (log scale; above 1x is faster)")
    ax.set_title(_fit_title(f"{op} {dtype}: speedup over mpskern cpu (ratio of medians)", fig),
                 fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    return True


def roofline(df, device, path):
    """Attained GFLOP/s against arithmetic intensity for every case on `device` with a
    known peak, under the roofs min(peak FLOP/s, intensity x peak bandwidth)."""
    # cases of a dtype without a FLOP/s peak (float16 on a CPU) have no roof: left out
    d = df[(df.device == device) & (df.status == "ok") & df.peak_gflops.notna()
           & df.peak_gbps.notna() & ~df.simulated.fillna(False).astype(bool)]
    if d.empty:
        return False
    fig = Figure(figsize=(10.5, 5.6))
    ax = fig.add_subplot()
    ai = d.intensity.astype(float)
    xs = np.logspace(math.log10(max(ai.min() / 4, 1e-3)), math.log10(ai.max() * 4), 200)
    # a measured peak may have been raised during the run (peaks.raise_measured): the
    # highest value recorded is the device's peak
    bw = float(d.peak_gbps.max())
    roofs = d.groupby("dtype").peak_gflops.max().dropna()
    styles = ["-", ":"]
    for i, (dt, pk) in enumerate(sorted(roofs.items())):
        ax.plot(xs, np.minimum(pk, xs * bw), styles[i % 2], color="k", lw=1.5,
                label=f"roof {dt}: {pk:,.0f} GFLOP/s, {bw:,.0f} GB/s")
        ax.axvline(pk / bw, color="#999", lw=0.6, ls="--")
    for (b, op), g in d.groupby(["backend", "op"]):
        ax.scatter(g.intensity.astype(float), g.gflops.astype(float), color=_color(b),
                   marker=MARKERS.get(op, "o"), s=36, edgecolor="k", linewidth=0.4, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte, compulsory traffic)")
    ax.set_ylabel("attained GFLOP/s")
    src = d.loc[d.peak_gflops.astype(float).idxmax(), "peak_source"] \
        if d.peak_gflops.notna().any() else d.peak_source.dropna().iloc[0]
    ax.set_title(f"Roofline: {device} ({', '.join(sorted(roofs.index))})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    h1 = [Line2D([], [], color=_color(b), marker="o", ls="", label=b)
          for b in sorted(d.backend.unique(), key=backend_sort_key)]
    h2 = [Line2D([], [], color="#555", marker=MARKERS.get(o, "o"), ls="", label=o)
          for o in sorted(d.op.unique())]
    h0, l0 = ax.get_legend_handles_labels()
    # beside the axes, not on them: slow cases (low GFLOP/s) sit where "lower right" was
    ax.legend(h0 + h1 + h2, l0 + [h.get_label() for h in h1 + h2], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.text(0.01, 0.01, f"peaks: {src}", fontsize=6.5, color="#555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _save(fig, path)
    return True


def comparison(cmp, path):
    """NEW / OLD median time per case, regressions red, improvements green."""
    d = cmp[cmp.ratio.notna()]
    if d.empty:
        return False
    d = d.sort_values("ratio")
    colors = d.verdict.map({"regression": "#d62728", "improvement": "#2ca02c"}).fillna("#999")
    fig = Figure(figsize=(8.5, max(3.0, 0.28 * len(d) + 1.4)))
    ax = fig.add_subplot()
    y = np.arange(len(d))
    ax.barh(y, d.ratio.to_numpy(float) - 1.0, left=1.0, color=colors.to_list())
    ax.axvline(1.0, color="k", lw=1)
    ax.set_yticks(y)
    ax.set_yticklabels(d.case.to_list(), fontsize=7)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(_TIMES)
    ax.xaxis.set_minor_formatter(_TIMES)
    ax.set_xlabel("new median time / old median time (log scale; above 1x is slower)")
    ax.set_title("Comparison: red = regression beyond noise, green = improvement, grey = within noise",
                 fontsize=9)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    return True
