"""Tune one op at one shape on a GPU backend and store the winner (what `mpskern tune`
does; the CLI only formats). The op, its shape grammar, inputs, public call and float64
reference come from the op table (mpskern/ops), as for `mpskern bench` and selftest.

1. Run the op once through the public API, recording the lookups its encoder makes: that
   gives the database key (op key, dtype, shape key) the dispatch really uses, the space's
   rules for this device, and the rule-based default.
2. Search the op's configuration space (mpskern/tuning/spaces.py), each candidate pinned
   with lookup.forced() and run through the same public call, timed by the backend
   (Metal: GPU timestamps; sim: the simulator's CPU time), checked against float64.
   backend "model-appleN" (where there is no Metal GPU): candidates are ranked by the
   performance model instead (tuner/model_rank.py: modelled GPU times, never measured);
   on Metal, where the simulator and clang are there, the model first narrows the space
   to its `model_top` best and the GPU times those.
3. Store the fastest correct configuration in the user database for this device.
"""
import contextlib
import random
import time
from dataclasses import dataclass

import numpy as np

from mpskern import ops
from mpskern import reference as ref
from mpskern.backends.gpu import compile_budget
from mpskern.tuner import model_rank as _mr
from mpskern.tuner import search as _search
from mpskern.tuning import db as _db
from mpskern.tuning import lookup, spaces

TUNABLE_BACKENDS = ("metal", "sim")
DTYPES = ("float32", "float16")


@dataclass
class Problem:
    """One op at one shape and dtype, with seeded inputs: call(backend) runs the public op,
    check(out) compares an output with the float64 reference (a fast wrong configuration
    can never be stored)."""
    op: str
    shape: dict             # the op's shape fields (mpskern/ops/op.py's grammar)
    dtype: str
    call: object            # call(backend_name) -> numpy output, through the public API
    reference: np.ndarray   # float64
    reduction: int = 1      # terms summed per output (the tolerance grows with it)
    macs: float = None      # multiply-adds of one call (FLOPs / 2; model_rank's size rule)

    def check(self, out):
        """(ok, normalised error) of an output against the float64 reference."""
        err = ref.max_error(out, self.reference)
        return err <= ref.tolerance(self.dtype, self.reduction), err


def make(op, shape=None, dtype="float32", seed=0, backend="metal"):
    """The Problem of op `op` (a name of the op table) at `shape`: --shape text, a dict of
    the op's shape fields or a tuple of them in order (None: the op's default for
    `backend`)."""
    if op not in ops.TABLE:
        raise ValueError(f"{op!r} is not a tunable op; tunable: {', '.join(ops.TABLE)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: tune float32 or float16")
    o = ops.get(op)
    if shape is None:
        shape = o.tune_shape(backend)
    elif isinstance(shape, str):
        shape = o.parse(shape)
    else:
        shape = o.complete(shape if isinstance(shape, dict) else
                           dict(zip([f.name for f in o.fields], shape)))
    o.check_memory(shape, dtype)          # a huge shape: ValueError, before allocating
    inp = o.inputs(shape, np.dtype(dtype), np.random.default_rng(seed))
    want = o.reference(inp)
    macs = o.costs(shape, want.shape, np.dtype(dtype).itemsize).flops / 2
    return Problem(op, shape, dtype, lambda be: o.call(inp, be), want, o.reduction(inp), macs)


@dataclass
class TuneResult:
    problem: Problem
    key: lookup.Choice            # the untuned lookup: op key, dtype, shape key, default
    result: _search.SearchResult
    device: dict
    backend: str
    entry: _db.Entry = None       # what was stored (None: nothing correct, or save=False)
    path: str = None

    def over_budget(self):
        """Why the tune took longer than its budget ("" when it did not): the default is
        always compiled and timed, and a compile cannot be cut short."""
        res = self.result
        if res.elapsed_s <= res.budget_s:
            return ""
        slow = compile_budget.longest_s()
        if slow > res.budget_s:
            return (f"one compile alone took {slow:.1f} s, more than the {res.budget_s:g} s "
                    f"budget (compiled kernels are cached: a second run is faster)")
        return "the default configuration is always compiled and run (timed at least twice)"


def gpu_backend(name):
    """The backend a tune of `name` runs on (model-appleN: the simulator)."""
    from mpskern import backends
    if _mr.is_model(name):
        _mr.chip_of(name)               # ValueError naming the known chips and families
        return backends.get("sim")
    if name not in TUNABLE_BACKENDS:
        raise ValueError(f"--backend {name!r}: tuning times mpskern's own Metal kernels; use "
                         f"metal (a Mac), sim (the simulator, anywhere) or model-apple7.."
                         f"model-apple10 (ranked by the performance model)")
    return backends.get(name)


def auto_backend():
    """metal where there is a Metal GPU, else the model of the simulated device's family."""
    from mpskern import backends
    if backends.availability("metal")[0]:
        return "metal"
    return f"model-apple{backends.get('sim').info.get('family') or 8}"


def key_of(problem, backend, sampled=False):
    """The lookup the op's encoder makes for `problem` on `backend` (runs it once;
    sampled: in the simulator's profiling mode, a sample of the threadgroups only, as the
    model ranks: the output is not needed, and a 1024^3 gemm simulated in full takes 20 s)."""
    with lookup.recording() as seen, \
            (_mr.profiling(max_groups=1, sampled_only=True) if sampled else
             contextlib.nullcontext()):
        problem.call(backend)
    if not seen:
        raise ValueError(f"{problem.op} on backend {backend!r} looked up no tuned "
                         f"configuration: its kernels have no tunable space")
    return seen[0]


def untuned(key, device):
    """The Choice a dispatch makes without the user database: the family or generic
    default, the baseline a tuned configuration must beat."""
    return lookup.choose(key.op, key.dtype, key.shape, device, generic=key.generic,
                         valid=key.valid, user_db=_db.Database(""))


def candidates_for(key, device, seed=0):
    """The space's configurations valid for this device and problem, in the order the
    search tries them: the packaged defaults of every family and the shipped rule-based
    configurations first (known-good starting points), then the rest shuffled (random
    order is a robust baseline when the budget cannot cover the space), leaving out tiles
    far larger than the problem when smaller ones exist."""
    cands = [dict(c) for c in spaces.candidates(key.op, device)]
    if key.valid is not None:
        cands = [c for c in cands if lookup.invalid_reason(key.valid, c) is None]
    cands = [c for c in cands if not _oversized(c, key.shape)] or cands
    known = [e.config for fam in (7, 8, 9, 10)
             for e in _db.family_defaults(fam).for_op(key.op, key.dtype)]
    known += spaces.shipped(key.op)
    seeded = []
    for c in known:
        if c in cands and c not in seeded:
            seeded.append(dict(c))
    rest = [c for c in cands if c not in seeded]
    random.Random(seed).shuffle(rest)
    return seeded + _split_k_variants(spaces.space(key.op), seeded, key.shape) + rest


def _split_k_variants(space, configs, shape):
    """For a long K with few output tiles, the seeded tiles again with each split of K
    (a dispatch-time parameter: spaces.split_k() otherwise decides by rule)."""
    splits = space.runtime.get("split_k", ())
    if not splits or len(shape) != 4:
        return []
    batch, M, N, K = shape
    out = []
    for c in configs:
        tiles = batch * -(-M // c["BM"]) * -(-N // c["BN"])
        if tiles >= 16:
            continue
        out += [dict(c, split_k=s) for s in splits if s > 1 and K // s >= 128]
    return out


def _oversized(cfg, shape):
    """A BM x BN tile more than twice the padded problem's M or N (GEMM-shaped keys
    (batch, M, N, K)) only adds idle threads."""
    if len(shape) != 4 or "BM" not in cfg or "BN" not in cfg:
        return False
    _, M, N, _ = shape
    return cfg["BM"] > max(16, 2 * M) or cfg["BN"] > max(16, 2 * N)


def timed_run(problem, backend_obj, op_key):
    """run(config) for search(): the public call with `config` pinned, and its time."""
    def run(config):
        with lookup.forced(op_key, config):
            t0 = time.perf_counter()
            out = problem.call(backend_obj.name)
            wall = (time.perf_counter() - t0) * 1e3
        t = backend_obj.last_timing
        ms = t[0] if t and t[0] and t[0] > 0 else wall
        return out, ms
    return run


def tune(op, shape=None, dtype="float32", backend="metal", budget_s=30.0, *, reps=5,
         save=True, db_path=None, candidates=None, progress=None, seed=0, model_top=8):
    """Tune `op` (an op table name) at `shape` (a shape dict; default per backend).
    `candidates` replaces the space's list (tests keep it tiny). backend "model-appleN":
    rank by the model; "metal": the model's `model_top` best (0: all) are timed."""
    started = time.perf_counter()        # the budget covers everything from here
    be = gpu_backend(backend)
    if save:
        db_path = _db.target(db_path)
    if _mr.is_model(backend):
        chip = _mr.chip_of(backend)
        with _mr.as_family(chip.family):
            prob = make(op, shape, dtype, seed=seed, backend="metal")
            device = be.info
            key = key_of(prob, "sim", sampled=True)
            default = untuned(key, device)
            cands = [dict(c) for c in candidates] if candidates is not None else \
                candidates_for(key, device)
            res = _mr.rank(prob, key, chip, cands, default=default.config, budget_s=budget_s,
                           progress=progress, started=started)
        device = dict(device, model_chip=chip.name)
    else:
        prob = make(op, shape, dtype, seed=seed, backend=backend)
        device = be.info
        key = key_of(prob, backend)
        default = untuned(key, device)
        cands = [dict(c) for c in candidates] if candidates is not None else \
            candidates_for(key, device)
        if backend == "metal" and candidates is None and model_top and _model_available():
            cands = _mr.prerank(prob, key, device.get("family") or 9, cands, model_top,
                                budget_s=budget_s / 2, default=default.config, started=started)
        res = _search.search(cands, timed_run(prob, be, key.op), prob.check,
                             default=default.config, valid=key.valid, budget_s=budget_s,
                             reps=reps, progress=progress, started=started)
    out = TuneResult(prob, key, res, device, backend)
    if res.best is not None:
        out.entry = entry_for(key, device, res, budget_s)
        if save:
            out.path = _db.save([out.entry], db_path)
    return out


def _model_available():
    from mpskern import backends
    from mpskern.sim import profile_build
    return backends.availability("sim")[0] and profile_build.clang()[0] is not None


def entry_for(key, device, res, budget_s):
    from mpskern import __version__
    d = res.default
    return _db.Entry(
        op=key.op, dtype=key.dtype, config=dict(res.best.config), device=device.get("name", ""),
        architecture=device.get("architecture", ""), family=_db.family_name(device.get("family")),
        backend=_db.backend_of(device), shape=tuple(key.shape), bucket=_db.bucket_of(key.shape),
        time_ms=res.best.median_ms,
        default_time_ms=d.median_ms if d is not None and d.status == _search.OK else None,
        provenance={"source": "mpskern tune", "measured": "model_chip" not in device,
                    "mpskern": __version__,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "timer": f"model of {device['model_chip']} (modelled, not measured)"
                    if "model_chip" in device else "simulator CPU time"
                    if device.get("is_simulator") else "GPU timestamps",
                    "budget_s": budget_s, "candidates": len(res.trials),
                    "timed": sum(1 for t in res.trials if t.times_ms),
                    "samples": len(res.best.times_ms)})


def show(op, shape=None, dtype="float32", backend="metal", seed=0):
    """The Choice a call of `op` at `shape` makes on `backend` (runs it once)."""
    gpu_backend(backend)
    if _mr.is_model(backend):
        with _mr.as_family(_mr.chip_of(backend).family):
            return key_of(make(op, shape, dtype, seed=seed, backend="metal"), "sim")
    return key_of(make(op, shape, dtype, seed=seed, backend=backend), backend)
