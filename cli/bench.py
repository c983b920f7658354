"""`mpskern bench OP` / `mpskern bench --model NAME`: time an op or a whole network
(mpskern/models) on every backend (and installed peers) against the CPU, after checking
each case against a float64 reference. Rows are appended to OUT/bench.jsonl (a network's
rows carry its name as the op); a table goes to stdout (or JSON with --json); progress to
stderr."""
import json
import sys
from enum import Enum
from typing import List, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mpskern import models, ops
from mpskern.bench import runner, schema, targets
from mpskern.cli import console as tty
from mpskern.cli.app import app

Op = Enum("Op", {n: n for n in ops.TABLE}, type=str)
Model = Enum("Model", {n: n for n in models.MODELS}, type=str)


def _help():
    lines = ["Time OP on the backends against the CPU, each case checked against a float64 "
             "reference first (a failed check is reported, not timed).",
             "Default backends: every available one except sim (simulator timings are CPU "
             "emulation and say nothing about GPU speed; ask for it with --backend sim), plus "
             "installed peers (torch-cpu, torch-mps, mlx).",
             f"--shape: each op's fields, {ops.op.GRAMMAR} (the grammar of `mpskern tune` "
             "too):"]
    for name, sp in ops.TABLE.items():
        fields = ",".join(f.name if f.default is None else f"{f.name}={f.default}"
                          for f in sp.fields)
        lines.append(f"{name}: {fields} (e.g. {sp.example!r}); presets: {', '.join(sp.presets)}")
    lines.append("--model NAME times a whole network instead of an op (mpskern's ops with "
                 "numpy for glue; peers: the same network in torch.nn.functional, eval, "
                 "no_grad; random weights, fixed seed). Its --shape fields (defaults: the "
                 "real network; preset 'small': a reduced variant):")
    for name, m in models.MODELS.items():
        fields = ",".join(f"{f.name}={f.default}" for f in m.fields)
        lines.append(f"{name}: {m.about}; {fields}")
    return "\n\n".join(lines)


def _command_line(ctx):
    """The command as given: `mpskern bench` and the options set on the command line (not
    their defaults), quoted for a shell; from the command's context, so it is the same
    whatever started the program."""
    import shlex
    words = ["mpskern", ctx.info_name]
    for p in ctx.command.params:
        src = ctx.get_parameter_source(p.name)
        if getattr(src, "name", None) != "COMMANDLINE":
            continue
        v = ctx.params[p.name]
        values = v if isinstance(v, (list, tuple)) else [v]
        if p.param_type_name == "argument":
            words += [str(getattr(x, "value", x)) for x in values]
        elif p.is_flag:
            words.append(p.opts[-1] if v else (p.secondary_opts or [p.opts[-1]])[0])
        else:
            for x in values:
                words += [max(p.opts, key=len), str(getattr(x, "value", x))]
    return " ".join(shlex.quote(w) for w in words)


def _fmt(v, f="{:.3g}"):
    return "-" if v is None else f.format(v)


def _table(op, rows):
    metric = "GFLOP/s" if rows and rows[0]["metric"] == "gflops" else "GB/s"
    t = Table(title=f"mpskern bench {op}", title_justify="left")
    vs_cpu = any(r["backend"] != "cpu" for r in rows)     # a column of 1.00x says nothing
    for c, j in (("shape", "left"), ("dtype", "left"), ("backend", "left"),
                 ("median ms", "right"), ("p10-p90", "right"), (metric, "right"),
                 ("% peak", "right")) + ((("x cpu", "right"),) if vs_cpu else ()) + (
                 ("max err", "right"), ("note", "left")):
        t.add_column(c, justify=j)
    sim = model = False
    for r in rows:
        modelled = r["timer"] == "model"
        be = r["backend"] + ("+" if modelled else "*" if r["simulated"] else "")
        sim |= bool(r["simulated"]) and not modelled
        model |= modelled
        if r["status"] != "ok":
            t.add_row(r["shape_label"], r["dtype"], be, "-", "-", "-", "-", *(["-"] * vs_cpu),
                      _fmt(r["max_err"], "{:.1e}"), tty.line((r["status"], "red"), " (below)"))
            continue
        val = r["gflops"] if r["metric"] == "gflops" else r["gbps"]
        note = tty.line(("unstable", "yellow"), f" ({r['unstable_reason']})") if r["unstable"] else ""
        t.add_row(r["shape_label"], r["dtype"], be, f"{r['median_ms']:.4g}",
                  "model" if modelled else f"{r['p10_ms']:.3g}-{r['p90_ms']:.3g}", _fmt(val, "{:.1f}"),
                  _fmt(r["pct_peak"], "{:.0f}%"),
                  *([_fmt(r["speedup_vs_cpu"], "{:.2f}x")] * vs_cpu),
                  _fmt(r["max_err"], "{:.1e}"), note)
    notes = []
    if sim:
        notes.append("* sim: mpskern's Metal kernels emulated on the CPU; its times say "
                     "nothing about GPU speed")
    if model:
        notes.append("+ model-*: modelled GPU time on the family's base chip (docs/profiling.md; "
                     "+-30% uncalibrated), not measured")
    if op == "conv2d" and any((r["pct_peak"] or 0) > 100 for r in rows):
        notes.append("above 100% of peak: GFLOP/s count direct-convolution FLOPs; the cpu "
                     "backend's Winograd path does ~2-4x fewer multiplications")
    if any(r["timer"] == "gpu" for r in rows):
        notes.append("metal/mps: GPU time from command-buffer timestamps (wall time in the "
                     "results file)")
    t.caption = "\n".join(notes) or None
    return t


@app.command(help=_help())
def bench(
    ctx: typer.Context,
    op: Optional[Op] = typer.Argument(None, metavar="OP", show_choices=False,
                                      help="The op to time (or give --model)."),
    model: Optional[Model] = typer.Option(None, "--model", "-m",
                                          help="A whole network to time instead of an op."),
    batch: Optional[int] = typer.Option(None, "--batch", help="--model's batch size [default: 1]."),
    preset: Optional[str] = typer.Option(None, "--preset", "-p",
                                         help="Named shape set (see above) [default: small; "
                                         "--model: default, the real network]."),
    shape: Optional[List[str]] = typer.Option(None, "--shape", "-s",
                                              help="Your own shape (repeatable); replaces --preset."),
    dtype: Optional[List[str]] = typer.Option(None, "--dtype", "-d",
                                              help="float32 / float16 (repeatable) [default: float32]."),
    backend: Optional[List[str]] = typer.Option(
        None, "--backend", "-b", help="cpu, metal, mps, sim, torch-cpu, torch-mps, mlx, "
        "model-apple7..model-apple10 "
        "(repeatable) [default: every available one except sim, plus installed peers]."),
    budget: float = typer.Option(0.5, "--budget", help="Seconds of sampling per case."),
    out: str = typer.Option("results", "--out", "-o",
                            help="Folder for bench.jsonl (appended), or a .jsonl file."),
    no_save: bool = typer.Option(False, "--no-save", help="Do not append to --out."),
    csv: Optional[str] = typer.Option(None, "--csv", help="Also write this run's rows as CSV."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON (only) on stdout."),
    keep_samples: bool = typer.Option(False, "--keep-samples",
                                      help="Record every sample in the rows (samples_ms), so "
                                           "report --compare can bootstrap the ratio."),
):
    err = tty.console(stderr=True)
    fail = tty.error
    if (op is None) == (model is None):
        fail("give an op (mpskern bench softmax) or --model NAME (mpskern bench --model "
             f"resnet50), not {'both' if op else 'neither'}; networks: {', '.join(models.MODELS)}")
    if batch is not None and model is None:
        fail("--batch is --model's option; for an op give its batch field in --shape")
    name = (op or model).value
    sp = ops.get(name) if op else models.get(name)

    if not 0 < budget < float("inf"):         # (also refuses nan)
        fail(f"--budget must be > 0 seconds (and finite), got {budget}")
    try:
        if shape:
            cases, preset = [(sp.label(s), s) for s in (sp.parse(t) for t in shape)], "custom"
        else:
            preset = preset or ("default" if model else "small")
            cases = sp.preset(preset)
        if batch is not None:
            cases = [(sp.label(s), s) for s in
                     (sp.complete({**s, "batch": batch}, f"--batch {batch}") for _, s in cases)]
    except ValueError as e:
        fail(str(e))
    dtypes = list(dict.fromkeys(dtype or ["float32"]))     # a repeated --dtype runs once
    for d in dtypes:
        if d not in runner.DTYPES:
            fail(f"--dtype {d!r}: use float32 or float16")
    try:
        names = backend or targets.default_names()
        tgs = [targets.make(n) for n in dict.fromkeys(names)]
    except ValueError as e:
        fail(str(e))
    for t in tgs:
        ok, why = t.availability()
        if not ok:
            fail(f"backend {t.name!r} is unavailable here: {why}")
    if any(t.simulated for t in tgs):
        tty.note(err, "sim runs mpskern's Metal kernels in a CPU simulator: its times say "
                      "nothing about GPU speed.")

    # every output checked before anything is measured
    path = None if no_save else runner.default_out_file(out)
    for opt, given, target, verb in (("--out", out, path, "append to"),
                                     ("--csv", csv, csv, "write")):
        if target:
            problem = schema.unwritable(target)
            if problem:
                fail(f"{opt} {given!r}: cannot {verb} {target}: {problem}")
    run_id = runner.new_run_id()

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as prog:
        task = prog.add_task(f"bench {name}", total=len(cases) * len(dtypes) * len(tgs))

        def on_case(label, dt, be):
            prog.update(task, description=f"{name} {label} {dt} {be}")

        done = []

        def on_row(r):
            prog.advance(task)
            if path:
                schema.append_jsonl(path, [r])
            done.append(r)

        try:
            rows = runner.run(sp, cases, dtypes, tgs, budget=budget, run_id=run_id,
                              preset=preset, on_row=on_row, on_case=on_case,
                              command=_command_line(ctx), keep_samples=keep_samples)
        except runner.CaseTooBig as e:
            fail(str(e))
        except KeyboardInterrupt:
            rows = None
    if rows is None:                 # Ctrl-C: say what the finished cases left where
        saved = f"appended to {path}" if path else "not saved (--no-save)"
        if csv and done:
            schema.write_csv(csv, done)
            saved += f"; CSV: {csv}"
        tty.interrupted(f"the {len(done)} finished rows of this run were {saved}")
    try:
        if csv:
            schema.write_csv(csv, rows)
    except OSError as e:
        fail(f"--csv {csv!r}: {e}")
    if as_json:
        sys.stdout.write(json.dumps(schema.clean(rows), allow_nan=False, indent=1) + "\n")
    else:
        con = tty.wide(200)
        con.print(tty.fit(con, _table(name, rows)))
    if path:
        err.print(f"{len(rows)} rows appended to {path}" + (f"; CSV: {csv}" if csv else ""))
    bad = [r for r in rows if r["status"] != "ok" and r["backend_kind"] == "mpskern"]
    for r in rows:
        if r["status"] != "ok":
            err.print(tty.line((r["status"], "red"), f" {name} {r['shape_label']} {r['dtype']} "
                               f"{r['backend']}: {r['error']}"))
    if bad:
        raise typer.Exit(1)
