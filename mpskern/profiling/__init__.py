"""Metal speed we can see without a Mac (docs/profiling.md): counters from the simulator's
profiling mode (collect.py, counters.py) and a labelled per-family model that turns them
into GPU time estimates (model.py)."""
from mpskern.profiling.collect import DEFAULT_MAX_GROUPS, Profile, profiling  # noqa: F401
