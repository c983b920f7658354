"""report --compare answers "what changed": both file names, what differs between the two
runs' environments, p10-p90 beside each verdict, the stated rule (a bootstrap of the ratio
of medians when samples were kept, the p10-p90 rule otherwise); the CLI's defaults and
errors; bench's command line, --keep-samples and x-cpu column; the Winograd note."""
import copy
import json
import os
import re

import numpy as np
from typer.testing import CliRunner

from mpskern import ops
from mpskern.bench import runner, schema
from mpskern.cli.main import app
from mpskern.report import compare, data
from test_bench import fake_make

cli = CliRunner()


def _rows(keep=False, command="mpskern bench softmax --preset tiny"):
    sp = ops.get("softmax")
    return runner.run("softmax", sp.preset("tiny")[:2], ["float32"], [fake_make("cpu")],
                      budget=0.02, command=command, keep_samples=keep)


def test_rows_record_the_command_line_and_samples_when_asked():
    rows = _rows(keep=True)
    assert all(r["command"] == "mpskern bench softmax --preset tiny" for r in rows)
    for r in rows:
        s = r["samples_ms"]
        assert len(s) == r["n_samples"] and np.isclose(np.median(s), r["median_ms"])
        schema.validate(r)
    assert all(r["samples_ms"] is None for r in _rows(keep=False))


def test_bench_cli_records_its_command_and_leaves_x_cpu_out_with_cpu_alone(tmp_path):
    out = tmp_path / "b.jsonl"
    r = cli.invoke(app, ["bench", "softmax", "--preset", "tiny", "--backend", "cpu",
                         "--budget", "0.01", "--out", str(out), "--keep-samples"])
    assert r.exit_code == 0, r.output
    assert "x cpu" not in r.stdout and "% peak" in r.stdout
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows and all(x["command"].startswith("mpskern ") and "--keep-samples" in x["command"]
                        for x in rows)
    assert all(len(x["samples_ms"]) == x["n_samples"] for x in rows)
    r = cli.invoke(app, ["bench", "softmax", "--preset", "tiny", "--backend", "cpu",
                         "--backend", "sim", "--budget", "0.01", "--no-save"])
    assert r.exit_code == 0, r.output
    assert "x cpu" in r.stdout


def _pair(tmp_path, keep):
    old = [r for r in _rows(keep=keep) if r["status"] == "ok"]
    new = copy.deepcopy(old)
    for r in new:
        r.update(threads=(old[0]["threads"] or 1) + 7, git_commit="abc123", load_avg=5.0)
    rng = np.random.default_rng(0)       # samples of a known spread, not the loaded machine's
    for o, n in zip(old, new):
        s = rng.normal(1.0, 0.05, 20)
        for r, f in ((o, 1.0), (n, 3.0 if n is new[0] else 1.0)):
            r.update(median_ms=float(np.median(s * f)), p10_ms=float(np.percentile(s * f, 10)),
                     p90_ms=float(np.percentile(s * f, 90)),
                     samples_ms=[float(x) for x in s * f] if keep else None)
    po, pn = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    schema.append_jsonl(po, old)
    schema.append_jsonl(pn, new)
    return po, pn, old, new


def test_compare_names_both_files_the_environment_difference_and_the_spread(tmp_path):
    po, pn, old, new = _pair(tmp_path, keep=False)
    out = tmp_path / "cmp"
    r = cli.invoke(app, ["report", "--compare", str(po), str(pn), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert f"comparing OLD {po} with NEW {pn}" in r.stderr
    assert f"threads: {old[0]['threads']} -> {new[0]['threads']}" in r.stderr
    assert "git_commit:" in r.stderr and "abc123" in r.stderr
    assert "p10-p90" in r.stderr and "[p10-p90]" in r.stderr    # beside the verdict
    for text in ((out / "index.html").read_text(), (out / "report.md").read_text()):
        assert f"Old: {po}. New: {pn}." in text
        assert "threads" in text and "abc123" in text and "load average" in text
        assert "old p10 - p90" in text and "new p10 - p90" in text
        assert "regression (p10-p90)" in text
        assert "more than 5 % slower" in text and "bootstrap" in text      # the rule, stated


def test_compare_uses_a_bootstrap_of_kept_samples(tmp_path):
    po, pn, old, new = _pair(tmp_path, keep=True)
    c = compare.compare(data.load([po]), data.load([pn]))
    slow = c[c.verdict == "regression"]
    assert len(slow) == 1 and slow.rule.iloc[0] == "bootstrap"
    assert 2.0 < slow.ci_lo.iloc[0] <= slow.ratio.iloc[0] <= slow.ci_hi.iloc[0] < 4.5
    same = c[c.verdict == "same"]
    assert (same.rule == "bootstrap").all() and (same.ci_lo <= 1.05).all()
    # identical samples: an interval around 1, never a verdict
    lo, hi = compare.bootstrap_ratio(np.arange(1.0, 21.0), np.arange(1.0, 21.0))
    assert lo <= 1.0 <= hi
    # a shift smaller than the noise stays "same" under the bootstrap too
    rng = np.random.default_rng(1)
    a = rng.normal(10, 2, 30).clip(1)
    lo, hi = compare.bootstrap_ratio(a, a * 1.03)
    assert lo < 1.05


def test_threshold_is_the_one_stated():
    assert "more than 20 % slower" in compare.rule_text(0.2)


def test_compare_without_new_says_new_is_missing(tmp_path):
    po, _, _, _ = _pair(tmp_path, keep=False)
    r = cli.invoke(app, ["report", "--compare", str(po), "-o", str(tmp_path / "x")])
    assert r.exit_code == 2
    assert "NEW is missing" in r.stderr and "'-o'" in r.stderr, r.stderr


def test_report_without_paths_reads_the_default_results_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = cli.invoke(app, ["report", "-o", "rep"])
    assert r.exit_code == 2 and "no results in results/ here" in r.stderr
    os.makedirs("results/sub")                 # a folder without results says so too
    r = cli.invoke(app, ["report", "-o", "rep"])
    assert r.exit_code == 2 and "no results in results/ here" in r.stderr
    schema.append_jsonl("results/bench.jsonl", _rows())
    r = cli.invoke(app, ["report", "-o", "rep"])
    assert r.exit_code == 0, r.output
    assert "reading results/" in r.stderr and (tmp_path / "rep" / "index.html").exists()


def test_report_explains_conv2d_above_peak_and_drops_vs_cpu_with_cpu_alone(tmp_path):
    sp = ops.get("conv2d")
    rows = runner.run("conv2d", sp.preset("tiny")[:1], ["float32"], [fake_make("cpu")],
                      budget=0.02)
    rows[0].update(pct_peak=140.0)
    p = tmp_path / "r.jsonl"
    schema.append_jsonl(p, rows)
    r = cli.invoke(app, ["report", str(p), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Rows above 100 % of peak" in md and "Winograd" in md
    assert "vs cpu" not in md



def test_preset_rows_carry_their_full_shapes():
    for name, sp in ops.TABLE.items():
        for preset in sp.presets:
            for label, shape in sp.preset(preset):
                assert sp.label(shape) in label, (name, preset, label)
    label = ops.get("conv2d").preset("resnet50")[0][0]
    assert re.search(r"\(\d+x\d+x\d+x\d+ \dx\d->\d+ s\dp\d", label), label   # N C H W, R S, K


def test_throughput_figure_draws_no_lines_between_shapes(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from mpskern.report import figures
    sp = ops.get("softmax")
    rows = runner.run("softmax", sp.preset("tiny"), ["float32"],
                      [fake_make("cpu"), fake_make("metal")], budget=0.02)
    saved = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: saved.append(fig))
    assert figures.throughput(data.with_throughput(data.frame(rows)), "softmax", "float32",
                              str(tmp_path / "t.png"))
    (fig,) = saved
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    joined = [ln for ln in ax.get_lines()
              if len(ln.get_xdata()) > 1 and ln.get_linestyle() not in ("None", "none", "")]
    assert not joined, [ln.get_label() for ln in joined]       # points and bars only
    assert len(ax.containers) == 2                             # one errorbar set per backend


def test_every_shape_field_shows_in_the_label():
    # rows whose shapes differ in one field must not read alike in a report's tables and
    # figures (attention's Ev and conv2d's bias did)
    for name, sp in ops.TABLE.items():
        _, base = sp.preset("tiny")[0]
        for f in sp.fields:
            v = base[f.name]
            other = dict(base, **{f.name: (0 if v else 1) if f.name in sp.zero_ok else v + 1})
            try:
                other = sp.complete(other)
            except ValueError:
                continue                      # (group_norm: C + 1 is no multiple of G)
            assert sp.label(other) != sp.label(base), (name, f.name, sp.label(base))


def _attention_report(tmp_path, monkeypatch):
    from mpskern.report import figures
    sp = ops.get("scaled_dot_product_attention")
    cases = [(sp.label(s), s) for s in (sp.parse(t) for t in ("1,2,16,16", "1,2,16,16,Ev=8"))]
    rows = runner.run(sp.name, cases, ["float32"], [fake_make("cpu"), fake_make("metal")],
                      budget=0.02)
    saved = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: (fig.canvas.draw(), saved.append(fig)))
    return figures, data.with_throughput(data.frame(rows)), saved


def test_report_figures_of_attention_rows(tmp_path, monkeypatch):
    figures, df, saved = _attention_report(tmp_path, monkeypatch)
    op = "scaled_dot_product_attention"
    assert figures.throughput(df, op, "float32", str(tmp_path / "t.png"))
    assert figures.speedup(df, op, "float32", str(tmp_path / "s.png"))
    for fig in saved:                       # the long op name: the title is inside the figure
        title = fig.axes[0].title.get_window_extent()
        assert title.x0 >= 0 and title.x1 <= fig.bbox.x1, fig.axes[0].get_title()
    labels = [t.get_text() for t in saved[0].axes[0].get_xticklabels()]
    assert len(set(labels)) == 2 and any("Ev=8" in t for t in labels), labels


def test_roofline_marks_every_op_apart_and_keeps_its_legend_off_the_points(tmp_path, monkeypatch):
    from mpskern.report import figures
    assert set(ops.TABLE) <= set(figures.MARKERS)
    assert len(set(figures.MARKERS.values())) == len(figures.MARKERS)
    figures, df, saved = _attention_report(tmp_path, monkeypatch)
    df = df.assign(peak_gflops=100.0, peak_gbps=50.0, device="cpu")
    df.loc[df.index[0], "gflops"] = 1e-3              # a slow case: low on the plot
    assert figures.roofline(df, "cpu", str(tmp_path / "r.png"))
    ax = saved[0].axes[0]
    legend = ax.get_legend().get_window_extent()
    for pc in ax.collections:
        for x, y in pc.get_offsets():
            px, py = ax.transData.transform((x, y))
            assert not (legend.x0 <= px <= legend.x1 and legend.y0 <= py <= legend.y1)
    assert legend.x1 <= saved[0].bbox.x1              # and inside the figure
