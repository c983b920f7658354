"""Profile one public op at one shape: what `mpskern profile OP --shape ...` runs.

The op's inputs and call come from the op table (mpskern/ops: the one `--shape` grammar
of bench and tune), the call runs on the simulator inside
collect.profiling(), optionally with a pinned tile configuration (the op's tuning space,
as `mpskern tune` pins candidates). Returns the Profile and which configuration ran.
"""
import numpy as np

from mpskern.profiling.collect import DEFAULT_MAX_GROUPS, profiling


def problem(op, shape_text, dtype="float32", seed=0):
    """(spec, shape dict, inputs) of `op` at `shape_text` (the op table's grammar)."""
    from mpskern import ops
    spec = ops.get(op)
    shape = spec.parse(shape_text)
    inputs = spec.inputs(shape, np.dtype(dtype), np.random.default_rng(seed))
    return spec, shape, inputs


def lookup_key(spec, inputs):
    """The tuning lookup the op's encoder makes on the simulator (None if it makes none)."""
    from mpskern.tuning import lookup
    with lookup.recording() as seen:
        spec.call(inputs, "sim")
    return seen[0] if seen else None


def profile_op(op, shape_text, dtype="float32", *, config=None, max_groups=DEFAULT_MAX_GROUPS,
               sampled_only=True, seed=0, bank_model=None):
    """(Profile, info) of one call of `op` on the simulator. info: shape, dtype, the
    configuration and lookup level of each dispatch the encoder chose (or pinned)."""
    from mpskern import backends
    from mpskern.tuning import lookup
    spec, shape, inputs = problem(op, shape_text, dtype, seed)
    key = None
    if config is not None:
        key = lookup_key(spec, inputs)
        if key is None:
            raise ValueError(f"{op} has no tunable configuration on the simulator; drop --config")
    banks = dict(bank_model or {})
    sim = backends.get("sim")
    with profiling(max_groups=max_groups, sampled_only=sampled_only, **banks) as prof:
        if config is not None:
            with lookup.forced(key.op, config):
                spec.call(inputs, "sim")
        else:
            spec.call(inputs, "sim")
    record = sim.last_config
    info = dict(op=op, shape=shape, dtype=str(np.dtype(dtype)), config=record,
                lookup_op=key.op if key else None)
    return prof, info
