"""The GPU backends "metal" and "sim", one package, top-down:

    backend.py   GpuBackend: availability, info, execute (hands an encode Context to the
                 kernel family's encode(), mpskern/backends/family.py), and what it
                 reported (last_timing / last_config)
    <family>.py  one encoder per kernel family, over metal/<family>.metal: gemm.py, conv2d.py
                 (depthwise, 1x1 as gemm; + gemm.metal), pool.py (pool2d), softmax.py,
                 norm.py (rownorm, group_norm, batch_norm), ...
    rows.py      dispatch geometry of the row and elementwise encoders
    context.py   the Context encoders get: the Metal or simulated device (limits, compiled
                 pipelines and their cache, buffers, submit), and the one configuration
                 rule (configure, pipelines: the step-down to what each pipeline allows)

Encoders take (ctx, args, dtype, *arrays, config=None) and return (timing, record); the
configuration spaces they choose from are mpskern/tuning/spaces.py's.
"""
from mpskern.backends.gpu.backend import GpuBackend  # noqa: F401
