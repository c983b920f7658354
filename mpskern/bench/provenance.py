"""Where and with what a result was measured: the machine header of every row."""
import os
import platform
import subprocess
import sys
from functools import lru_cache

import numpy as np

from mpskern import __version__, peaks


def git_commit():
    """HEAD of the checkout mpskern runs from (with "-dirty" for uncommitted changes to
    tracked files), or None when it is not a git checkout (an installed wheel)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", root, "diff-index", "--quiet", "HEAD", "--"],
                               capture_output=True, timeout=10).returncode != 0
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_name():
    """The Metal device's name where there is one, else None."""
    from mpskern import backends
    try:
        if backends.availability("metal")[0]:
            return backends.get("metal").info.get("name")
    except Exception:  # noqa: BLE001 - provenance must never stop a benchmark
        return None
    return None


@lru_cache(maxsize=1)
def machine():
    return dict(mpskern_version=__version__, git_commit=git_commit(),
                os=f"{platform.system()} {platform.release()} ({platform.machine()})",
                cpu=peaks.cpu_name(), cpu_count=os.cpu_count(), gpu=gpu_name(),
                python=platform.python_version(), numpy=np.__version__,
                platform=sys.platform)
