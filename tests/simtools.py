"""Helpers shared by the simulator kernel tests (tests/test_gpu_*.py): the `sim` backend
fixture, fiber-order / checking-mode switching, and the two-order bit-identity check."""
import contextlib

import numpy as np
import pytest

from mpskern import _native, backends
from mpskern.tuning import spaces

DT = {np.float32: _native.F32, np.float16: _native.F16}


@pytest.fixture(scope="module")
def sim():
    """The sim backend with default options (forward order, unchecked), restored after."""
    ok, why = backends.availability("sim")
    if not ok:
        pytest.skip(f"sim unavailable: {why}")
    be = backends.get("sim")
    be.set_sim_options()
    yield be
    be.set_sim_options()


@contextlib.contextmanager
def sim_mode(be, order="forward", check=False):
    """Run the block's dispatches in fiber `order`, instrumented when `check`."""
    be.set_sim_options(check_mode=check, order=order, seed=7)
    try:
        yield
    finally:
        be.set_sim_options()


def checked(be, dtypes):
    """Iterate over `dtypes` with `be` in the checking mode and random fiber order, as
    sim_mode (restored when the loop ends)."""
    with sim_mode(be, "random", check=True):
        yield from dtypes


def in_both_orders(be, call, seed=None):
    """Run call() (seeded inputs, checked outputs, returning a list of arrays) in forward
    and reverse fiber order: the outputs must also be bit-identical (the kernels use no
    atomics). With `seed`, call(rng) gets a generator seeded so, fresh for each order."""
    outs = []
    for order in ("forward", "reverse"):
        with sim_mode(be, order):
            outs.append(call() if seed is None else call(np.random.default_rng(seed)))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(*outs)), \
        "forward and reverse fiber orders give different bits"


def shipped_configs():
    """(metal file, sorted macro items) of every configuration the tuning spaces ship."""
    out = set()
    for op in spaces.SPACES:
        for cfg in spaces.shipped(op):
            out.add((spaces.SPACES[op].file, tuple(sorted(spaces.macros(op, cfg).items()))))
    return sorted(out)


# the planted-bug kernels of the checking-mode tests: the source head and one signature
BUG_HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
BUG_ARGS = ("device const float* x [[buffer(0)]], device float* y [[buffer(1)]], "
            "uint i [[thread_index_in_threadgroup]], uint g [[thread_position_in_grid]], "
            "uint tg [[threadgroup_position_in_grid]]")
