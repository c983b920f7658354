"""QA regressions: `mpskern selftest` rejects a negative --seed with a message (was a
numpy traceback) and an unknown --op even next to known ones (was silently dropped)."""
from typer.testing import CliRunner

from mpskern.cli.main import app


def test_negative_seed_is_a_user_error():
    r = CliRunner().invoke(app, ["selftest", "-b", "cpu", "--op", "softmax", "--seed", "-1"])
    assert r.exit_code == 2, r.output
    assert "--seed -1: give 0 or a positive integer" in r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)


def test_an_unknown_op_next_to_a_known_one_is_named():
    r = CliRunner().invoke(app, ["selftest", "-b", "cpu", "--op", "softmax", "--op", "sofmax"])
    assert r.exit_code == 2, r.output
    assert "no cases for --op ['sofmax']" in r.output
