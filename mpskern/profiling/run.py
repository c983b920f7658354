"""Profile one public op at one shape: what `mpskern profile OP --shape ...` runs.

The op's inputs and call come from the op table (mpskern/ops: the one `--shape` grammar
of bench and tune), the call runs on the simulator inside collect.profiling(), as a GPU
of `family` (its packaged default configurations apply), optionally with a pinned tile
configuration (the op's tuning space, as `mpskern tune` pins candidates); model.py then
estimates its GPU time on that family's chip. Returns the Profile and what ran.
"""
import contextlib

import numpy as np

from mpskern.profiling.collect import DEFAULT_MAX_GROUPS, profiling


def problem(op, shape_text, dtype="float32", seed=0):
    """(spec, shape dict, inputs) of `op` at `shape_text` (the op table's grammar)."""
    from mpskern import ops
    spec = ops.get(op)
    shape = spec.parse(shape_text) if isinstance(shape_text, str) else spec.complete(shape_text)
    spec.check_memory(shape, dtype)       # a huge shape: ValueError, before allocating
    inputs = spec.inputs(shape, np.dtype(dtype), np.random.default_rng(seed))
    return spec, shape, inputs


def lookup_key(spec, inputs):
    """The tuning lookup the op's encoder makes on the simulator (None if it makes none)."""
    from mpskern.tuning import lookup
    with lookup.recording() as seen:
        spec.call(inputs, "sim")
    return seen[0] if seen else None


@contextlib.contextmanager
def as_family(family):
    """The simulator claims GPU family `family` (7..10; None: leave it) inside the block."""
    from mpskern import backends
    sim = backends.get("sim")
    if family is None:
        yield sim
        return
    sim.set_sim_options(family=int(family))
    try:
        yield sim
    finally:
        sim.set_sim_options()          # the defaults again (MPSKERN_SIM_FAMILY or apple8)


def profile_op(op, shape_text, dtype="float32", *, config=None, family=None,
               max_groups=DEFAULT_MAX_GROUPS, sampled_only=True, seed=0, bank_model=None,
               inputs=None):
    """(Profile, info) of one call of `op` on the simulator. info: op, shape, dtype, family,
    the configuration the encoder chose (or that was pinned), the op's FLOPs and bytes.
    `shape_text`: text in the op's grammar or a shape dict; `inputs`: the op's inputs (else
    seeded ones)."""
    from mpskern.tuning import lookup
    if inputs is None:
        spec, shape, inputs = problem(op, shape_text, dtype, seed)
    else:
        from mpskern import ops
        spec = ops.get(op)
        shape = spec.parse(shape_text) if isinstance(shape_text, str) else spec.complete(shape_text)
    with as_family(family) as sim:
        key = None
        if config is not None:
            key = lookup_key(spec, inputs)
            if key is None:
                raise ValueError(f"{op} has no tunable configuration on the simulator; drop --config")
        with profiling(max_groups=max_groups, sampled_only=sampled_only, **dict(bank_model or {})) as prof:
            with (lookup.forced(key.op, config) if config is not None else contextlib.nullcontext()):
                out = spec.call(inputs, "sim")
        record = sim.last_config
        fam = sim.info["family"]
    cost = spec.costs(shape, np.shape(out), np.dtype(dtype).itemsize)
    info = dict(op=op, shape=shape, dtype=str(np.dtype(dtype)), family=fam, config=record,
                lookup_op=key.op if key else None, flops=cost.flops, bytes=cost.bytes)
    return prof, info


def model_of(prof, info, chip=None):
    """The model's Summary of a profiled call on `chip` (default: the family's base chip)."""
    from mpskern.profiling import model
    regs = model.registers_of(info.get("lookup_op") or info["op"], info.get("config"))
    return model.summarize(prof.dispatches, chip or info["family"], registers=regs,
                           roofline=(info["flops"], info["bytes"], info["dtype"]))
