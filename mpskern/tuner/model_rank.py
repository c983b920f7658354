"""Ranking tile configurations by the performance model (mpskern/profiling/model.py)
instead of timing them: what `mpskern tune --backend model-appleN` does (the default
where there is no Metal GPU), and what narrows a Mac's timed search to the model's top
few (tune.py: `model_top`).

Each candidate runs once in the simulator's profiling mode as a GPU of the family (its
limits and lookups apply), only a sample of its threadgroups (`max_groups`), and is
scored by its modelled GPU time on the family's base chip. The winner is then run in full
on the simulator and checked against the float64 reference when the problem is small
enough to simulate (`VERIFY_MACS`); a wrong one never wins. Scores are modelled, never
measured: the stored entry says so in its provenance.
"""
import contextlib
import time

from mpskern.backends.gpu import compile_budget
from mpskern.profiling import model as _model
from mpskern.profiling.collect import profiling
from mpskern.profiling.run import as_family
from mpskern.tuner import search as _search
from mpskern.tuning import lookup

MAX_GROUPS = 16         # threadgroups profiled per dispatch while ranking
VERIFY_MACS = 2 ** 28   # problems up to this many multiply-adds are verified in full


def is_model(backend):
    return str(backend).startswith("model-")


def chip_of(backend):
    from mpskern import peaks
    return peaks.chip(str(backend)[len("model-"):])


def modelled_ms(prob, key_op, config, chip, max_groups=MAX_GROUPS):
    """The modelled GPU time (ms) of `prob` with `config` pinned, on `chip`."""
    with lookup.forced(key_op, config):
        with profiling(max_groups=max_groups, sampled_only=True) as prof:
            prob.call("sim")
    regs = _model.registers_of(key_op, config)
    return _model.summarize(prof.dispatches, chip, registers=regs).estimate_ms


def rank(prob, key, chip, candidates, *, default=None, budget_s=60.0, progress=None,
         clock=time.perf_counter, max_groups=MAX_GROUPS, started=None):
    """A search.SearchResult whose times are modelled: candidates in order (the default
    first), each scored once, within `budget_s` seconds from `started` (a clock() time;
    default now; the default is always scored, a candidate whose profiling build would not
    fit is left unrun, as search.py's)."""
    order = [dict(c) for c in candidates]
    if default is not None:
        order = [dict(default)] + [c for c in order if c != dict(default)]
    trials = [_search.Trial(c, is_default=(i == 0 and default is not None))
              for i, c in enumerate(order)]
    start = clock() if started is None else started
    best = None
    for i, t in enumerate(trials):
        if not t.is_default and clock() - start >= budget_s:
            t.reason = f"budget of {budget_s:g} s spent"
        else:
            why = lookup.invalid_reason(key.valid, t.config)
            if why:
                t.status, t.reason = _search.INVALID, why
            else:
                try:
                    with (contextlib.nullcontext() if t.is_default else
                          compile_budget.deadline(start + budget_s, clock)):
                        t.times_ms = [modelled_ms(prob, key.op, t.config, chip, max_groups)]
                    t.status, t.reason = _search.OK, "modelled, not measured"
                except compile_budget.CompileOverBudget as e:
                    t.reason = str(e)
                except Exception as e:  # noqa: BLE001 - a candidate that fails just loses
                    t.status, t.reason = _search.ERROR, f"{type(e).__name__}: {e}"
            if t.status == _search.OK and (best is None or t.median_ms < best.median_ms):
                best = t
        if progress is not None:
            progress(i + 1, len(trials), t, best)
    res = _search.SearchResult(trials, best, trials[0] if default is not None else None,
                               clock() - start, budget_s)
    _verify(res, prob, key)
    return res


def _verify(res, prob, key):
    """Run the best candidates in full and check them, best first, until one is right
    (problems too large to simulate are left unverified and say so)."""
    macs = getattr(prob, "macs", None)
    ok = sorted((t for t in res.trials if t.status == _search.OK), key=lambda t: t.median_ms)
    for t in ok:
        if macs is not None and macs > VERIFY_MACS:
            t.reason += "; not verified in full (too large to simulate; the simulator tests " \
                        "cover the configuration)"
            res.best = t
            return
        with lookup.forced(key.op, t.config):
            out = prob.call("sim")
        good, err = prob.check(out)
        t.error = err
        if good:
            t.reason += "; verified in full on the simulator"
            res.best = t
            return
        t.status, t.reason = _search.WRONG, f"output differs from the reference (error {err:.3g})"
    res.best = None


def prerank(prob, key, family, candidates, top, *, budget_s, default=None, started=None):
    """The `top` candidates the model ranks best on `family` (the default kept), for a
    timed search on the GPU to finish."""
    from mpskern import peaks
    with as_family(family):
        res = rank(prob, key, peaks.chip(family), candidates, default=default, budget_s=budget_s,
                   started=started)
    scored = sorted((t for t in res.trials if t.status == _search.OK), key=lambda t: t.median_ms)
    keep = [t.config for t in scored[:top]]
    if default is not None and dict(default) not in keep:
        keep.insert(0, dict(default))
    return keep or [dict(c) for c in candidates[:top]]
