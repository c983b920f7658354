"""The one --shape grammar (mpskern/ops/op.py: Op.parse) in every command that takes shapes
(bench OP, bench --model, tune, profile) and every op and network: an empty value ('8,,64',
a leading or trailing comma, '8x'), digits other than ASCII ('８', '٣'), '1_000' and '+8'
(all taken by int() or skipped by the old split) are one error line, exit 2, naming
--shape, the text given and an example; well-formed shapes still parse."""
import pytest
from typer.testing import CliRunner

from mpskern import models, ops, sim
from mpskern.cli.main import app

# (bad --shape text, words the error says about it)
BAD = [("8,,64", "has an empty value between two commas (after '8')"),
       ("8,8,", "ends with a comma"),
       (",8", "starts with a comma"),
       ("8, ,8", "has an empty value between two commas"),
       ("8xx8", "has an empty value around an x or * in '8xx8'"),
       ("8x", "has an empty value around an x or *"),
       ("\uff18,64", "'\uff18' in --shape '\uff18,64' is not an integer (ASCII digits 0-9)"),
       ("\u0663", "is not an integer (ASCII digits 0-9)"),
       ("1_000", "'1_000' in --shape '1_000' is not an integer"),
       ("+8", "'+8' in --shape '+8' is not an integer"),
       ("   ", "is empty")]

SPECS = [(n, ops.get(n)) for n in ops.TABLE] + [(n, models.get(n)) for n in models.MODELS]


@pytest.mark.parametrize("text,words", BAD)
@pytest.mark.parametrize("name,spec", SPECS, ids=[n for n, _ in SPECS])
def test_every_op_and_network_refuses_the_malformed_shape(name, spec, text, words):
    with pytest.raises(ValueError) as e:
        spec.parse(text)
    msg = str(e.value)
    assert msg.startswith(f"{name}:") and words in msg, msg
    assert f"--shape {text!r}" in msg and f"e.g. --shape {spec.example!r}" in msg, msg


@pytest.mark.parametrize("text,want", [("8, 64", (8, 64, 8)), ("8 ,64 , 4", (8, 64, 4)),
                                       ("8x64*4", (8, 64, 4)), (" m=8  n=64 ", (8, 64, 8)),
                                       ("M=8,K=4", (8, 8, 4))])
def test_well_formed_shapes_still_parse(text, want):
    s = ops.get("matmul").parse(text)
    assert (s["M"], s["N"], s["K"]) == want


def _cli(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


COMMANDS = {"bench": ("bench", "matmul", "--no-save", "--backend", "cpu", "--shape"),
            "bench --model": ("bench", "--model", "resnet50", "--no-save", "--backend", "cpu",
                              "--shape"),
            "tune": ("tune", "gemm", "--backend", "sim", "--db", "{db}", "--shape"),
            "profile": ("profile", "gemm", "--shape")}


@pytest.mark.parametrize("text,words", BAD[:3] + BAD[6:7] + BAD[8:9])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_taking_shapes_says_which_piece(command, text, words, tmp_path):
    if command != "bench" and not sim.available()[0]:
        pytest.skip("tune and profile need the simulator (a host C++ compiler)")
    db = tmp_path / "tuning.json"
    args = [a.replace("{db}", str(db)) for a in COMMANDS[command]] + [text]
    r = _cli(*args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output, r.output
    said = " ".join(r.output.split())
    assert words in said and "--shape" in said and "e.g. --shape" in said, r.output
    assert not db.exists()
