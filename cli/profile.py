"""`mpskern profile OP --shape ...`: run one op in the simulator's profiling mode and print
its counters per dispatch (memory efficiency, bank conflicts, ALU mix, barriers, hot
source lines), or JSON with --json. See docs/profiling.md."""
import json
from typing import Optional

import typer
from rich import box
from rich.table import Table

from mpskern.cli import console as tty
from mpskern.cli.app import app


def _fail(console, msg, code=2):
    tty.error(msg, code)      # stderr, one line


def _config(text, console):
    if text is None:
        return None
    try:
        cfg = json.loads(text)
    except ValueError as e:
        _fail(console, f"--config {text!r} is not JSON ({e}); e.g. "
                       "--config '{\"variant\": \"simd\", \"BM\": 64, \"BN\": 64, \"BK\": 16, \"WM\": 2, \"WN\": 2}'")
    if not isinstance(cfg, dict):
        _fail(console, f"--config must be a JSON object of the op's tile parameters, got {text!r}")
    return cfg


@app.command()
def profile(
    op: str = typer.Argument(..., help="An op of the op table (`mpskern bench --help`): gemm, matmul, conv2d, max_pool2d, "
                                       "avg_pool2d, softmax, log_softmax, layer_norm, rms_norm, "
                                       "batch_norm, group_norm."),
    shape: str = typer.Option(..., help="The op's shape (the grammar of bench and tune), e.g. gemm "
                                        "'M=512,N=512,K=512', conv2d '1,64,56,56,64,3,pad=1'."),
    dtype: str = typer.Option("float32", help="float32 or float16."),
    config: Optional[str] = typer.Option(None, help="Pin a tile configuration (JSON object of the "
                                                    "op's tuning space, as `mpskern tune` stores)."),
    family: Optional[str] = typer.Option(None, help="The GPU family to run as (apple7..apple10): "
                                                    "its default configurations apply, and the "
                                                    "model estimates its base chip. Default: the "
                                                    "simulator's (apple8)."),
    chip: Optional[str] = typer.Option(None, help="Model this chip instead of the family's base "
                                                  "chip, e.g. 'Apple M1 Max' (sets the family)."),
    max_groups: int = typer.Option(64, help="Threadgroups profiled per dispatch; bigger grids are "
                                            "sampled (edges and interior) and counts scaled. 0: all."),
    run_all: bool = typer.Option(False, "--run-all", help="Run every threadgroup, not only the "
                                                          "sampled ones (slower; outputs complete)."),
    lines: int = typer.Option(6, help="Hot source lines shown per dispatch."),
    as_json: bool = typer.Option(False, "--json", help="Print the counters as JSON."),
    out: Optional[str] = typer.Option(None, help="Also write the JSON to this file."),
):
    """Count what an op's Metal kernels do, in the simulator: memory coalescing and vector width, threadgroup bank conflicts, FLOPs and integer divisions, barriers; no Mac needed."""  # noqa: E501
    console = tty.console(stderr=as_json)
    from mpskern.profiling.run import model_of, profile_op
    if dtype not in ("float32", "float16"):
        _fail(console, f"--dtype {dtype!r}: profile float32 or float16")
    if max_groups < 0:
        _fail(console, f"--max-groups {max_groups}: give 0 (every threadgroup) or more")
    cfg = _config(config, console)
    from mpskern import peaks
    fam_n = None
    try:
        if chip is not None:
            the_chip = peaks.chip(chip)
            fam_n = the_chip.family
            if family is not None and peaks.chip(family).family != fam_n:
                _fail(console, f"--chip {chip!r} is an apple{fam_n} GPU, not {family}")
        elif family is not None:
            fam_n = peaks.chip(family).family
    except ValueError as e:
        _fail(console, str(e))
    if out is not None:          # before the run; the check leaves no file behind
        from mpskern.bench import schema
        why = schema.unwritable(out, make_folder=False)
        if why:
            _fail(console, f"--out {out!r} is not writable: {why}")
    try:
        prof, info = profile_op(op, shape, dtype, config=cfg, family=fam_n, max_groups=max_groups,
                                sampled_only=not run_all)
        summary = model_of(prof, info, chip)
    except (ValueError, TypeError) as e:
        _fail(console, str(e))
    except Exception as e:   # compile errors, simulator failures: one line, not a traceback
        from mpskern._errors import MpskernError
        if isinstance(e, MpskernError):
            _fail(console, f"{type(e).__name__}: {e}", code=1)
        raise
    doc = dict(info, **prof.as_dict(), model=summary.as_dict())
    text = json.dumps(doc, indent=1, default=float)
    if out is not None:          # whole or not at all (a failure or Ctrl-C leaves no torn file)
        from mpskern.atomic_write import atomic_write
        with atomic_write(out) as f:
            f.write(text + "\n")
    if as_json:
        typer.echo(text)
        return
    _print(console, info, prof, lines)
    _print_model(console, summary, prof)


def _print_model(console, s, prof):
    from mpskern.profiling import report
    t = Table(title=f"model of {s.chip} (apple{s.family}): estimates, not measurements"
              + (" (calibrated)" if s.calibrated else " (uncalibrated: +-30% or worse)"),
              box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for col in ("kernel", "lower bound", "estimate", "bound by", "SIMD-groups/core"):
        t.add_column(col, overflow="fold")
    for d, e in zip(prof.dispatches, s.dispatches):
        t.add_row(d["kernel"], report.ms(e.lower_ms), report.ms(e.estimate_ms), e.bound,
                  f"{e.simdgroups_per_core:g} ({e.occupancy_limit}, {e.registers} registers)")
    console.print(tty.fit(console, t))
    pct = s.roofline_pct
    console.print(f"total: lower bound {report.ms(s.lower_ms)}, estimate {report.ms(s.estimate_ms)}"
                  + (f"; {pct:.0f}% of the op's roofline ({report.ms(s.roofline_ms)})" if pct else "")
                  + " [modelled]")


def _print(console, info, prof, nlines):
    from mpskern.profiling import report
    shape = ",".join(f"{k}={v}" for k, v in info["shape"].items())
    cfg = info.get("config") or {}
    console.print(f"{info['op']} {shape} {info['dtype']} on the simulator "
                  f"(counts of what the kernel does; GPU times need a Mac or the model)")
    if cfg:
        console.print("configuration: " + " ".join(f"{k}={v}" for k, v in cfg.items()
                                                     if k not in ("zero_copy",)))
    if not prof.dispatches:
        console.print("no dispatch ran (an empty problem)")
    for d in prof.dispatches:
        t = Table(title=d["kernel"], box=box.SIMPLE_HEAD, title_justify="left", show_header=False,
                  pad_edge=False)
        t.add_column("", style="bold", no_wrap=True)
        t.add_column("")
        t.add_column("", overflow="fold")
        last = None
        for section, what, value in report.dispatch_rows(d):
            t.add_row(section if section != last else "", what, value)
            last = section
        console.print(tty.fit(console, t))
        hot = report.hot_lines(d, nlines)
        if hot:
            h = Table(title="hot source lines (memory instructions)", box=box.SIMPLE_HEAD,
                      title_justify="left", pad_edge=False)
            h.add_column("line", no_wrap=True)
            h.add_column("what")
            h.add_column("", overflow="fold")
            for row in hot:
                h.add_row(*row)
            console.print(tty.fit(console, h))
