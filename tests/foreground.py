"""Starting a child the way Ctrl-C finds it, for the tests that send a real SIGINT."""
import contextlib
import signal
import subprocess


def popen(argv, **kw):
    """subprocess.Popen with text pipes and SIGINT at its default action, as in a terminal's
    foreground program: a background job of a shell without job control inherits SIGINT
    ignored, and Python then installs no KeyboardInterrupt handler."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


@contextlib.contextmanager
def child(argv, **kw):
    """popen() whose child is killed when the block leaves it still running (a failed wait)."""
    p = popen(argv, **kw)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


def interrupt(p, timeout):
    """Ctrl-C to the child; its (stdout, stderr) once it has exited."""
    p.send_signal(signal.SIGINT)
    return p.communicate(timeout=timeout)
