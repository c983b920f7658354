"""mpskern report: HTML + Markdown with figures that decode and are not blank, and the
comparison that flags regressions beyond noise."""
import copy
import os

import numpy as np
import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from mpskern import ops
from mpskern.bench import runner, schema
from mpskern.cli.main import app
from mpskern.report import compare, data
from test_bench import fake_make


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("res")
    rows = []
    for op in ("conv2d", "softmax"):
        sp = ops.get(op)
        cases = sp.preset("tiny")
        rows += runner.run(op, cases, ["float32"], [fake_make(n) for n in ("cpu", "metal", "sim", "mps")],
                           budget=0.02)
    schema.append_jsonl(d / "bench.jsonl", rows)
    return d, rows


def _not_blank(path):
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
    assert img[..., :3].std() > 0.05          # more than a background


def test_report_html_markdown_figures(results, tmp_path):
    d, rows = results
    out = tmp_path / "rep"
    r = CliRunner().invoke(app, ["report", str(d), "-o", str(out)])
    assert r.exit_code == 0, r.output
    html = (out / "index.html").read_text()
    md = (out / "report.md").read_text()
    figs = sorted(os.listdir(out / "figures"))
    assert "conv2d-float32-throughput.png" in figs and "conv2d-float32-speedup.png" in figs
    assert any(f.startswith("roofline-") for f in figs)
    for f in figs:
        _not_blank(out / "figures" / f)
        assert f"figures/{f}" in html and f"figures/{f}" in md
    for text in (html, md):
        assert "Machine" in text and "say nothing about GPU speed" in text
        assert "tiny 3x3 16 (1x16x16x16 3x3-&gt;16 s1p1)" in text or (
            "tiny 3x3 16 (1x16x16x16 3x3->16 s1p1)" in text)      # the preset row's full shape
        assert "check_failed" in text                              # the broken fake
        assert rows[0]["numpy"] in text
    assert "<a href='#conv2d'>conv2d</a>" in html and "[softmax](#softmax)" in md


def test_compare_flags_regressions_beyond_noise(results, tmp_path):
    _, rows = results
    old = [r for r in rows if r["status"] == "ok"]
    new = copy.deepcopy(old)
    slow = new[0]
    for k in ("median_ms", "p10_ms", "p90_ms"):
        slow[k] = old[0][k] * 1.5 if k != "p10_ms" else old[0]["p90_ms"] * 1.2
    noisy = new[1]                               # 10 % slower but inside the old spread
    noisy.update(median_ms=old[1]["median_ms"] * 1.1, p10_ms=old[1]["p10_ms"] * 0.5)
    fast = new[2]
    fast.update(median_ms=old[2]["median_ms"] / 2, p90_ms=old[2]["p10_ms"] / 1.5,
                p10_ms=old[2]["p10_ms"] / 3)
    new[3].update(status="check_failed", median_ms=None, error="wrong")
    c = compare.compare(data.frame(old), data.frame(new))
    v = dict(zip(c.case, c.verdict))
    key = lambda r: f"{r['op']} {r['shape_label']} {r['dtype']} {r['backend']}"  # noqa: E731
    assert v[key(slow)] == "regression"
    assert v[key(noisy)] == "same"
    assert v[key(fast)] == "improvement"
    assert v[key(new[3])] == "broken"
    assert set(compare.regressions(c).case) == {key(slow), key(new[3])}

    po, pn = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    schema.append_jsonl(po, old)
    schema.append_jsonl(pn, new)
    out = tmp_path / "cmp"
    r = CliRunner().invoke(app, ["report", "--compare", str(po), str(pn), "-o", str(out),
                                 "--fail-on-regression"])
    assert r.exit_code == 1 and "2 regression(s)" in r.stderr
    _not_blank(out / "figures" / "comparison.png")
    assert "Comparison with the old results" in (out / "index.html").read_text()


def test_report_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)     # no results/ here (other tests' benches write the session cwd's)
    r = CliRunner().invoke(app, ["report", "-o", str(tmp_path)])
    assert r.exit_code == 2 and "give results" in r.stderr
    r = CliRunner().invoke(app, ["report", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path)])
    assert r.exit_code == 2 and "nope.jsonl" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    r = CliRunner().invoke(app, ["report", str(bad), "-o", str(tmp_path)])
    assert r.exit_code == 2 and "bad.jsonl:1" in r.stderr


def test_report_of_an_empty_folder_or_file_names_it(tmp_path, monkeypatch):
    # an empty folder said "no result rows in " (the folder expanded to no files, and the
    # message named the expansion)
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    (tmp_path / "none.jsonl").write_text("")
    for args, want in (([str(empty)], f"{empty} (no .jsonl files in the folder)"),
                       ([str(tmp_path / "none.jsonl")], "none.jsonl"),
                       ([str(empty), str(tmp_path / "none.jsonl")], f"{empty} (no .jsonl")):
        r = CliRunner().invoke(app, ["report", *args, "-o", str(tmp_path / "out")])
        assert r.exit_code == 2 and "no result rows in" in r.stderr and want in r.stderr, r.stderr


def test_kernel_column_names_the_kernel_and_copies():
    from mpskern.report.render import _config
    assert _config({"kernel": "gemm_simd_f32", "level": "family"}, True) == "gemm_simd_f32 (family)"
    assert _config({"primitive": "MPSGraph conv2d"}, False) == "MPSGraph conv2d; arrays copied"
    assert _config(None, None) == "" and _config({"kernel": "k"}, float("nan")) == "k"
