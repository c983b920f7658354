"""The results schema: one JSON object per case, appended to a JSON Lines file, plus a CSV
export. Bump SCHEMA_VERSION when a column changes meaning or goes away (adding one is
compatible); readers accept rows of this version or older.
"""
import csv
import json
import math
import os
import warnings

from mpskern.atomic_write import atomic_write

SCHEMA_VERSION = 1

# column -> meaning. Times are milliseconds per call; rows of failed or erroring cases
# carry None for every measured column.
COLUMNS = {
    "schema_version": "this schema's version",
    "run_id": "one id per `mpskern bench` invocation",
    "timestamp": "UTC time the case finished (ISO 8601)",
    "op": "public op name",
    "shape": "shape fields of the op (dict; `mpskern bench --help` lists them)",
    "shape_key": "canonical text of the shape (field=value,...)",
    "shape_label": "readable shape (preset layer name where there is one)",
    "preset": "preset the shape came from, or 'custom'",
    "dtype": "float32 / float16",
    "backend": "mpskern backend (cpu, metal, mps, sim), peer (torch-cpu, torch-mps, mlx) or "
               "model (model-apple7..model-apple10)",
    "backend_kind": "mpskern, peer or model",
    "simulated": "True for sim (CPU emulation of the GPU kernels, says nothing about GPU speed) "
                 "and model-* rows (modelled from the simulator's counters, not measured)",
    "config": "kernel / tile configuration the backend used (dict), if it reports one",
    "device": "device name (CPU model or Metal device)",
    "gpu_family": "Metal GPU family (apple7..apple10) or None",
    "timer": "wall (perf_counter), gpu (command-buffer timestamps), sim (simulator run time) or "
             "model (no timing: mpskern/profiling/model.py's estimate, backends model-apple7..10)",
    "model": "model-* rows: the model's lower bound, estimate, bound and per-dispatch details "
             "(dict; docs/profiling.md)",
    "status": "ok / check_failed (not timed) / error (not timed)",
    "error": "why a case failed, else None",
    "median_ms": "median time per call", "p10_ms": "10th percentile", "p90_ms": "90th percentile",
    "p25_ms": "25th percentile", "p75_ms": "75th percentile", "iqr_ms": "p75 - p25",
    "mean_ms": "mean", "min_ms": "fastest sample",
    "n_samples": "samples taken", "inner_loop": "calls per sample",
    "n_outliers": "samples beyond MAD z-score 3.5",
    "unstable": "spread or outliers too large, or too few samples, to trust the median",
    "unstable_reason": "why unstable",
    "wall_median_ms": "median wall time per call (equals median_ms for the wall timer)",
    "wall_p10_ms": "wall p10", "wall_p90_ms": "wall p90",
    "flops": "FLOPs per call (mpskern.structs)", "bytes": "compulsory bytes per call",
    "intensity": "flops / bytes",
    "gflops": "flops / median time", "gbps": "bytes / median time",
    "metric": "gflops or gbps: the figure the op is read in",
    "pct_peak": "primary metric as % of the device's peak (None: peak unknown or simulated)",
    "peak_gflops": "device peak FLOP/s (dtype) used", "peak_gbps": "device peak bandwidth used",
    "peak_source": "provenance of the peak",
    "speedup_vs_cpu": "cpu's median / this median, same case and run",
    "max_err": "max |result - float64 reference| / max |reference|",
    "tolerance": "the check's bound for max_err",
    "zero_copy": "GPU buffers wrapped numpy memory without a copy (None: n/a or unknown)",
    "budget_s": "time budget of the case",
    "peer_version": "version of the peer library (torch, mlx)",
    "threads": "cpu backend thread count",
    "load_avg": "1-minute load average when the case ran (a busy machine times slower)",
    "mpskern_version": "", "git_commit": "checkout HEAD (-dirty with local changes)",
    "os": "", "cpu": "", "cpu_count": "", "gpu": "Metal device of the machine, if any",
    "python": "", "numpy": "", "platform": "sys.platform",
    "command": "the command line that measured the row (mpskern bench ...), or None",
    "samples_ms": "every sample's per-call time, primary timer (only with --keep-samples; "
                  "report --compare then uses a bootstrap of them)",
}


def set_peak(row, peak, dtype):
    """Fill a measured (or modelled) row's peak columns from a peaks.Peak: peak_gflops,
    peak_gbps, peak_source, and pct_peak of the row's metric where that peak is known."""
    pg, pb = peak.gflops(dtype), peak.gbps
    row.update(peak_gflops=pg, peak_gbps=pb, peak_source=peak.source)
    if row["metric"] == "gflops" and pg:
        row["pct_peak"] = 100 * row["gflops"] / pg
    elif row["metric"] == "gbps" and pb:
        row["pct_peak"] = 100 * row["gbps"] / pb


def clean(v):
    """JSON-safe: NaN/inf floats become None; numpy scalars become Python ones."""
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def validate(row):
    """Raise ValueError if `row` lacks columns or has unknown ones."""
    missing = [c for c in COLUMNS if c not in row]
    extra = [c for c in row if c not in COLUMNS]
    if missing or extra:
        raise ValueError(f"result row: missing columns {missing}, unknown columns {extra}")


def unwritable(path, make_folder=True):
    """None when `path` can be written (its folder made, the file opened for appending; a
    file or folder this check creates is removed again), else why not: checked before a run so that
    an unwritable output fails at once, not after every case was measured. make_folder=False:
    a missing folder is a reason (for outputs whose writer makes no folder: selftest --json)."""
    p = os.path.abspath(os.fspath(path))
    existed = os.path.lexists(p)
    made = []       # folders this check creates, removed again: a run that fails later
    d = os.path.dirname(p)   # (no inputs, a bad argument) leaves no empty folders behind
    while make_folder and not os.path.lexists(d):
        made.append(d)
        d = os.path.dirname(d)
    try:
        if made:
            os.makedirs(made[0])
        with open(p, "a", encoding="utf-8"):
            pass
        if not existed:
            os.unlink(p)
    except OSError as e:
        return e.strerror or str(e)
    finally:
        for d in made:              # deepest first; the writer makes them again
            try:
                os.rmdir(d)
            except OSError:
                pass
    return None


def append_jsonl(path, rows):
    """Append rows (validated) to a JSON Lines file, creating its folder. One write call
    (a kill leaves at most one torn row), and on a line of its own: after a torn last line
    (a run cut short while appending) a newline first, so no new row is glued onto it."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    lines = []
    for r in rows:
        validate(r)
        lines.append(json.dumps(clean(r), allow_nan=False, sort_keys=False) + "\n")
    data = "".join(lines).encode("utf-8")
    with open(path, "ab+") as f:
        if f.seek(0, os.SEEK_END) > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = b"\n" + data
        f.write(data)


# columns every version of the schema has, without which a row is no benchmark result
REQUIRED = ("op", "shape_key", "dtype", "backend")
# columns that hold a number or None (a report computes with them)
NUMERIC = tuple(c for c in COLUMNS if c.endswith("_ms") and c != "samples_ms") + (
    "flops", "bytes", "intensity", "gflops", "gbps", "pct_peak", "peak_gflops", "peak_gbps",
    "speedup_vs_cpu", "max_err", "tolerance", "budget_s", "n_samples", "inner_loop",
    "n_outliers", "threads", "load_avg")


# of them, times and counts: a finite number >= 0 (max_err may be inf or NaN: a failed check)
MEASURES = tuple(c for c in NUMERIC if c.endswith("_ms")) + (
    "flops", "bytes", "n_samples", "inner_loop", "n_outliers", "threads")


def _not_numbers(r):
    """The NUMERIC columns of row `r` holding something else than a number or None, and the
    MEASURES holding a negative, infinite or NaN one (json reads NaN, Infinity, 1e400)."""
    return [c for c in NUMERIC if r.get(c) is not None and
            (isinstance(r[c], bool) or not isinstance(r[c], (int, float)) or
             c in MEASURES and not 0 <= r[c] < math.inf)]


_OUTSIDE_STRINGS = set("{}[],:0123456789+-.eE \t\r\ntruefalsn")


def _torn(line):
    """Whether a line that is not JSON is an object cut short while being appended: still
    open at its end, nothing but JSON's characters outside strings (not garbage)."""
    text = line.strip()
    if not text.startswith("{"):
        return False
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:          # the row closed: an error now is not a cut
                return False
        elif ch not in _OUTSIDE_STRINGS:
            return False
    return depth > 0


def read_jsonl(paths, skipped=None):
    """Rows from JSON Lines files and folders (every *.jsonl inside, sorted). Torn lines
    (a run killed while appending) are skipped, their 'file:line' added to the list
    `skipped` (a warning without one); other bad lines, rows lacking REQUIRED columns, non
    UTF-8 (binary) files, newer schema versions and NUMERIC columns holding anything but a
    number or null raise ValueError naming file and line."""
    rows = []
    for p in expand(paths):
        with open(p, "rb") as f:
            for i, raw in enumerate(f, 1):
                try:
                    if b"\0" in raw:
                        raise UnicodeDecodeError("utf-8", raw, 0, 1, "NUL byte")
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"{p}:{i}: not UTF-8 text (a binary file?); give a "
                                     "results (JSON Lines) file") from None
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except ValueError as e:
                    if _torn(line):
                        if skipped is None:
                            warnings.warn(f"{p}:{i}: skipped a torn line", stacklevel=2)
                        else:
                            skipped.append(f"{p}:{i}")
                        continue
                    raise ValueError(f"{p}:{i}: not JSON ({e})") from None
                v = r.get("schema_version") if isinstance(r, dict) else None
                if not isinstance(v, int):
                    raise ValueError(f"{p}:{i}: no schema_version: not a `mpskern bench` "
                                     "results row")
                if v > SCHEMA_VERSION:
                    raise ValueError(f"{p}:{i}: schema_version {v!r}; this mpskern reads "
                                     f"<= {SCHEMA_VERSION} (upgrade mpskern)")
                missing = [c for c in REQUIRED if not isinstance(r.get(c), str)]
                if missing:
                    raise ValueError(f"{p}:{i}: the row lacks {', '.join(missing)} (every "
                                     "`mpskern bench` row has them)")
                wrong = _not_numbers(r)
                if wrong:
                    raise ValueError(f"{p}:{i}: " + ", ".join(f"{c} is {r[c]!r}" for c in wrong)
                                     + ": a results row holds a number (times and counts: "
                                     "finite, >= 0) or null there (an edited or damaged row?)")
                rows.append(r)
    return rows


def expand(paths):
    out = []
    for p in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".jsonl"))
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise FileNotFoundError(f"no results file or folder {p!r}")
    return out


def flat(row):
    """A CSV-ready copy: shape fields as shape.<field> columns, dicts as JSON text."""
    out = {}
    for k, v in row.items():
        if k == "shape" and isinstance(v, dict):
            out.update({f"shape.{f}": x for f, x in v.items()})
        elif isinstance(v, (dict, list)):
            out[k] = json.dumps(clean(v), sort_keys=True)
        else:
            out[k] = clean(v)
    return out


def write_csv(path, rows):
    """Write rows to CSV (overwrites): the schema's columns in order, shape fields after op."""
    flats = [flat(r) for r in rows]
    shape_cols = []
    for r in flats:
        shape_cols += [c for c in r if c.startswith("shape.") and c not in shape_cols]
    cols = []
    for c in COLUMNS:
        cols.append(c) if c != "shape" else cols.extend(shape_cols)
    for r in flats:
        cols += [c for c in r if c not in cols]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_write(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in flats:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
