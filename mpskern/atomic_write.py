"""Output files written whole or not at all: a temporary file beside the target, flushed to
disk and renamed over it only when the writer finished. A failure, a Ctrl-C or a kill
before that leaves the old file (or none), never an empty or half-written one."""
import contextlib
import os
import tempfile

_UMASK = os.umask(0o022)            # read once (os.umask sets it too: put back at once)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_write(path, mode="w", encoding="utf-8", newline=None):
    """`with atomic_write(path) as f: f.write(...)`: `path` appears (or is replaced) only
    when the block ends without an exception. The folder must exist. A target that is no
    regular file (/dev/stdout, a pipe) is written directly: there is nothing to replace."""
    path = os.fspath(path)
    kw = {} if "b" in mode else {"encoding": encoding, "newline": newline}
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, mode, **kw) as f:
            yield f
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode, **kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())       # on disk before the rename: never an empty file after a crash
        if os.path.exists(path):       # mkstemp makes it 0600; keep the target's mode
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
