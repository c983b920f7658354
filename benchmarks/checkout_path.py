"""Which mpskern a benchmark script imports (import this first, for its effect): a checkout
built in place runs its own mpskern (the checkout root goes first on sys.path); otherwise
the installed one: an unbuilt checkout (a fresh clone after `pip install .`) first on
sys.path would shadow it and fail to import (no compiled extension)."""
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if any((ROOT / "mpskern" / f"_native{s}").exists() for s in EXTENSION_SUFFIXES):
    sys.path.insert(0, str(ROOT))
