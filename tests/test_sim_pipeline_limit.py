"""A Metal pipeline may allow fewer threads per threadgroup than its device (register
pressure lowers maxTotalThreadsPerThreadgroup). The simulator's `pipeline_max_threads`
option lowers every pipeline's limit: pipelines report it, a dispatch over it is refused
like Metal's validation would, and every op (each selftest case, float32 and float16) still
computes the right answer with the limit at 256 and at 64 -- its encoder steps down to a
configuration the pipeline allows."""
import numpy as np
import pytest
from simtools import sim  # noqa: F401  (fixture)

import mpskern
from mpskern.cli import selftest


KERNEL = """
#include <metal_stdlib>
using namespace metal;
kernel void fill(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = float(i); }
"""


def test_pipelines_report_and_enforce_the_lowered_limit(sim):
    p = sim.pipeline("fill", source=KERNEL)
    assert p.max_threads == 1024
    sim.set_sim_options(pipeline_max_threads=96)
    assert p.max_threads == 96                      # also pipelines made before
    x = np.zeros(256, np.float32)
    k = mpskern.metal_kernel(KERNEL, "fill")
    k(x, grid=(256,), threadgroup=(96,), backend="sim")
    np.testing.assert_array_equal(x, np.arange(256))
    with pytest.raises(ValueError, match=r"kernel 'fill': threadgroup \(128,1,1\) has 128 threads; the pipeline "
                                         r"allows 96 \(maxTotalThreadsPerThreadgroup\)"):
        k(x, grid=(256,), threadgroup=(128,), backend="sim")
    sim.set_sim_options(pipeline_max_threads=4096)  # above the device's: the device's
    assert p.max_threads == 1024
    sim.set_sim_options()
    assert p.max_threads == 1024


@pytest.mark.parametrize("limit", [256, 64])
def test_every_op_steps_down_to_what_the_pipeline_allows(sim, limit):
    sim.set_sim_options(pipeline_max_threads=limit)
    rows = selftest.run(["sim"])
    assert {r.op for r in rows} == set(selftest.OPS)
    bad = [(r.op, r.label, r.dtype, r.status, r.note.splitlines()[0] if r.note else "")
           for r in rows if r.backend == "sim" and r.status not in ("pass", "unsupported")]
    assert not bad, bad
