"""`mpskern report PATH... -o DIR`: HTML and Markdown report with figures from bench
results; `--compare OLD NEW` adds a comparison that flags regressions beyond noise."""
import os
from typing import List, Optional, Tuple

import typer

from mpskern.cli import console as tty
from mpskern.cli.app import app


DEFAULT_RESULTS = "results"     # cli/bench.py's --out default

HELP = ("Write an HTML and Markdown report with figures from bench results.\n\n"
        "OUT/index.html and OUT/report.md, PNGs under OUT/figures: throughput per shape per "
        "backend (points with p10-p90 bars), speedup over cpu, a roofline with the device's peaks, "
        "the machine, and tables; with --compare OLD NEW, the cases that got slower beyond "
        "noise.")


@app.command(help=HELP)
def report(
    paths: Optional[List[str]] = typer.Argument(
        None, help="bench.jsonl files or folders holding them [default: NEW of --compare, "
                   "else the bench's default folder, results/]."),
    out: str = typer.Option("results/report", "--out", "-o", help="Folder for the report."),
    compare: Optional[Tuple[str, str]] = typer.Option(
        None, "--compare", help="OLD NEW: results to compare (files or folders)."),
    threshold: float = typer.Option(0.05, "--threshold",
                                    help="Slowdown (fraction) a regression must exceed."),
    fail_on_regression: bool = typer.Option(False, "--fail-on-regression",
                                            help="Exit 1 if the comparison finds regressions."),
):
    from mpskern.bench import schema
    from mpskern.report import compare as cmpmod
    from mpskern.report import data, render

    err = tty.console(stderr=True)
    if not (0 <= threshold < float("inf")):   # (also refuses nan)
        tty.error(f"--threshold must be a finite fraction >= 0 (e.g. 0.05 for 5%), got "
                  f"{threshold}")
    if compare is not None and None in compare:
        compare = None
    if compare is not None and compare[1].startswith("-"):
        # click took the next option as NEW: `--compare OLD -o X`
        tty.error(f"--compare needs OLD and NEW, and NEW is missing (got {compare[1]!r} where "
                  f"NEW should be): --compare {compare[0]} NEW.jsonl")
    if not paths and compare is None:
        if not any(f.endswith(".jsonl") for f in (os.listdir(DEFAULT_RESULTS)
                                                  if os.path.isdir(DEFAULT_RESULTS) else ())):
            tty.error(f"no results in {DEFAULT_RESULTS}/ here (where `mpskern bench` writes by "
                      "default): give results PATHs (bench.jsonl files or folders) or "
                      "--compare OLD NEW")
        paths = [DEFAULT_RESULTS]
        err.print(f"report: reading {DEFAULT_RESULTS}/ (the bench's default folder)")
    problem = schema.unwritable(os.path.join(out, "index.html"))   # before reading anything
    if problem:
        tty.error(f"--out {out!r}: cannot write the report there: {problem}")
    torn = []
    try:
        df = data.load(paths or [compare[1]], skipped=torn)
        cmp = None
        if compare is not None:
            cmp = cmpmod.compare(data.load([compare[0]], skipped=torn),
                                 data.load([compare[1]], skipped=torn), threshold)
    except (OSError, ValueError) as e:
        tty.error(str(e))
    for where in dict.fromkeys(torn):
        tty.warning(err, f"skipped {where}: a torn line (a run cut short while appending)")
    info = None
    if cmp is not None:
        info = dict(old=compare[0], new=compare[1], threshold=threshold,
                    env=cmpmod.environment(data.load([compare[0]]), data.load([compare[1]])))
        err.print(f"comparing OLD {compare[0]} with NEW {compare[1]}")
        for field, a, b in info["env"]:
            err.print(f"  {field}: {a} -> {b}" if field != "load average (1 min)" or a != b
                      else f"  {field}: {a}")
    try:
        index = render.build(df, out, cmp, info=info)
    except OSError as e:
        tty.error(f"--out {out!r}: {e}")
    tty.console().print(f"report: {index} (and report.md)")
    if cmp is not None:
        reg = cmpmod.regressions(cmp)
        for r in reg.itertuples():
            spread = (f" (p10-p90 {r.old_p10:.4g}-{r.old_p90:.4g} -> {r.new_p10:.4g}-"
                      f"{r.new_p90:.4g} ms)" if r.rule else "")
            err.print(tty.line(("regression", "red"), f" {r.case}: {r.verdict}"
                      + (f", {r.ratio:.3f}x the old time" if r.ratio == r.ratio and r.ratio else "")
                      + spread + (f" [{r.rule}]" if r.rule else "")))
        both = int(cmp.verdict.isin(["regression", "improvement", "same", "broken", "fixed",
                                     "failing"]).sum())
        err.print(f"{len(reg)} regression(s) beyond noise in {both} cases present in both")
        if reg.shape[0] and fail_on_regression:
            raise typer.Exit(1)
