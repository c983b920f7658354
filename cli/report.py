"""`mpskern report PATH... -o DIR`: HTML and Markdown report with figures from bench
results; `--compare OLD NEW` adds a comparison that flags regressions beyond noise."""
import os
from typing import List, Optional, Tuple

import typer

from mpskern.cli import console as tty
from mpskern.cli.app import app


HELP = ("Write an HTML and Markdown report with figures from bench results.\n\n"
        "OUT/index.html and OUT/report.md, PNGs under OUT/figures: throughput per shape per "
        "backend with p10-p90 bands, speedup over cpu, a roofline with the device's peaks, "
        "the machine, and tables; with --compare OLD NEW, the cases that got slower beyond "
        "noise.")


@app.command(help=HELP)
def report(
    paths: Optional[List[str]] = typer.Argument(
        None, help="bench.jsonl files or folders holding them [default: NEW of --compare]."),
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
    if not paths and compare is None:
        tty.error("give results PATHs (bench.jsonl files or folders) or --compare OLD NEW")
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
    try:
        index = render.build(df, out, cmp)
    except OSError as e:
        tty.error(f"--out {out!r}: {e}")
    tty.console().print(f"report: {index} (and report.md)")
    if cmp is not None:
        reg = cmpmod.regressions(cmp)
        for r in reg.itertuples():
            err.print(tty.line(("regression", "red"), f" {r.case}: {r.verdict}"
                      + (f", {r.ratio:.3f}x the old time" if r.ratio == r.ratio and r.ratio else "")))
        both = int(cmp.verdict.isin(["regression", "improvement", "same", "broken", "fixed",
                                     "failing"]).sum())
        err.print(f"{len(reg)} regression(s) beyond noise in {both} cases present in both")
        if reg.shape[0] and fail_on_regression:
            raise typer.Exit(1)
