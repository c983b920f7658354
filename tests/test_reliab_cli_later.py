"""Issue 15 item 11's classes on options that came later: `mpskern check-msl` on a binary
file is one line naming it (was a UnicodeDecodeError traceback); `mpskern selftest --json`
into a path that cannot be written fails before any case runs (was: after every case)."""
from typer.testing import CliRunner

from mpskern.cli.main import app


def test_check_msl_binary_file_is_one_line(tmp_path):
    f = tmp_path / "b.metal"
    f.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    r = CliRunner().invoke(app, ["check-msl", str(f)], env={"COLUMNS": "40"})
    assert r.exit_code == 1 and r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert f"{f}: cannot read: not UTF-8 text (byte 0x89 at offset 0)" in r.output, r.output


def test_selftest_json_unwritable_fails_before_running(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    ran = []
    import mpskern.cli.selftest as st
    monkeypatch.setattr(st, "run", lambda *a, **k: ran.append(1) or [])
    monkeypatch.setattr(st, "run_isolated", lambda *a, **k: ran.append(1) or [])
    r = CliRunner().invoke(app, ["selftest", "--json", str(tmp_path / "file" / "s.json"),
                                 "--op", "softmax", "--backend", "cpu"], env={"COLUMNS": "40"})
    assert r.exit_code == 2 and not ran, (r.exit_code, ran, r.output)
    assert "--json" in r.output and "cannot write" in r.output, r.output
