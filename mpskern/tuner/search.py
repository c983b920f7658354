"""Timed search over a configuration space.

For each candidate (the default first, so every result has a baseline):
  1. skip it if the space's rules say it is invalid on this device;
  2. warm up (the first run also compiles the pipeline) at least `warmup` runs and until
     the time stops falling fast (the first runs after a compile are slow: caches, lazy
     binding, the simulator's worker start-up), then check the output against the
     reference: a wrong answer can never win;
  3. time real dispatches (GPU timestamps on Metal, the simulator's CPU time on sim), and
     stop early once even its fastest of at least two runs is `prune_ratio` times slower
     than the best median so far: it cannot win.
The whole search is bounded by `budget_s` seconds of wall time from `started` (tune():
the start of the whole tune, inputs and the reference included): a candidate whose kernels
are not compiled yet is left unrun when the compile would not fit in what is left
(mpskern/backends/gpu/compile_budget.py); the default (always compiled and timed) and the
candidate in progress still complete `min_reps` timed runs.
"""
import contextlib
import statistics
import time
from dataclasses import dataclass, field

from mpskern.backends.gpu import compile_budget
from mpskern.tuning.lookup import invalid_reason

OK, INVALID, WRONG, ERROR, PRUNED, UNRUN = "ok", "invalid", "wrong", "error", "pruned", "unrun"


@dataclass
class Trial:
    config: dict
    status: str = UNRUN
    times_ms: list = field(default_factory=list)
    error: float = None        # normalised error against the reference
    reason: str = ""           # why invalid / wrong / error / pruned / unrun
    is_default: bool = False

    @property
    def median_ms(self):
        return statistics.median(self.times_ms) if self.times_ms else None

    @property
    def min_ms(self):
        return min(self.times_ms) if self.times_ms else None


@dataclass
class SearchResult:
    trials: list
    best: Trial = None
    default: Trial = None
    elapsed_s: float = 0.0
    budget_s: float = 0.0

    @property
    def speedup(self):
        """How much faster the best is than the default (None without both times)."""
        if self.best is None or self.default is None or self.default.status != OK:
            return None
        return self.default.median_ms / self.best.median_ms

    def counts(self):
        c = {}
        for t in self.trials:
            c[t.status] = c.get(t.status, 0) + 1
        return c


def _same(a, b):
    return a is not None and b is not None and dict(a) == dict(b)


MAX_WARMUP = 8      # warm-up runs at most, however unsettled the times


def search(candidates, run, check, *, default=None, valid=None, budget_s=10.0, warmup=2,
           reps=5, min_reps=2, prune_ratio=1.25, clock=time.perf_counter, progress=None,
           started=None):
    """Time `candidates` (config dicts) and return a SearchResult.

    run(config) -> (output, ms)   one real dispatch with that configuration, its time
    check(output) -> (ok, err)    compare against the reference (err: normalised error)
    default                       the configuration dispatch would use untuned: timed first
    valid(config)                 None/True if usable on this device, else a reason
    progress                      None, or a callable(done, total, trial, best) per candidate
    started                       clock() time the budget started (default: now)
    """
    if budget_s is None or not 0 < budget_s < float("inf"):     # (also refuses nan)
        raise ValueError(f"budget_s must be a finite, positive number of seconds, got "
                         f"{budget_s!r}")
    if reps < 1 or min_reps < 1 or warmup < 1:
        raise ValueError("reps, min_reps and warmup must be at least 1")
    min_reps = min(min_reps, reps)
    order = [dict(c) for c in candidates]
    if default is not None:
        order = [dict(default)] + [c for c in order if not _same(c, default)]
    trials = [Trial(c, is_default=(i == 0 and default is not None)) for i, c in enumerate(order)]
    start = clock() if started is None else started
    best = None

    def out_of_budget():
        return clock() - start >= budget_s

    for i, t in enumerate(trials):
        if not t.is_default and out_of_budget():
            t.reason = f"budget of {budget_s:g} s spent"
        else:
            with (contextlib.nullcontext() if t.is_default else
                  compile_budget.deadline(start + budget_s, clock)):
                _try(t, run, check, valid, warmup, reps, min_reps, prune_ratio, best,
                     out_of_budget)
            if t.status == OK and (best is None or t.median_ms < best.median_ms):
                best = t
        if progress is not None:
            progress(i + 1, len(trials), t, best)
    default_trial = trials[0] if default is not None else None
    return SearchResult(trials, best, default_trial, clock() - start, budget_s)


def _try(t, run, check, valid, warmup, reps, min_reps, prune_ratio, best, out_of_budget):
    why = invalid_reason(valid, t.config)
    if why:
        t.status, t.reason = INVALID, why
        return
    try:
        prev = None
        for w in range(MAX_WARMUP):
            out, ms = run(t.config)
            settled = prev is not None and ms > prev / 1.5
            prev = ms
            if w + 1 >= warmup and (settled or out_of_budget()):
                break
        ok, err = check(out)
        t.error = err
        if not ok:
            t.status, t.reason = WRONG, f"output differs from the reference (error {err:.3g})"
            return
        for r in range(reps):
            _out, ms = run(t.config)
            t.times_ms.append(float(ms))
            if (best is not None and len(t.times_ms) >= min(2, reps)
                    and t.min_ms > prune_ratio * best.median_ms):
                t.status = PRUNED
                t.reason = (f"fastest run {t.min_ms:.4g} ms > {prune_ratio:g} x best "
                            f"{best.median_ms:.4g} ms")
                return
            if r + 1 >= min_reps and out_of_budget():
                break
    except compile_budget.CompileOverBudget as e:
        t.status, t.reason = UNRUN, str(e)
        return
    except Exception as e:     # a candidate that fails to compile or run just loses
        t.status, t.reason = ERROR, f"{type(e).__name__}: {e}"
        return
    t.status = OK


def rich_progress(console=None, label="tuning"):
    """A context manager yielding a `progress` callback that draws a rich progress bar."""
    import contextlib

    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    @contextlib.contextmanager
    def bar():
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=24),
                      MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[best]}"),
                      console=console, transient=False) as p:
            task = p.add_task(label, total=None, best="")

            def update(done, total, trial, best):
                b = f"best {best.median_ms:.4g} ms {fmt_config(best.config, True)}" if best else ""
                p.update(task, completed=done, total=total, best=b)
            yield update
    return bar()


_TILE = ("BM", "BN", "BK", "WM", "WN")


def fmt_config(cfg, compact=False):
    """"variant=simd BM=64 ..." or, compact, "simd 64x64x16/2x2" (BMxBNxBK/WMxWN) and
    "rows TPR=32 RPG=8 VPT=4"."""
    if not compact:
        return " ".join(f"{k}={v}" for k, v in cfg.items())
    tile = all(k in cfg for k in _TILE)
    skip = set(_TILE) | {"variant"} if tile else {"variant"}
    head = [str(cfg["variant"])] if "variant" in cfg else []
    if tile:
        head.append(f"{cfg['BM']}x{cfg['BN']}x{cfg['BK']}/{cfg['WM']}x{cfg['WN']}")
    return " ".join(head + [f"{k}={v}" for k, v in cfg.items() if k not in skip])
