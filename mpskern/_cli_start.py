"""What the `mpskern` command needs before the package's imports run (mpskern/__init__.py
calls this first): whether this process is that command, and a quiet Ctrl-C while it starts
(importing numpy, the extension and the subcommands takes about a second; a Ctrl-C then was
a KeyboardInterrupt traceback through the import machinery, or a bare death by SIGINT).
cli/app.py hands Ctrl-C back to Python (KeyboardInterrupt) when a command starts: the
commands end an interrupt their own way there."""
import os
import signal
import sys


def is_cli():
    """Whether this process is the `mpskern` command (its console script, or python -m
    mpskern.cli.main), which is importing mpskern now."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "mpskern":
        return True
    argv = getattr(sys, "orig_argv", [])      # Python >= 3.10
    return any(a == "-m" and b.startswith("mpskern.cli") for a, b in zip(argv, argv[1:]))


def _starting(signum, frame):
    os.write(2, b"interrupted: while starting; nothing was run or written\n")
    os._exit(130)


def quiet_interrupts():
    """In the command, Ctrl-C until a subcommand starts: one line, exit status 130."""
    if is_cli() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _starting)


def app_interrupts():
    """From here on Ctrl-C is KeyboardInterrupt again (where quiet_interrupts set it)."""
    if signal.getsignal(signal.SIGINT) is _starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
