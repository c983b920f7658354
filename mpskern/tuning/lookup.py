"""Which configuration a dispatch uses, and why. Levels, first match wins:

  forced   a configuration the caller pinned (`with forced("gemm", cfg):`; the tuner times
           candidates through the real op path this way)
  exact    the user database has this device, op, dtype and exact shape
  bucket   the user database has this device, op, dtype and a shape of the same bucket
           (the nearest such shape)
  family   the packaged defaults of the device's GPU family (mpskern/tuning/defaults/)
  generic  the caller's rule-based default (mpskern/tuning/spaces.py)

An entry is used only if the configuration is valid for this device and problem (the
space's rules: threadgroup memory, threads per threadgroup, divisibility); entries that
are not are skipped, listed in Choice.rejected, and (user database) warned about once:
they come from an older mpskern or another device's limits.
"""
import contextlib
import math
import threading
from dataclasses import dataclass, field

from mpskern.tuning import db as _db

LEVELS = ("forced", "exact", "bucket", "family", "generic")


@dataclass
class Choice:
    config: dict
    level: str                  # one of LEVELS
    source: str                 # file or rule the configuration came from
    entry: object = None        # the db.Entry, when it came from a database
    rejected: list = field(default_factory=list)   # (level, source, config, reason)
    op: str = ""                # what was looked up: the database key of the dispatch
    dtype: str = ""
    shape: tuple = ()
    valid: object = field(default=None, repr=False)     # the rules it was checked with
    generic: dict = field(default=None, repr=False)     # the caller's rule-based default

    def explain(self):
        """One sentence: which level matched and where the configuration came from."""
        what = {"forced": "pinned by the caller",
                "exact": "tuned on this device for this exact shape",
                "bucket": "tuned on this device for a shape in the same bucket",
                "family": "the packaged default of this GPU family",
                "generic": "the generic rule-based default"}[self.level]
        s = f"{self.level}: {what} ({self.source})"
        if self.entry is not None:
            e = self.entry
            if e.shape is not None and self.level == "bucket":
                s += f"; tuned shape {'x'.join(map(str, e.shape))}"
            p = e.provenance or {}
            if self.level == "family" and p.get("source"):
                s += f"; from {p['source']}"
            if p.get("measured") is False:
                s += "; not measured by mpskern"
            if e.time_ms is not None and e.default_time_ms:
                s += (f"; {e.time_ms:.4g} ms vs {e.default_time_ms:.4g} ms default "
                      f"({e.default_time_ms / e.time_ms:.2f}x)")
        return s


def dtype_name(dtype):
    """"float32"/"float16" from a name, a numpy dtype or _native's MK_F32/MK_F16 code."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return {0: "float32", 1: "float16"}.get(dtype, str(dtype))
    try:
        import numpy as np
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def invalid_reason(valid, config):
    """Why `config` is invalid (a string) or None. `valid` may return a bool, None/str
    (reason), or (ok, reason)."""
    if valid is None:
        return None
    try:
        r = valid(config)
    except (KeyError, TypeError, ValueError) as e:   # a config of another space's shape
        return f"does not fit this space ({type(e).__name__}: {e})"
    if isinstance(r, tuple):
        ok, why = r
        return None if ok else (why or "invalid")
    if r is True or r is None:
        return None
    if r is False:
        return "invalid"
    return str(r)


# -- pinning --------------------------------------------------------------------------------
_tls = threading.local()


@contextlib.contextmanager
def forced(op, config):
    """Within the block, dispatches of `op` on this thread use `config`."""
    stack = getattr(_tls, "forced", None)
    if stack is None:
        stack = _tls.forced = []
    stack.append((op, dict(config)))
    try:
        yield
    finally:
        stack.pop()


def _forced(op):
    for o, cfg in reversed(getattr(_tls, "forced", None) or ()):
        if o == op:
            return cfg
    return None


def last_choice():
    """The Choice of the last choose() on this thread (bench records its level)."""
    return getattr(_tls, "last", None)


@contextlib.contextmanager
def recording():
    """Collect the Choices made on this thread within the block (a list): the tuner learns
    this way which op key and shape key an op's encoder looks up."""
    seen = []
    stack = getattr(_tls, "recorders", None)
    if stack is None:
        stack = _tls.recorders = []
    stack.append(seen)
    try:
        yield seen
    finally:
        stack.remove(seen)


# -- matching -------------------------------------------------------------------------------
def _device_match(e, info):
    """2: same device name, 1: same architecture, 0: another device. Simulator entries
    only match simulated devices and Metal entries only real ones."""
    if e.backend and e.backend != _db.backend_of(info):
        return 0
    if e.family and info.get("family") and e.family != _db.family_name(info["family"]):
        return 0
    if e.device and e.device == info.get("name"):
        return 2
    if e.architecture and e.architecture == info.get("architecture"):
        return 1
    return 0


def _distance(a, b):
    """How far apart two shapes are (sum of |log2 ratio|); inf when ranks differ."""
    if len(a) != len(b):
        return math.inf
    return sum(abs(math.log2(max(x, 1) / max(y, 1))) for x, y in zip(a, b))


def _user_candidates(entries, info, shape, bucket):
    """(level, entry) in preference order from user-database entries."""
    exact, near = [], []
    for e in entries:
        m = _device_match(e, info)
        if not m:
            continue
        if e.shape is not None and e.shape == shape:
            exact.append((-m, 0, e))
        elif e.bucket == bucket:
            near.append((-m, _distance(e.shape, shape) if e.shape else 0, e))
    for lst, level in ((exact, "exact"), (near, "bucket")):
        lst.sort(key=lambda t: t[:2])
        for *_, e in lst:
            yield level, e


def _family_candidates(entries, bucket):
    """Packaged entries: a bucket-specific one first, then the family-wide one."""
    specific = [e for e in entries if e.bucket == bucket]
    wide = [e for e in entries if e.bucket is None and e.shape is None]
    yield from specific
    yield from wide


def choose(op, dtype, shape, device_info, *, generic, valid=None, user_db=None):
    """The configuration a dispatch of `op` uses on the device described by `device_info`
    (the dict of _native.Device.info()), as a Choice.

    generic  the rule-based default, used when no database level has a valid entry
    valid    config -> None/True when usable here, else a reason (see invalid_reason)
    user_db  a db.Database to consult instead of the user's file (tests)
    """
    dtype = dtype_name(dtype)
    shape = _db.shape_key(shape)
    bucket = _db.bucket_of(shape)
    rejected = []
    stale = []      # user-database entries that do not fit: warned about once

    def done(choice):
        choice.rejected = rejected
        choice.op, choice.dtype, choice.shape = op, dtype, shape
        choice.valid, choice.generic = valid, dict(generic)
        _tls.last = choice
        for rec in getattr(_tls, "recorders", None) or ():
            rec.append(choice)
        if stale:
            _warn_stale(op, choice, stale)
        return choice

    pinned = _forced(op)
    if pinned is not None:
        why = invalid_reason(valid, pinned)
        if why:
            raise ValueError(f"pinned {op} configuration {pinned} is invalid here: {why}")
        return done(Choice(pinned, "forced", "pinned by the caller"))

    udb = user_db if user_db is not None else _db.user_db()
    for level, e in _user_candidates(udb.for_op(op, dtype), device_info, shape, bucket):
        why = invalid_reason(valid, e.config)
        if why is None:
            return done(Choice(dict(e.config), level, udb.path, e))
        rejected.append((level, udb.path, e.config, why))
        stale.append(rejected[-1])

    fam = _db.family_defaults(device_info.get("family"))
    for e in _family_candidates(fam.for_op(op, dtype), bucket):
        why = invalid_reason(valid, e.config)
        if why is None:
            return done(Choice(dict(e.config), "family", fam.path, e))
        rejected.append(("family", fam.path, e.config, why))

    why = invalid_reason(valid, generic)
    if why:
        # the caller's own default must fit its own space: that is a bug, not a user problem
        raise ValueError(f"generic {op} default {generic} is invalid here: {why}")
    return done(Choice(dict(generic), "generic", "rule in mpskern/tuning/spaces.py"))


def _warn_stale(op, choice, stale):
    _, path, cfg, why = stale[0]
    n = len(stale)
    _db.warn_once((path, "stale", op),
                  f"mpskern: {n} {op} entr{'y' if n == 1 else 'ies'} of the tuning database "
                  f"{path} cannot be used here (e.g. {cfg}: {why}); tuned by another mpskern "
                  f"version or for other device limits. Using the {choice.level} level "
                  f"instead; re-run `mpskern tune {op}` to refresh it.")
