"""`mpskern devices`: every backend, available or not, and why (mpskern.devices())."""
import os

from rich.table import Table

import mpskern
from mpskern.cli import console as tty
from mpskern.cli.app import app

_WIDE = 140  # narrower consoles get the details as lines under the table


def _gib(n):
    return f"{n / 2 ** 30:.1f} GiB" if n else "-"


@app.command()
def devices():
    """List every backend: available or not, and why; device, GPU family, memory, peaks."""
    console = tty.console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = tty.console(width=160)    # piped or pasted: whole lines; a terminal: its width
    wide = console.width >= _WIDE
    t = Table(title="mpskern backends")
    cols = ("backend", "available", "device", "family", "memory", "peak FP32", "peak BW")
    for col in cols + (("details",) if wide else ()):
        t.add_column(col, no_wrap=col not in ("device", "details"))
    devs = mpskern.devices()
    for d in devs:
        row = [d.backend, "yes" if d.available else "no", d.name if d.available else "-",
               f"Apple{d.family}" if d.family else "-", _gib(d.memory),
               f"{d.peak_gflops_fp32:.0f} GFLOP/s" if d.peak_gflops_fp32 else "-",
               f"{d.peak_gbps:.0f} GB/s" if d.peak_gbps else "-"]
        t.add_row(*(row + ([d.reason] if wide else [])))
    console.print(tty.fit(console, t))   # narrow: one block a backend
    if not wide:
        for d in devs:
            console.print(f"{d.backend}: {d.reason}", soft_wrap=False)   # read, not grepped

