"""`mpskern profile OP --shape ...`: counters as a table and as JSON, pinned configurations,
clear errors for bad options, any terminal width."""
import json

import pytest
from typer.testing import CliRunner

from mpskern import sim
from mpskern.cli.main import app
from mpskern.sim import profile_build

pytestmark = [pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler"),
              pytest.mark.skipif(profile_build.clang()[0] is None, reason="profiling needs clang")]

TILED = '{"variant": "tiled", "BM": 32, "BN": 32, "BK": 8, "WM": 1, "WN": 1}'


def _run(args, columns=120, monkeypatch=None):
    return CliRunner().invoke(app, ["profile"] + args, env={"COLUMNS": str(columns)})


def test_json_has_the_counters(tmp_path):
    out = tmp_path / "p.json"
    r = _run(["gemm", "--shape", "M=64,N=48,K=40", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc == json.loads(out.read_text())
    (d,) = doc["dispatches"]
    assert d["kernel"].startswith("gemm_") and doc["shape"]["M"] == 64
    assert d["device"]["bytes_written"] == 64 * 48 * 4
    assert set(d) >= {"device", "threadgroup", "flops", "simdgroup_matrix", "int_div", "barriers"}


@pytest.mark.parametrize("columns", [40, 160])
def test_table_at_any_width(columns):
    r = _run(["softmax", "--shape", "16,300"], columns=columns)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "softmax_" in text and "coalescing" in text and "barriers" in text


def test_pinned_configuration_runs():
    r = _run(["gemm", "--shape", "M=64,N=64,K=32", "--config", TILED, "--json"])
    assert r.exit_code == 0, r.output
    (d,) = json.loads(r.stdout)["dispatches"]
    assert d["kernel"] == "gemm_tiled_f32" and d["simdgroup_matrix"]["macs"] == 0
    assert d["flops"]["f32"]["mul"] >= 64 * 64 * 32


@pytest.mark.parametrize("args, msg", [
    (["gemm", "--shape", "M=64,N=64,K=32", "--config", "{bad"], "--config"),
    (["gemm", "--shape", "M=64,N=64,K=32", "--config", "[1]"], "JSON object"),
    (["gemm", "--shape", "M=64,N=64,K=32", "--config", '{"variant": "simd"}'], "missing keys"),
    (["nosuchop", "--shape", "1"], "unknown op"),
    (["gemm", "--shape", "M=x"], "not an integer"),
    (["gemm", "--shape", "M=8,N=8,K=8", "--dtype", "float64"], "--dtype"),
    (["gemm", "--shape", "M=8,N=8,K=8", "--max-groups", "-1"], "--max-groups"),
])
def test_bad_options_are_one_clear_line(args, msg):
    r = _run(args, columns=200)
    assert r.exit_code == 2, r.output
    assert msg in r.output and "Traceback" not in r.output, r.output
