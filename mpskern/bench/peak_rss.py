"""Peak memory one call adds: run `setup`, then `call`, in a fresh Python process and return
the peak resident set during `call` minus the resident set just before it, in MiB.

    added = peak_rss.added_mib("import numpy as np\\nx = np.ones(2**20)", "y = x * 2")

A fresh process so that nothing this process holds (caches, pools, earlier peaks) counts.
On Linux the peak is reset right before the call (/proc/self/clear_refs, then VmHWM);
elsewhere it is the growth of the all-time peak (ru_maxrss), which reads 0 when setup
already reached a higher peak: warm up on a small problem. The child imports the mpskern
this process runs (an in-place build or the installed one) and runs in a neutral folder:
`python -c` puts its cwd first on sys.path, and a checkout root there would shadow an
installed mpskern with the unbuilt source tree.
"""
import os
import subprocess
import sys
import tempfile

_MEASURE = """
import re, resource, sys
def _status(key):        # MiB from /proc/self/status (Linux), else None
    try:
        with open("/proc/self/status") as f:
            return int(re.search(key + r":\\s+(\\d+) kB", f.read()).group(1)) / 1024
    except (OSError, AttributeError):
        return None
def _reset_peak():      # Linux: VmHWM restarts from the current RSS (clear_refs 5)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status("VmRSS")
    except OSError:
        return None
def _maxrss():          # ru_maxrss: KiB on Linux, bytes on macOS
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 2**10
exec(sys.argv[1])
_before = _reset_peak()
_before_max = _maxrss()
exec(sys.argv[2])
print(_status("VmHWM") - _before if _before is not None else _maxrss() - _before_max)
"""


def added_mib(setup, call, env=None, timeout=None):
    """Peak RSS added by the Python statements `call` after `setup`, in MiB (a float).
    env: extra environment variables for the child; a child that fails raises
    RuntimeError with its stderr."""
    import mpskern
    home = os.path.dirname(os.path.dirname(os.path.abspath(mpskern.__file__)))
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join(p for p in (home, full.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", _MEASURE, setup, call], env=full,
                       cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"peak_rss child failed (exit {r.returncode}): {r.stderr.strip()}")
    return float(r.stdout.split()[-1])
