"""`mpskern report` on a hand-edited or damaged row whose time or count is NaN, infinite
(json's NaN / Infinity / 1e400) or negative: one line naming file, line, column and value,
no report (it used to render: a NaN median as '-' beside the row's stored 26 % of peak,
Infinity as 'inf', a negative time as measured). Other numbers stay as
they are."""
import json

import pytest

from mpskern.bench import schema
from test_cli_errors import _clean_failure, cli, rows  # noqa: F401 (rows: a fixture)


@pytest.mark.parametrize("column, text", [("median_ms", "NaN"), ("p10_ms", "Infinity"),
                                          ("min_ms", "-0.5"), ("flops", "1e400"),
                                          ("n_samples", "-3"), ("wall_median_ms", "-Infinity")])
def test_a_non_finite_or_negative_time_or_count_names_it(rows, tmp_path, column, text):  # noqa: F811
    p = tmp_path / "bench.jsonl"
    schema.append_jsonl(p, rows[:1])
    line = json.dumps(dict(rows[0], **{column: 12345.5})).replace("12345.5", text)
    with open(p, "a") as f:
        f.write(line + "\n")
    _clean_failure(cli("report", str(p), "-o", str(tmp_path / "rep")), f"{p}:2",
                   f"{column} is", "finite, >= 0")
    assert not (tmp_path / "rep").exists()


def test_a_non_finite_error_or_ratio_is_still_read(rows, tmp_path):  # noqa: F811
    """Only times and counts are held to finite, >= 0: other numbers (max_err, ratios) of
    rows written by hand or by other tools are read as they are."""
    p = tmp_path / "bench.jsonl"
    p.write_text(json.dumps(dict(rows[0], max_err=98765.4321, speedup_vs_cpu=-2.0)).replace(
        "98765.4321", "Infinity") + "\n")
    got = schema.read_jsonl([p])
    assert got[0]["max_err"] == float("inf") and got[0]["speedup_vs_cpu"] == -2.0
