"""Output files are written whole or not at all (mpskern/atomic_write.py): a failure or a
Ctrl-C while writing leaves the previous file (or none), never an empty or torn one; a
command that fails before writing leaves no file behind."""
import csv
import json
import os
import stat

import pytest
from typer.testing import CliRunner

from mpskern.atomic_write import atomic_write
from mpskern.bench import schema
from mpskern.cli.main import app
from mpskern.cli.selftest import write_json


def _leftovers(folder):
    return sorted(p for p in os.listdir(folder) if p.endswith(".tmp"))


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_write_keeps_the_old_file(tmp_path, exc):
    path = tmp_path / "out.json"
    path.write_text("old\n")
    with pytest.raises(exc):
        with atomic_write(path) as f:
            f.write("half of the new")
            raise exc()
    assert path.read_text() == "old\n" and _leftovers(tmp_path) == []
    with pytest.raises(exc):
        with atomic_write(tmp_path / "new.json") as f:
            raise exc()
    assert not (tmp_path / "new.json").exists() and _leftovers(tmp_path) == []


def test_a_finished_write_replaces_the_file_and_keeps_its_mode(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    with atomic_write(path) as f:
        f.write("new")
    assert path.read_text() == "new" and stat.S_IMODE(os.stat(path).st_mode) == 0o640
    fresh = tmp_path / "fresh.txt"
    with atomic_write(fresh) as f:
        f.write("x")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o666 & ~umask      # not mkstemp's 0600


def test_selftest_json_interrupted_mid_write_keeps_the_old_report(tmp_path, monkeypatch):
    # was open(path, "w"): the old report truncated, a torn one left
    path = tmp_path / "selftest.json"
    path.write_text('{"old": 1}\n')

    def torn_dump(obj, f, **kw):
        f.write('{"format": "mpskern-selftest", "rows": [')
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", torn_dump)
    with pytest.raises(KeyboardInterrupt):
        write_json(str(path), [], [], ["cpu"], ["float32"], False)
    assert path.read_text() == '{"old": 1}\n' and _leftovers(tmp_path) == []


def test_csv_failing_mid_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "rows.csv"
    path.write_text("old\n")
    real = csv.DictWriter.writerow
    calls = []

    def failing(self, row):
        calls.append(row)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(self, row)

    monkeypatch.setattr(csv.DictWriter, "writerow", failing)
    rows = [dict(op="softmax", shape_key=f"{i}", dtype="float32", backend="cpu") for i in range(3)]
    with pytest.raises(OSError):
        schema.write_csv(str(path), rows)
    assert path.read_text() == "old\n" and _leftovers(tmp_path) == []


def test_profile_that_fails_leaves_no_out_file(tmp_path):
    # the writability probe created an empty --out file that a failing profile left behind
    out = tmp_path / "p.json"
    r = CliRunner().invoke(app, ["profile", "gemm", "--shape", "M=0,N=4,K=4", "--out", str(out)],
                           env={"COLUMNS": "80"})
    assert r.exit_code != 0 and "M" in r.output, r.output
    assert not out.exists() and os.listdir(tmp_path) == []
    r = CliRunner().invoke(app, ["profile", "gemm", "--shape", "M=8,N=8,K=8",
                                 "--out", str(tmp_path / "missing" / "p.json")], env={"COLUMNS": "80"})
    assert r.exit_code != 0 and "not writable" in r.output, r.output
