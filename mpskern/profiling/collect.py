"""Running code under the simulator's profiling mode and collecting its counters.

    with mpskern.profiling.profiling() as prof:
        mpskern.matmul(a, b, backend="sim")
    prof.dispatches      # one counters dict per dispatch (mpskern/profiling/counters.py)

Inside the block the "sim" backend builds profiling libraries (mpskern/sim/profile_build.py,
needs clang) and the runtime counts every dispatch (objc/sim/profile.cc). Grids of more
than `max_groups` threadgroups are sampled (first, last and evenly spaced interior groups
per dimension; counts scaled); sampled_only=True runs only those groups, so outputs are
incomplete but big problems profile quickly.
"""
import contextlib
import json

from mpskern.profiling.counters import counters

DEFAULT_MAX_GROUPS = 64
BANKS, BANK_BYTES, LINE_BYTES = 32, 4, 128     # the bank/line model (mpskern/peaks.py FAMILIES)


class Profile:
    """The counters of the dispatches run inside one profiling() block."""

    def __init__(self, settings):
        self.settings = settings
        self.dispatches = []

    def as_dict(self):
        return dict(settings=self.settings, dispatches=self.dispatches)

    def __repr__(self):
        return f"<mpskern Profile: {len(self.dispatches)} dispatches>"


def _sim():
    from mpskern import backends
    be = backends.get("sim")
    ok, why = be.availability()
    if not ok:
        raise backends.BackendUnavailable(f"profiling runs in the simulator, which is unavailable: {why}")
    return be


@contextlib.contextmanager
def profiling(*, max_groups=DEFAULT_MAX_GROUPS, sampled_only=False, banks=BANKS,
              bank_bytes=BANK_BYTES, line_bytes=LINE_BYTES):
    """Count what every simulator dispatch inside the block does (see the module docstring).
    max_groups=0 profiles every threadgroup."""
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 0:
        raise ValueError(f"max_groups must be a whole number >= 0 (0: every threadgroup), got {max_groups!r}")
    be = _sim()
    settings = dict(max_groups=max_groups, sampled_only=bool(sampled_only), banks=banks,
                    bank_bytes=bank_bytes, line_bytes=line_bytes)
    prof = Profile(settings)
    be.device.sim_profile_begin(max_groups=max_groups, sampled_only=bool(sampled_only), banks=banks,
                                bank_bytes=bank_bytes, line_bytes=line_bytes)
    be._ctx.profile = True
    try:
        yield prof
    finally:
        be._ctx.profile = False
        raw = json.loads(be.device.sim_profile_end())
    from mpskern.sim.profile_build import load_table
    tables = {}
    for r in raw:
        lib = r["library"]
        if lib not in tables:
            tables[lib] = load_table(lib)
        prof.dispatches.append(counters(r, tables[lib]))
