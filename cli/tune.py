"""`mpskern tune`: search an op's tile configurations on this GPU and store the fastest
correct one in the tuning database; `--show` says which configuration a call uses and why;
`--list` prints the database; `--merge FILE` adds a database someone shared."""
import os
import warnings
from typing import List, Optional

import typer
from rich import box
from rich.table import Table

from mpskern.cli import console as tty
from mpskern.cli.app import app


def _fmt(cfg, compact=False):
    from mpskern.tuner.search import fmt_config
    return fmt_config(cfg, compact) if cfg else "-"


def _ms(t):
    return f"{t:.4g}" if t is not None else "-"


@app.command()
def tune(
    op: Optional[str] = typer.Argument(None, help="The op, as `mpskern bench` names it: "
                                                  "conv2d, matmul, gemm, max_pool2d, ... "
                                                  "(see mpskern bench --help)."),
    backend: str = typer.Option("auto", help="metal (a Mac's GPU), sim (the simulator: CPU "
                                             "timings, stored for the simulated device only) or "
                                             "model-apple7..model-apple10 (ranked by the "
                                             "performance model: modelled GPU times, not "
                                             "measured). auto: metal where there is one, else "
                                             "the model of the simulated device's family."),
    dtype: str = typer.Option("float32", help="float32 or float16."),
    shape: Optional[List[str]] = typer.Option(
        None, help="The op's shape, repeatable, in the grammar of `mpskern bench --shape` "
                   "(e.g. gemm 512x512x256, conv2d 8x64x56x56x64x3x3,pad=1; bench --help "
                   "lists every op's fields). Default: one typical shape."),
    budget: float = typer.Option(30.0, help="Seconds per shape, everything included (inputs, "
                                            "reference, compiles, timed runs): a candidate "
                                            "whose compile would not fit is left unrun; the "
                                            "default configuration is always compiled and "
                                            "timed (the summary says when that alone took "
                                            "longer)."),
    stride: int = typer.Option(1, help="conv2d stride (the shape's stride field)."),
    padding: int = typer.Option(0, help="conv2d padding (the shape's pad field)."),
    groups: Optional[int] = typer.Option(None, help="conv2d groups (groups = C: the depthwise "
                                                     "kernel) or group_norm's G (the shape's "
                                                     "groups / G field)."),
    reps: int = typer.Option(5, help="Timed runs per candidate (fewer if it is pruned)."),
    show: bool = typer.Option(False, "--show", help="Print the configuration a call would "
                                                    "use and which lookup level chose it."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every candidate."),
    list_db: bool = typer.Option(False, "--list", help="Print the tuning database's entries."),
    merge: Optional[str] = typer.Option(None, help="Add the entries of a shared tuning "
                                                   "database file to yours."),
    db: Optional[str] = typer.Option(None, help="The tuning database file (default: "
                                                "$MPSKERN_TUNING_DB, else the user cache dir)."),
):
    # one line: rich keeps a docstring's line breaks, mid-sentence in the command list
    """Autotune an op's tile configuration for this GPU and store it in the tuning database; dispatch then uses it for this device, op, dtype and shape."""  # noqa: E501
    from mpskern.tuning import db as tdb

    console = tty.console()
    err = tty.console(stderr=True)
    with warnings.catch_warnings():       # warnings as one readable line each, in place
        warnings.simplefilter("always", tdb.TuningDatabaseWarning)
        warnings.showwarning = lambda message, *a, **k: tty.warning(err, message)
        _run(console, tdb, op, backend, dtype, shape, budget, stride, padding, groups, reps, show,
             verbose, list_db, merge, db)


def _run(console, tdb, op, backend, dtype, shape, budget, stride, padding, groups, reps, show,
         verbose, list_db, merge, db):
    from mpskern import BackendUnavailable, MpskernError, ops
    if db:
        os.environ[tdb.ENV_PATH] = os.path.abspath(db)
    if merge:
        try:
            n = tdb.merge(merge)
        except ValueError as e:
            tty.error(str(e))
        console.print(f"merged {n} entries of {merge} into {tdb.user_path()}")
        return
    if list_db:
        _list(console, tdb)
        return
    if op is None:
        tty.error("give an OP to tune (or --list / --merge FILE); see mpskern tune --help")
    if op not in ops.TABLE:
        tty.error(f"{op!r} is not a tunable op; tunable: {', '.join(ops.TABLE)}")
    if not 0 < budget < float("inf"):          # (also refuses nan)
        tty.error(f"--budget {budget}: give a finite, positive number of seconds")
    fields = {}           # shape fields the options set: conv2d stride/pad/groups, group_norm G
    if op == "conv2d" and (stride != 1 or padding != 0):
        fields.update(stride=stride, pad=padding)
    if groups is not None:
        if op not in ("conv2d", "group_norm"):
            tty.error("--groups applies to conv2d and group_norm only")
        if groups < 1:
            tty.error(f"--groups {groups}: give a positive number")
        fields["groups" if op == "conv2d" else "G"] = groups
    if op != "conv2d" and (stride != 1 or padding != 0):
        tty.error("--stride and --padding apply to conv2d only")
    # checked here, before the progress bar starts, so each message names its option
    if dtype not in ("float32", "float16"):
        tty.error(f"--dtype {dtype!r}: use float32 or float16")
    if stride < 1:
        tty.error(f"--stride {stride}: give a positive number")
    if padding < 0:
        tty.error(f"--padding {padding}: give 0 or a positive number")
    if reps < 1:
        tty.error(f"--reps {reps}: give a positive number of timed runs")
    try:
        from mpskern.tuner import tune as tuner
        if backend == "auto":
            backend = tuner.auto_backend()
            if backend != "metal" and not show:
                console.print(f"no Metal GPU here: ranking by the model (--backend {backend}: "
                              f"the simulator runs each candidate, the {backend[6:]} model "
                              f"times it; modelled GPU times, not measurements; the winner is "
                              f"checked on the simulator where small enough; docs/profiling.md)")
        tuner.gpu_backend(backend)
        spec = ops.get(op)
        shapes = [spec.parse(s) for s in shape] if shape else [spec.tune_shape(backend)]
        shapes = [spec.complete(dict(s, **fields)) for s in shapes]
        done = []
        for sh in shapes:
            spec.check_memory(sh, dtype)         # a huge shape: one line, before the bar
            try:
                if show:
                    _show(console, op, sh, dtype, backend)
                else:
                    done.append(_tune(console, op, sh, dtype, backend, budget, reps, verbose))
            except MemoryError as e:             # numpy: "Unable to allocate 7.3 TiB ..."
                tty.error(f"{op} {spec.key(sh)}: too big for this machine's memory ({e}); give "
                          "a smaller --shape")
            except KeyboardInterrupt:            # Ctrl-C: what is stored, what is not
                stored = [r.path for r in done if r.path]
                tty.interrupted(f"while tuning {op} {spec.key(sh)}: nothing stored for it" +
                                (f"; the {len(stored)} shapes tuned before are in {stored[0]}"
                                 if stored else ""))
        if done:
            _summary(console, op, dtype, backend, reps, done)
    except BackendUnavailable as e:
        hint = " (on a machine without Metal, --backend sim runs the tuner on the simulator)"
        tty.error(f"{e}{hint if backend == 'metal' else ''}")
    except (ValueError, TypeError, NotImplementedError, MpskernError, OSError) as e:
        tty.error(str(e))


def _show(console, op, shape, dtype, backend):
    from mpskern.tuner import tune as tuner
    c = tuner.show(op, shape, dtype, backend)
    dev = tuner.gpu_backend(backend).info
    console.print(tty.line((op, "bold"), f" {dtype} {'x'.join(map(str, c.shape))} on "
                           f"{dev['name']} (family apple{dev['family']}): ",
                           (_fmt(c.config), "bold")))
    console.print(f"  {c.explain()}")
    for level, src, cfg, why in c.rejected:
        console.print(f"  skipped {level} entry {_fmt(cfg)} ({src}): {why}")


def _tune(console, op, shape, dtype, backend, budget, reps, verbose):
    from mpskern.tuner import search
    from mpskern.tuner import tune as tuner
    with search.rich_progress(console, f"tuning {op}") as bar:
        r = tuner.tune(op, shape, dtype, backend, budget, reps=reps, progress=bar)
    res = r.result
    if verbose:
        t = Table(title="candidates")
        for col in ("configuration", "status", "median ms", "min ms", "runs", "error", "note"):
            t.add_column(col)
        for tr in res.trials:
            t.add_row(_fmt(tr.config) + (" (default)" if tr.is_default else ""), tr.status,
                      _ms(tr.median_ms), _ms(tr.min_ms), str(len(tr.times_ms)),
                      f"{tr.error:.2g}" if tr.error is not None else "-", tr.reason)
        console.print(tty.fit(console, t))
    counts = ", ".join(f"{v} {k}" for k, v in sorted(res.counts().items()))
    over = r.over_budget()
    console.print(tty.line(f"{'x'.join(map(str, r.key.shape))}: {res.elapsed_s:.1f} s of a "
                           f"{res.budget_s:g} s budget",
                           (f" (over: {over})", "yellow") if over else "",
                           f"; candidates: {counts}",
                           f"; stored in {r.path}" if r.path else
                           ("; nothing stored: no candidate matched the reference", "red")))
    return r


def _summary(console, op, dtype, backend, reps, results):
    dev = results[0].device
    t = Table(title=f"{op} {dtype} on {dev['name']} ({backend})", box=box.SIMPLE_HEAD,
              pad_edge=False)
    for col in ("key", "best", "ms", "default", "ms ", "speedup"):
        t.add_column(col, no_wrap=col not in ("best", "default"))
    for r in results:
        res, d = r.result, r.result.default
        t.add_row("x".join(map(str, r.key.shape)),
                  _fmt(res.best.config, True) if res.best else tty.styled("none correct", "red"),
                  _ms(res.best.median_ms) if res.best else "-",
                  _fmt(d.config, True) if d else "-", _ms(d.median_ms) if d else "-",
                  f"{res.speedup:.2f}x" if res.speedup else "-")
    console.print(tty.fit(console, t))
    timer = (f"modelled GPU time of {dev['model_chip']} (not measured)" if "model_chip" in dev
             else "simulator CPU time" if dev.get("is_simulator") else "GPU time")
    tiles = "; tiles BMxBNxBK/WMxWN" if results[0].key.op in ("gemm", "conv2d") else ""
    console.print(f"key: the {results[0].key.op} lookup's shape{tiles}; {timer}"
                  + ("" if "model_chip" in dev else f", median of up to {reps} runs"))


def _list(console, tdb):
    d = tdb.user_db()
    path = tdb.user_path()
    # the problem is a message (one line, grepped); the listing's lines are read: they wrap
    # at the terminal's width like the tables under them (a long path folds)
    if d.problem:
        console.print(tty.styled(f"{path} is unusable: {d.problem}", "red"))
        return
    if not len(d):
        console.print(f"{path}: no entries yet (run mpskern tune OP)", soft_wrap=False)
        return
    # one table per device (the device name as its title) and short cells kept whole, so
    # the listing stays readable in an 80-column terminal
    groups = {}
    for e in d.entries:
        groups.setdefault((e.device or e.architecture or "any device", e.backend), []).append(e)
    console.print(f"{path}: {len(d)} entries", soft_wrap=False)
    for (device, backend), entries in groups.items():
        t = Table(title=f"{device} ({backend})", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True)
        for col in ("op", "dtype", "shape", "configuration", "ms", "speedup", "date"):
            t.add_column(col, no_wrap=col != "configuration", min_width=17 if col ==
                         "configuration" else None)
        for e in entries:
            sp = f"{e.default_time_ms / e.time_ms:.2f}x" if e.time_ms and e.default_time_ms else "-"
            t.add_row(e.op, e.dtype, "x".join(map(str, e.shape)) if e.shape else (e.bucket or "*"),
                      _fmt(e.config), _ms(e.time_ms), sp, str(e.provenance.get("date", ""))[:10])
        console.print(tty.fit(console, t))
