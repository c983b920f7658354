"""`mpskern report PATH... -o DIR`: HTML and Markdown report with figures from bench
results; `--compare OLD NEW` adds a comparison that flags regressions beyond noise."""
from typing import List, Optional, Tuple

import typer
from rich.console import Console

from mpskern.cli.app import app


HELP = ("Write an HTML and Markdown report with figures from bench results.\n\n"
        "OUT/index.html and OUT/report.md, PNGs under OUT/figures: throughput per shape per "
        "backend with p10-p90 bands, speedup over cpu, a roofline with the device's peaks, "
        "the machine, and tables; with --compare OLD NEW, the cases that got slower beyond "
        "noise.")


@app.command(help=HELP)
def report(
    paths: Optional[List[str]] = typer.Argument(
        None, help="bench.jsonl files or folders holding them \\[default: NEW of --compare]."),
    out: str = typer.Option("results/report", "--out", "-o", help="Folder for the report."),
    compare: Optional[Tuple[str, str]] = typer.Option(
        None, "--compare", help="OLD NEW: results to compare (files or folders)."),
    threshold: float = typer.Option(0.05, "--threshold",
                                    help="Slowdown (fraction) a regression must exceed."),
    fail_on_regression: bool = typer.Option(False, "--fail-on-regression",
                                            help="Exit 1 if the comparison finds regressions."),
):
    from mpskern.report import compare as cmpmod
    from mpskern.report import data, render

    err = Console(stderr=True)
    if not (0 <= threshold < float("inf")):   # (also refuses nan)
        err.print(f"[red]error:[/red] --threshold must be a finite fraction >= 0 (e.g. 0.05 for "
                  f"5%), got {threshold}")
        raise typer.Exit(2)
    if compare is not None and None in compare:
        compare = None
    if not paths and compare is None:
        err.print("[red]error:[/red] give results PATHs (bench.jsonl files or folders) or "
                  "--compare OLD NEW")
        raise typer.Exit(2)
    try:
        df = data.load(paths or [compare[1]])
        cmp = None
        if compare is not None:
            cmp = cmpmod.compare(data.load([compare[0]]), data.load([compare[1]]), threshold)
    except (OSError, ValueError) as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2)
    index = render.build(df, out, cmp)
    Console().print(f"report: {index} (and report.md)")
    if cmp is not None:
        reg = cmpmod.regressions(cmp)
        for r in reg.itertuples():
            err.print(f"[red]regression[/red] {r.case}: {r.verdict}"
                      + (f", {r.ratio:.3f}x the old time" if r.ratio == r.ratio and r.ratio else ""))
        both = int(cmp.verdict.isin(["regression", "improvement", "same", "broken", "fixed",
                                     "failing"]).sum())
        err.print(f"{len(reg)} regression(s) beyond noise in {both} cases present in both")
        if reg.shape[0] and fail_on_regression:
            raise typer.Exit(1)
