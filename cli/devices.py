"""`mpskern devices`: every backend, available or not, and why (mpskern.devices())."""
from rich.console import Console
from rich.table import Table

import mpskern
from mpskern.cli.app import app


def _gib(n):
    return f"{n / 2 ** 30:.1f} GiB" if n else "-"


@app.command()
def devices():
    """List every backend: available or not, and why; device, GPU family, memory, peaks."""
    t = Table(title="mpskern backends")
    for col in ("backend", "available", "device", "family", "memory", "peak FP32", "peak BW",
                "details"):
        t.add_column(col)
    for d in mpskern.devices():
        t.add_row(d.backend, "yes" if d.available else "no", d.name if d.available else "-",
                  f"Apple{d.family}" if d.family else "-", _gib(d.memory),
                  f"{d.peak_gflops_fp32:.0f} GFLOP/s" if d.peak_gflops_fp32 else "-",
                  f"{d.peak_gbps:.0f} GB/s" if d.peak_gbps else "-", d.reason)
    Console(width=160).print(t)
