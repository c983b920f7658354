"""Results rows as a pandas DataFrame, reduced to one row per case (the latest), with the
throughput each op is read in and its p10-p90 band."""
import pandas as pd

from mpskern.bench import schema

CASE = ["op", "shape_key", "dtype", "backend"]
BACKEND_ORDER = ["cpu", "metal", "mps", "sim", "torch-cpu", "torch-mps", "mlx"]


def load(paths, skipped=None):
    """DataFrame of every row in the JSON Lines files / folders `paths` (torn lines are
    skipped: see schema.read_jsonl)."""
    rows = schema.read_jsonl(paths, skipped)
    if not rows:   # named as given: a folder without .jsonl files expands to nothing
        given = [paths] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") else paths
        raise ValueError("no result rows in " + ", ".join(
            f"{p} (no .jsonl files in the folder)" if not schema.expand([p]) else str(p)
            for p in given))
    return frame(rows)


def frame(rows):
    df = pd.DataFrame(rows)
    for c in schema.COLUMNS:
        if c not in df:
            df[c] = None
    df["timestamp"] = pd.to_datetime(df["timestamp"], utc=True, errors="coerce")
    return df


def latest(df):
    """One row per case (op, shape, dtype, backend): the most recent."""
    return df.sort_values("timestamp").groupby(CASE, as_index=False, sort=False).tail(1)


def with_throughput(df):
    """Adds value / lo / hi: the op's metric at the median, p90 and p10 times, and
    `unit` (GFLOP/s or GB/s)."""
    df = df.copy()
    work = df["flops"].where(df["metric"] == "gflops", df["bytes"]).astype(float)
    for col, t in (("value", "median_ms"), ("lo", "p90_ms"), ("hi", "p10_ms")):
        df[col] = work / (df[t].astype(float) / 1e3) / 1e9
    df["unit"] = df["metric"].map({"gflops": "GFLOP/s", "gbps": "GB/s"})
    return df


def backend_sort_key(name):
    return (BACKEND_ORDER.index(name) if name in BACKEND_ORDER else len(BACKEND_ORDER), name)


def shape_order(df):
    """shape_keys of one op, smallest work first (so lines read left to right by size)."""
    s = df.groupby("shape_key")["flops"].max().sort_values(kind="stable")
    return list(s.index)
