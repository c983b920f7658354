"""`mpskern selftest`: every op x dtype x backend against the cpu backend and the float64
reference (mpskern/reference.py) on a few small shapes, odd sizes included. The first command
to run on a new machine, and what to paste into a bug report: the header names the
machine, the GPU and its family, the OS and the versions. Exit status 1 on any failure."""
import json
import math
import platform
import signal
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass
from typing import List, Optional

import numpy as np
import typer
from rich.table import Table

from mpskern import backends, ops
from mpskern.bench import schema
from mpskern.reference import max_error, tolerance
from mpskern.cli import console as tty
from mpskern.cli.app import app

DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class Case:
    op: str        # the public function
    label: str     # shape and options, as shown in the table
    build: object  # build(rng, dtype) -> (call(backend) -> array, float64 ref or None, terms)


def _case(op, check):
    """A Case from an op table entry's selftest check (mpskern/ops/<op>.py: checks)."""
    def build(rng, dt):
        inp = check.inputs(rng, dt)
        return (lambda be: op.call(inp, be)), op.reference(inp), op.reduction(inp)
    return Case(op.name, check.label, build)


def _poisoned(inp):
    """The inputs with NaN, +Inf and -Inf in the first elements of the first non-empty
    floating-point array (the op's main operand): outputs must propagate them as torch."""
    out = dict(inp)
    for k, v in inp.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size >= 3:
            v = v.copy()
            v.flat[0], v.flat[v.size // 2], v.flat[-1] = np.nan, np.inf, -np.inf
            out[k] = v
            break
    return out


def _nonfinite_case(op, check):
    """A Case like _case's with _poisoned inputs."""
    def build(rng, dt):
        inp = _poisoned(check.inputs(rng, dt))
        return (lambda be: op.call(inp, be)), op.reference(inp), op.reduction(inp)
    return Case(op.name, f"{check.label} NaN/Inf", build)


# every public op on a few small shapes, odd sizes and the options where backends tend to
# differ (transposes, broadcasting, groups, dilation, "same" padding, ceil_mode, divisors,
# a non-last axis, long rows, batch_norm training with its running statistics), and each
# op's first case again with NaN/+Inf/-Inf inputs
CASES = [_case(op, c) for op in ops.TABLE.values() for c in op.checks] + \
    [_nonfinite_case(op, op.checks[0]) for op in ops.TABLE.values() if op.checks]
OPS = sorted({c.op for c in CASES})


def _error(out, ref):
    """max_error, also for references with NaN/Inf: non-finite values must match (NaN for
    NaN, the same infinity), the finite ones are compared as usual; inf on a mismatch."""
    out, ref = np.asarray(out), np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape or np.all(np.isfinite(ref)):
        return max_error(out, ref)
    o = out.astype(np.float64)
    fin = np.isfinite(ref)
    if not (np.array_equal(np.isnan(o), np.isnan(ref)) and np.array_equal(o[np.isinf(ref)], ref[np.isinf(ref)])):
        return math.inf
    return max_error(o[fin], ref[fin]) if fin.any() else 0.0


@dataclass
class Row:
    op: str
    label: str
    dtype: str
    backend: str
    status: str                  # pass, FAIL, error, crashed, unsupported
    err_ref: Optional[float]     # vs the float64 reference (None: no reference)
    err_cpu: Optional[float]     # vs the cpu backend (None: this is cpu, or cpu failed)
    tol: float
    note: str = ""


def _outcome(fn):
    """(array, None) or (None, (status, message))."""
    try:
        return np.asarray(fn()), None
    except NotImplementedError as e:          # MK_ERR_UNSUPPORTED: a documented limitation
        return None, ("unsupported", str(e) or type(e).__name__)
    except Exception as e:  # noqa: BLE001 - every failure becomes a row, the run goes on
        msg = f"{type(e).__name__}: {e}"
        if not isinstance(e, (ValueError, TypeError, RuntimeError)):
            msg += "\n" + "".join(traceback.format_exception(type(e), e, e.__traceback__)[-3:])
        return None, ("error", msg)


def run(names, dtypes=DTYPES, seed=0, cases=CASES, progress=None):
    """Rows for every case x dtype x backend in `names`; cpu always runs as the reference."""
    rows = []
    for case in cases:
        for dt in dtypes:
            rng = np.random.default_rng(seed)
            call, ref, reduction = case.build(rng, np.dtype(dt))
            tol = tolerance(dt, reduction)
            cpu, cpu_err = _outcome(lambda: call("cpu"))
            for be in names:
                out, err = (cpu, cpu_err) if be == "cpu" else _outcome(lambda: call(be))
                if progress:
                    progress(case, dt, be)
                if err:
                    rows.append(Row(case.op, case.label, dt, be, err[0], None, None, tol, err[1]))
                    continue
                e_ref = _error(out, ref) if ref is not None else None
                e_cpu = _error(out, cpu) if be != "cpu" and cpu is not None else None
                ok = (e_ref is None or e_ref <= tol) and (e_cpu is None or e_cpu <= 2 * tol)
                note = ""
                if be == "cpu" and ref is None:
                    note = "cpu is the reference here"
                elif be != "cpu" and cpu is None:
                    note = "cpu failed: compared with float64 only"
                if ref is None and e_cpu is None and be != "cpu":
                    ok, note = False, "nothing to compare with (cpu failed)"
                mark = _override_mark(be)
                rows.append(Row(case.op, case.label, dt, be, "pass" if ok else "FAIL",
                                e_ref, e_cpu, tol, f"{note}; {mark}" if note and mark else note or mark))
    return rows


def _override_mark(be):
    """The note of a metal row on a GPU older than Apple7 (MPSKERN_METAL_MIN_FAMILY, e.g. the
    paravirtual Apple5 GPU of hosted CI runners): its kernels leave out simdgroup matrices."""
    if be != "metal":
        return ""
    family = (backends.get("metal").info or {}).get("family") or 7
    return f"Apple{family} override: no simdgroup_matrix kernels" if family < 7 else ""


def failed(rows):
    return [r for r in rows if r.status in ("FAIL", "error", "crashed")]


# -- isolation: each case x dtype x backend in its own process --------------------------------
# An MPSGraph assertion aborts the process; in a child it becomes a row ("crashed (SIGABRT)")
# and the run goes on. The child runs `run` for one case, dtype and backend and prints the
# row as JSON after a marker.
_MARK = "MPSKERN-SELFTEST-ROW "
_CHILD_CODE = "import sys; from mpskern.cli import selftest as s; s._child(*sys.argv[1:])"
CHILD_TIMEOUT_S = 600


def _child(index, dt, be, seed):
    (row,) = [r for r in run([be], [dt], int(seed), [CASES[int(index)]]) if r.backend == be]
    print(_MARK + json.dumps(_row_json(row)), flush=True)


def _row_json(r):
    d = asdict(r)
    for k in ("err_ref", "err_cpu", "tol"):
        if d[k] is not None and not math.isfinite(d[k]):
            d[k] = str(d[k])                      # JSON has no inf/nan
    return d


def _row_from_json(d):
    for k in ("err_ref", "err_cpu", "tol"):
        if isinstance(d.get(k), str):
            d[k] = float(d[k])
    return Row(**d)


def run_isolated(names, dtypes=DTYPES, seed=0, cases=CASES, progress=None, timeout=CHILD_TIMEOUT_S):
    """run()'s rows, each computed in a child process of its own."""
    rows = []
    for case in cases:
        index = CASES.index(case)
        for dt in dtypes:
            for be in names:
                if progress:
                    progress(case, dt, be)
                try:
                    r = subprocess.run([sys.executable, "-c", _CHILD_CODE, str(index), dt, be, str(seed)],
                                       capture_output=True, text=True, timeout=timeout)
                except subprocess.TimeoutExpired:
                    rows.append(Row(case.op, case.label, dt, be, "crashed", None, None, tolerance(dt),
                                    f"crashed (no result after {timeout} s)"))
                    continue
                line = next((ln for ln in r.stdout.splitlines() if ln.startswith(_MARK)), None)
                if r.returncode == 0 and line:
                    rows.append(_row_from_json(json.loads(line[len(_MARK):])))
                    continue
                if r.returncode < 0:
                    try:
                        sig = signal.Signals(-r.returncode).name
                    except ValueError:
                        sig = f"signal {-r.returncode}"
                    why = f"crashed ({sig})"
                else:
                    why = f"crashed (exit status {r.returncode})"
                tail = "\n".join((r.stderr or "").strip().splitlines()[-6:])
                rows.append(Row(case.op, case.label, dt, be, "crashed", None, None, tolerance(dt),
                                why + (f"\n{tail}" if tail else "")))
    return rows


def write_json(path, header, rows, names, dtypes, isolated):
    """The report a user attaches to a bug report."""
    import mpskern
    data = {"format": "mpskern-selftest", "version": 1, "mpskern": mpskern.__version__,
            "header": header, "backends": names, "dtypes": dtypes, "isolated": isolated,
            "summary": {s: sum(r.status == s for r in rows) for s in ("pass", "FAIL", "error", "crashed",
                                                                      "unsupported")},
            "rows": [_row_json(r) for r in rows]}
    from mpskern.atomic_write import atomic_write
    with atomic_write(path) as f:
        json.dump(data, f, indent=1)
        f.write("\n")


# -- the header: what a bug report needs ------------------------------------------------------
def header_lines(names):
    import mpskern
    from mpskern.bench import provenance
    m = provenance.machine()
    os_name = m["os"]
    if sys.platform == "darwin" and platform.mac_ver()[0]:
        os_name = f"macOS {platform.mac_ver()[0]} ({platform.machine()})"
    lines = [f"mpskern {mpskern.__version__}" + (f" (git {m['git_commit']})" if m["git_commit"] else ""),
             f"OS: {os_name}; CPU: {m['cpu']} ({m['cpu_count']} cores)",
             f"Python {m['python']}, numpy {m['numpy']}"]
    for be in backends.NAMES:
        ok, why = backends.availability(be)
        tested = " (tested)" if be in names else ""
        lines.append(f"backend {be}: {'available' if ok else 'unavailable'}{tested}: {why}")
        if ok and be in ("metal", "sim"):
            i = backends.get(be).info
            fam = f"Apple{i['family']}" if i.get("family") else "unknown family"
            arch = f", {i['architecture']}" if i.get("architecture") else ""
            ws = i.get("recommended_working_set") or 0
            lines.append(f"  device: {i['name']} ({fam}{arch}); {i['max_threads_per_threadgroup']} threads/"
                         f"threadgroup, {i['max_threadgroup_memory'] // 1024} KiB threadgroup memory"
                         + (f", working set {ws / 2**30:.1f} GiB" if ws else "")
                         + f", page {i['page_size']} B")
    return lines


def _fmt_err(e, tol, limit):
    if e is None:
        return "-"
    s = "inf" if math.isinf(e) else f"{e:.1e}"
    return tty.styled(s, "red") if e > limit else s


def table(rows):
    t = Table(title="mpskern selftest", title_justify="left")
    for c, j in (("op", "left"), ("case", "left"), ("dtype", "left"), ("backend", "left"),
                 ("result", "left"), ("err vs float64", "right"), ("err vs cpu", "right"),
                 ("tolerance", "right"), ("note", "left")):
        t.add_column(c, justify=j)
    color = {"pass": "green", "FAIL": "red", "error": "red", "crashed": "red", "unsupported": "yellow"}
    for r in rows:
        note = "see below" if r.status in ("FAIL", "error", "crashed") and r.note else (r.note.splitlines() or [""])[0]
        t.add_row(r.op, r.label, r.dtype, r.backend, tty.styled(r.status, color[r.status]),
                  _fmt_err(r.err_ref, r.tol, r.tol), _fmt_err(r.err_cpu, r.tol, 2 * r.tol),
                  f"{r.tol:.1e}", note[:80])
    return t


@app.command()
def selftest(
    backend: Optional[List[str]] = typer.Option(
        None, "--backend", "-b",
        help="Backend to test (repeatable). Default: every available one, sim only where there is "
             "no Metal GPU (on Linux: cpu and sim). cpu always runs as reference."),
    dtype: Optional[List[str]] = typer.Option(
        None, "--dtype", "-d", help="float32 and/or float16 (repeatable; default both)."),
    op: Optional[List[str]] = typer.Option(None, "--op", help="Only these ops (repeatable)."),
    seed: int = typer.Option(0, help="Seed of the inputs."),
    isolate: Optional[bool] = typer.Option(
        None, "--isolate/--no-isolate",
        help="Run each op x dtype x backend in its own process, so a crash (an MPSGraph assertion "
             "aborts the process) becomes a row and the run goes on. Default: on when stdout is "
             "not a terminal."),
    json_path: Optional[str] = typer.Option(
        None, "--json", metavar="FILE", help="Also write the header and every row to FILE (JSON), "
                                             "to attach to a bug report."),
    calibrate: bool = typer.Option(False, "--calibrate", help="Instead of the checks: measure a "
                                   "few cases on this Mac's GPU and record measured / modelled "
                                   "times for the performance model (docs/profiling.md)."),
):
    """Check every op x dtype x backend against cpu; exit 1 on any failure."""
    out = tty.wide(160)                 # a pasted report keeps whole columns
    err = tty.console(stderr=True)
    if calibrate:
        _calibrate(out, err)
        return
    if backend:
        bad = [b for b in backend if b not in backends.NAMES]
        if bad:
            tty.error(f"unknown backend(s) {bad}; use one of {', '.join(backends.NAMES)}")
        names = list(dict.fromkeys(backend))
    else:
        # every backend this machine runs; the simulator only where there is no GPU (it is
        # slow, and on a Mac metal runs the same kernels): on Linux, cpu and sim
        avail = backends.available()
        names = [b for b in avail if b != "sim" or "metal" not in avail]
    dtypes = list(dict.fromkeys(dtype or DTYPES))
    if any(d not in DTYPES for d in dtypes):
        tty.error(f"--dtype must be one of {', '.join(DTYPES)}, got {dtypes}")
    known = sorted({c.op for c in CASES})
    unknown = [o for o in op or () if o not in known]
    if unknown:  # also when other --op values are fine: a typo must not shrink the run silently
        tty.error(f"no cases for --op {unknown}; ops: {', '.join(known)}")
    cases = [c for c in CASES if not op or c.op in op]
    if seed < 0:
        tty.error(f"--seed {seed}: give 0 or a positive integer")
    why = json_path and schema.unwritable(json_path, make_folder=False)   # before any case
    if why:
        tty.error(f"--json {json_path}: cannot write: {why}")

    header = header_lines(names)
    for line in header:
        out.print(line)
    unavailable = [(b, backends.availability(b)[1]) for b in names if not backends.availability(b)[0]]
    for b, why in unavailable:
        out.print(tty.styled(f"cannot test backend {b!r}: {why}", "red"))
    names = [b for b in names if b not in dict(unavailable)]

    total = len(cases) * len(dtypes) * len(names)
    done = [0]

    def progress(case, dt, be):
        done[0] += 1
        err.print(tty.progress_line(err, f"[{done[0]}/{total}] {case.op} {dt} {be}"), end="\r")

    if isolate is None:
        isolate = not sys.stdout.isatty()
    runner = run_isolated if isolate else run
    rows = runner(names, dtypes, seed, cases, progress if err.is_terminal else None)
    out.print(tty.fit(out, table(rows)))
    bad = failed(rows)
    for r in rows:
        if r.status == "unsupported" or r in bad:
            c = "yellow" if r.status == "unsupported" else "red"
            out.print(tty.line((r.status, c), f" {r.op} {r.label} {r.dtype} on {r.backend}: "
                               f"{r.note}"))
    n_uns = sum(r.status == "unsupported" for r in rows)
    n_crash = sum(r.status == "crashed" for r in rows)
    out.print(f"{len(rows) - len(bad) - n_uns} passed, {len(bad)} failed"
              + (f" ({n_crash} crashed)" if n_crash else "") + f", {n_uns} unsupported "
              f"({', '.join(names) or 'no backend'}; {', '.join(dtypes)})"
              + ("; each case in its own process" if isolate else ""))
    if json_path:
        try:
            write_json(json_path, header, rows, names, dtypes, isolate)
        except OSError as e:
            tty.error(f"--json {json_path}: cannot write: {e.strerror or e}")
        out.print(f"report written to {json_path}")
    if bad or unavailable or not names:
        raise typer.Exit(1)


def _calibrate(out, err, measure=None):
    """`--calibrate`: mpskern/profiling/calibrate.py on the Metal GPU (a Mac only)."""
    from mpskern.profiling import calibrate
    ok, why = backends.availability("metal")
    if not ok:
        tty.error(f"--calibrate measures the Metal GPU, which is unavailable here: {why}; "
                  "nothing recorded", con=err)
    info = backends.get("metal").info
    rec = calibrate.calibrate(info["name"], info["family"],
                              measure=measure or calibrate.measure_metal,
                              progress=lambda op, shape, dt: err.print(f"{op} {shape} {dt}"))
    t = Table(title=f"model calibration: {info['name']} (apple{rec['family']}, modelled as "
                    f"{rec['chip']})", title_justify="left")
    for c in ("op", "shape", "dtype", "measured ms", "modelled ms", "measured / modelled"):
        t.add_column(c)
    for r in rec["rows"]:
        t.add_row(r["op"], ",".join(f"{k}={v}" for k, v in r["shape"].items()), r["dtype"],
                  f"{r['measured_ms']:.4g}", f"{r['modelled_ms']:.4g}",
                  f"{r['ratio']:.2f}" if r["ratio"] else "-")
    out.print(tty.fit(out, t))
    out.print(f"factor {rec['factor']:.2f} (median of {rec['cases']} cases; p10-p90 "
              f"{rec['spread'][0]:.2f}-{rec['spread'][1]:.2f}) recorded in {rec['path']}; the "
              f"model's estimates for apple{rec['family']} are multiplied by it from now on")
