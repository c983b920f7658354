"""The tuning database: which kernel configuration suits (device, op, dtype, shape).

Two sources share one JSON format (documented and kept stable in docs/tuning.md):

  packaged defaults  mpskern/tuning/defaults/apple<N>.json, one per Metal GPU family,
                     read-only; each entry carries its provenance (where the choice came
                     from, and whether mpskern measured it)
  user database      written by `mpskern tune`; $MPSKERN_TUNING_DB, else tuning.json in
                     mpskern's cache directory (see user_path)

    {"format": "mpskern-tuning-db", "version": 1,
     "entries": [{"op": "gemm", "dtype": "float32", "config": {...},
                  "device": "Apple M2 Pro", "architecture": "applegpu_g14s",
                  "family": "apple8", "backend": "metal",
                  "shape": [1024, 1024, 1024], "bucket": "1024x1024x1024",
                  "time_ms": 0.81, "default_time_ms": 1.02,
                  "provenance": {"source": "mpskern tune", "measured": true, ...}}]}

A file that is unreadable, empty, not JSON, of another format or version, gives ONE
warning (TuningDatabaseWarning) and is ignored: a tuning database never breaks an op.
"""
import contextlib
import json
import os
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field

from mpskern import env
from mpskern.atomic_write import atomic_write

FORMAT = "mpskern-tuning-db"
VERSION = 1
DEFAULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "defaults")
ENV_PATH = "MPSKERN_TUNING_DB"


class TuningDatabaseWarning(UserWarning):
    """A tuning database file could not be used (it is ignored; ops keep working)."""


# -- names --------------------------------------------------------------------------------
def family_name(family):
    """7 -> "apple7"; "apple8"/"Apple8" -> "apple8"; 0/None/"" -> "" (unknown)."""
    if not family:
        return ""
    if isinstance(family, str):
        f = family.strip().lower()
        return f if f.startswith("apple") else f"apple{f}"
    return f"apple{int(family)}"


def backend_of(device_info):
    return "sim" if device_info.get("is_simulator") else "metal"


def shape_key(shape):
    """The canonical form of a shape: a tuple of ints."""
    if isinstance(shape, dict):
        shape = tuple(shape.values())
    return tuple(int(s) for s in shape)


def bucket_of(shape):
    """Shapes whose every dimension rounds up to the same power of two share a bucket:
    (1000, 1000, 300) -> "1024x1024x512". Tiles that suit one suit the others."""
    return "x".join(str(1 << max(0, int(s) - 1).bit_length()) for s in shape_key(shape))


def user_path():
    """Where the user database lives: $MPSKERN_TUNING_DB, else tuning.json in mpskern's
    cache folder (env.cache_dir)."""
    p = env.get(ENV_PATH) or os.path.join(env.cache_dir(), "tuning.json")
    return os.path.abspath(os.path.expanduser(p))


def defaults_path(family):
    return os.path.join(DEFAULTS_DIR, f"{family_name(family)}.json")


# -- entries ------------------------------------------------------------------------------
@dataclass
class Entry:
    op: str
    dtype: str
    config: dict
    device: str = ""            # "" in packaged defaults: any device of the family
    architecture: str = ""
    family: str = ""
    backend: str = ""           # "metal" / "sim": a simulator's timings never tune a GPU
    shape: tuple = None         # exact shape it was tuned on, or None
    bucket: str = None          # shape bucket it applies to, or None (all shapes)
    time_ms: float = None
    default_time_ms: float = None
    provenance: dict = field(default_factory=dict)

    def key(self):
        """Two entries with the same key describe the same choice; the newer replaces."""
        return (self.device, self.architecture, self.backend, self.op, self.dtype,
                self.shape, None if self.shape else self.bucket)

    def to_json(self):
        d = dict(op=self.op, dtype=self.dtype, config=self.config)
        for k in ("device", "architecture", "family", "backend", "bucket"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.shape is not None:
            d["shape"] = list(self.shape)
        for k in ("time_ms", "default_time_ms"):
            if getattr(self, k) is not None:
                d[k] = round(float(getattr(self, k)), 6)
        d["provenance"] = self.provenance
        return d

    @classmethod
    def from_json(cls, d):
        """An Entry from its JSON object; ValueError saying what is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"entry is a {type(d).__name__}, not an object")
        for k in ("op", "dtype"):
            if not isinstance(d.get(k), str) or not d[k]:
                raise ValueError(f"entry has no {k!r} string")
        cfg = d.get("config")
        if not isinstance(cfg, dict) or not cfg or not all(
                isinstance(v, (int, str)) and not isinstance(v, bool) for v in cfg.values()):
            raise ValueError(f"entry {d['op']}/{d['dtype']} has no config object of int/str values")
        shape = d.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(
                    isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
                raise ValueError(f"entry {d['op']}/{d['dtype']} has a shape that is not a list "
                                 f"of non-negative ints: {shape!r}")
            shape = tuple(shape)
        bucket = d.get("bucket")
        if bucket is not None and not isinstance(bucket, str):
            raise ValueError(f"entry {d['op']}/{d['dtype']} has a non-string bucket")
        if shape is not None and bucket is None:
            bucket = bucket_of(shape)
        num = {}
        for k in ("time_ms", "default_time_ms"):
            v = d.get(k)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise ValueError(f"entry {d['op']}/{d['dtype']}: {k} is not a number")
            num[k] = v
        prov = d.get("provenance", {})
        if not isinstance(prov, dict):
            raise ValueError(f"entry {d['op']}/{d['dtype']}: provenance is not an object")
        strs = {}
        for k in ("device", "architecture", "family", "backend"):
            v = d.get(k, "")
            if not isinstance(v, str):
                raise ValueError(f"entry {d['op']}/{d['dtype']}: {k} is not a string")
            strs[k] = v
        strs["family"] = family_name(strs["family"])
        return cls(op=d["op"], dtype=d["dtype"], config=dict(cfg), shape=shape, bucket=bucket,
                   provenance=prov, **strs, **num)


# -- warnings, once per (file, problem) ---------------------------------------------------
_warned = set()
_warn_lock = threading.Lock()


def warn_once(key, message):
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, TuningDatabaseWarning, stacklevel=3)


# -- files --------------------------------------------------------------------------------
class Database:
    """The entries of one file, indexed for lookup. `problem` says why a file was ignored
    (None when it loaded, or when it simply does not exist yet)."""

    def __init__(self, path, entries=(), problem=None, bad_entries=()):
        self.path = path
        self.entries = list(entries)
        self.problem = problem
        self.bad_entries = list(bad_entries)     # "#i: why" for each malformed entry
        self._index = {}
        for e in self.entries:
            self._index.setdefault((e.op, e.dtype), []).append(e)

    def for_op(self, op, dtype):
        return self._index.get((op, dtype), [])

    def __len__(self):
        return len(self.entries)


def parse(text, path="<text>"):
    """A Database from a file's text; never raises: problems end up in .problem."""
    if not text.strip():
        return Database(path, problem="empty")
    try:
        doc = json.loads(text)
    except ValueError as e:
        return Database(path, problem=f"not valid JSON ({e})")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return Database(path, problem=f"not an mpskern tuning database (no \"format\": \"{FORMAT}\")")
    ver = doc.get("version")
    if ver != VERSION:
        newer = isinstance(ver, int) and not isinstance(ver, bool) and ver > VERSION
        return Database(path, problem=(
            f"format version {ver!r}, written by a {'newer' if newer else 'different'} "
            f"mpskern; this one reads version {VERSION}"))
    raw = doc.get("entries")
    if not isinstance(raw, list):
        return Database(path, problem="missing its \"entries\" list")
    entries, bad = [], []
    for i, d in enumerate(raw):
        try:
            entries.append(Entry.from_json(d))
        except ValueError as e:
            bad.append(f"#{i}: {e}")
    return Database(path, entries, bad_entries=bad)


def read(path):
    """A Database from a file; a missing file is an empty database without a problem."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return Database(path)
    except (OSError, UnicodeDecodeError) as e:
        return Database(path, problem=f"unreadable ({e})")
    return parse(text, path)


def _warn_problems(db, what):
    if db.problem:
        warn_once((db.path, db.problem),
                  f"mpskern: ignoring the {what} {db.path}: it is {db.problem}. Ops keep working "
                  f"with the next lookup level. Fix: delete or replace the file, or re-run "
                  f"`mpskern tune` to rewrite it.")
    elif db.bad_entries:
        n = len(db.bad_entries)
        warn_once((db.path, "entries"),
                  f"mpskern: ignoring {n} malformed entr{'y' if n == 1 else 'ies'} in the "
                  f"{what} {db.path} (first: {db.bad_entries[0]}).")


# cache: path -> (stat signature, Database); re-read when the file changes
_cache = {}
_cache_lock = threading.Lock()


def _cached(path, what):
    try:
        st = os.stat(path)
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        sig = None
    with _cache_lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == sig:
            return hit[1]
    db = read(path) if sig is not None else Database(path)
    _warn_problems(db, what)
    with _cache_lock:
        _cache[path] = (sig, db)
    return db


def user_db(path=None):
    """The user database (cached; re-read when the file changes)."""
    return _cached(path or user_path(), "tuning database")


def family_defaults(family):
    """The packaged defaults of a GPU family (an empty Database for an unknown family)."""
    name = family_name(family)
    if not name:
        return Database("")
    return _cached(defaults_path(name), "packaged tuning defaults")


def reset():
    """Forget cached files and issued warnings (tests; after editing a file by hand)."""
    with _cache_lock:
        _cache.clear()
    with _warn_lock:
        _warned.clear()


# -- writing ------------------------------------------------------------------------------
def dump(entries):
    doc = {"format": FORMAT, "version": VERSION,
           "entries": [e.to_json() for e in entries]}
    # allow_nan=False: NaN/Infinity are not JSON; a shared file must load in any tool
    return json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n"


def target(path=None):
    """The file save() writes (`path` or the user database); ValueError for a directory,
    checked before a search spends its budget."""
    path = path or user_path()
    if os.path.isdir(path):
        raise ValueError(f"the tuning database path {path} is a directory; set "
                         f"{ENV_PATH} (or --db) to a file path such as {path}/tuning.json")
    folder = os.path.dirname(os.path.abspath(path))
    try:  # a real probe file: os.access says yes to root, also where nothing can be created
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tuning-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        why = None
    except OSError as e:
        why = e.strerror or str(e)
    if why:
        raise ValueError(f"cannot write the tuning database {path}: folder {folder}: {why}; "
                         f"set {ENV_PATH} (or --db) to a file in a writable folder")
    return path


@contextlib.contextmanager
def _locked(path):
    """An exclusive lock on <path>.lock while a writer reads, merges and replaces the file,
    so two `mpskern tune` processes do not drop each other's entries (POSIX; elsewhere
    the write is still atomic, only concurrent merges may lose an entry)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path + ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def save(new_entries, path=None):
    """Add entries to the user database (replacing entries with the same key) and write it
    atomically. A file that cannot be read as a database is kept beside the new one as
    <path>.bad-<time> rather than overwritten. Returns the path written."""
    path = target(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with _locked(path):
        _save(new_entries, path)
    return path


def _save(new_entries, path):
    old = read(path)
    kept = old.entries
    if old.problem and os.path.exists(path):
        aside = f"{path}.bad-{time.strftime('%Y%m%d-%H%M%S')}"
        os.replace(path, aside)
        warn_once((path, "moved"), f"mpskern: the tuning database {path} was {old.problem}; "
                                   f"moved it to {aside} and started a new one.")
        kept = []
    replace = {e.key() for e in new_entries}
    entries = [e for e in kept if e.key() not in replace] + list(new_entries)
    with atomic_write(path) as f:        # never an empty or torn database
        f.write(dump(entries))


def merge(src_path, dst_path=None):
    """Add the entries of another tuning database (e.g. one a colleague shared) to the user
    database; entries with the same key are replaced. ValueError if `src_path` is not a
    usable database. Returns the number of entries merged."""
    src = read(src_path)
    if src.problem or not os.path.exists(src_path):
        raise ValueError(f"cannot merge {src_path}: it is "
                         f"{src.problem or 'missing'}")
    if src.bad_entries and not src.entries:
        raise ValueError(f"cannot merge {src_path}: none of its {len(src.bad_entries)} "
                         f"entries is usable (first: {src.bad_entries[0]})")
    _warn_problems(src, "database to merge")    # some entries malformed: merge the rest
    save(src.entries, dst_path)
    return len(src.entries)
