"""`mpskern ... | head`: when stdout's reader goes away the command stops quietly with 141,
the shell's status of a writer killed by SIGPIPE (what `yes | head` reports). rich's console
and click said 1 (selftest's "a check failed", every command's failure), so a pipeline under
`set -o pipefail` read a closed pipe as a failed check (qa10)."""
import subprocess
import sys

import pytest

from mpskern.cli import console

M = [sys.executable, "-m", "mpskern.cli.main"]


@pytest.mark.parametrize("argv", [
    ["devices"], ["tune", "--list"],
    ["selftest", "--backend", "cpu", "--op", "softmax"],                    # rich tables
    ["bench", "softmax", "--backend", "cpu", "--shape", "4,4", "--no-save", "--json"],  # echo
    ["bench", "softmax", "--backend", "cpu", "--shape", "4,4", "--no-save"]], ids=" ".join)
def test_a_closed_stdout_is_exit_141_without_a_word(argv):
    p = subprocess.Popen(M + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()                         # the reader is gone before the first write
    err = p.stderr.read()
    p.wait(timeout=120)
    assert p.returncode == console.BROKEN_PIPE == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_an_open_stdout_still_exits_0():
    r = subprocess.run(M + ["selftest", "--backend", "cpu", "--op", "softmax"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
