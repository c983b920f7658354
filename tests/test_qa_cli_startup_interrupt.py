"""Ctrl-C while the `mpskern` command starts (importing numpy, the extension, the subcommands:
about a second) was a KeyboardInterrupt traceback through the import machinery, or a death by
SIGINT with nothing said (exit -2); from the command's start its own handlers answer
(cli/app.py). Now (mpskern/_cli_start.py) every moment after mpskern's first import line is
one 'interrupted:' line and exit status 130 (qa10)."""
import os
import signal
import subprocess
import sys
import time

import pytest

import foreground

CONSOLE = ("import re, sys\nfrom mpskern.cli.main import main\nif __name__ == '__main__':\n"
           "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
           "    sys.exit(main())\n")


def test_a_sigint_during_the_commands_imports_is_one_line():
    """Deterministic: the interrupt lands right after `import mpskern` in the command."""
    code = ("import os, signal, sys, time\nsys.argv[0] = '/usr/bin/mpskern'\nimport mpskern\n"
            "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\nprint('not stopped')\n")
    with foreground.child([sys.executable, "-c", code]) as p:
        out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert out == "" and err == "interrupted: while starting; nothing was run or written\n"


def test_python_users_keep_keyboard_interrupt():
    code = ("import os, signal, sys, time\nimport mpskern\n"
            "try:\n    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
            "except KeyboardInterrupt:\n    print('caught')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.stdout.strip() == "caught", r.stderr


def _past_mpskerns_first_line(p, timeout=60):
    """Wait until the child has loaded mpskern's extension (/proc/PID/maps on Linux), which
    mpskern/__init__.py imports after quiet_interrupts(): from then on the handler is set.
    (The interpreter's own start before that is outside mpskern's reach.) Elsewhere: 0.5 s."""
    maps = f"/proc/{p.pid}/maps"
    if not os.path.exists(maps):
        time.sleep(0.5)
        return
    deadline = time.time() + timeout
    while time.time() < deadline and p.poll() is None:
        with open(maps) as f:
            if "_native" in f.read():
                return
        time.sleep(0.01)


@pytest.mark.parametrize("delay", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("how", ["console", "-m"])
def test_ctrl_c_at_any_moment_of_a_tune_is_one_line(tmp_path, delay, how):
    """The real command at a few moments of its start (imports: numpy, the subcommands) and
    run: exit 130, one line, no traceback, nothing written (the database is stored only when a
    shape is done)."""
    (tmp_path / "mpskern").write_text(CONSOLE)
    cmd = [sys.executable, str(tmp_path / "mpskern")] if how == "console" else \
        [sys.executable, "-m", "mpskern.cli.main"]
    db = tmp_path / "db.json"
    with foreground.child(cmd + ["tune", "softmax", "--backend", "sim", "--shape", "64,256",
                                 "--db", str(db)], cwd=tmp_path) as p:
        _past_mpskerns_first_line(p)
        time.sleep(delay)
        assert p.poll() is None, p.communicate()
        out, err = foreground.interrupt(p, timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("interrupted: "), err
    assert not db.exists() and not os.path.exists(str(db) + ".tmp")
