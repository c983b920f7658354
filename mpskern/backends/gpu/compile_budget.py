"""The compile deadline of a tune (mpskern/tuner): a time budget is kept only if a
candidate whose kernel library is not built yet is compiled when its build fits in what
is left. A simulator build takes seconds (front-end checks, the host compiler), a timed
run of a small problem milliseconds, so a search that only checks its clock between
candidates overran a 0.2 s budget by a compile of 2.5 s.

Context.compiled asks admit() before it builds a library and reports the build's wall
time to built(); the expected cost of a build is the longest one seen in this process for
that kind of library (a simulator build in profiling mode is slower), PRIOR_S before any.
Outside deadline() every build is admitted, as before."""
import contextlib
import threading
import time

PRIOR_S = {"sim": 1.0, "metal": 0.1}    # a build's expected seconds before one is timed

_local = threading.local()
_seen = {}                              # (kind, profile) -> longest build seen, seconds


class CompileOverBudget(Exception):
    """A library this call needs is not built and its build would not finish before the
    deadline: the call did not run (the tuner leaves that candidate unrun)."""

    def __init__(self, expected_s, left_s):
        self.expected_s = expected_s
        super().__init__(f"not compiled: a compile takes ~{expected_s:.2g} s here and "
                         f"{max(left_s, 0):.2g} s of the budget are left")


@contextlib.contextmanager
def deadline(at, clock=time.perf_counter):
    """Within the block (this thread), builds that would end after clock() time `at`
    raise CompileOverBudget instead of compiling."""
    before = getattr(_local, "deadline", None)
    _local.deadline = (at, clock)
    try:
        yield
    finally:
        _local.deadline = before


def expected_s(kind, profile):
    return _seen.get((kind, bool(profile)), PRIOR_S.get(kind, 1.0))


def admit(kind, profile):
    """Raise CompileOverBudget when a build now would end past this thread's deadline."""
    d = getattr(_local, "deadline", None)
    if d is None:
        return
    at, clock = d
    need, left = expected_s(kind, profile), at - clock()
    if need > left:
        raise CompileOverBudget(need, left)


def built(kind, profile, seconds):
    """A build of `seconds` happened: the expected cost is the longest seen."""
    key = (kind, bool(profile))
    _seen[key] = max(_seen.get(key, 0.0), seconds)


def longest_s():
    """The longest build this process has timed (0 without any)."""
    return max(_seen.values(), default=0.0)
