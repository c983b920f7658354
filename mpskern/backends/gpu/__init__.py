"""The GPU backends "metal" and "sim", one package, top-down:

    backend.py   GpuBackend: availability, info, one method per op, each handing an encode
                 Context to its encoder, and what it reported (last_timing / last_config)
    gemm.py      gemm                              metal/gemm.metal
    conv2d.py    conv2d (depthwise, 1x1 as gemm)   metal/conv2d.metal (+ gemm.metal)
    pool.py      pool2d                            metal/pool.metal
    softmax.py   softmax                           metal/softmax.metal
    norm.py      rownorm, group_norm, batch_norm   metal/norm.metal
    attention.py attention (scaled_dot_product_attention)  metal/attention.metal
    rows.py      dispatch geometry of the row and elementwise encoders
    context.py   the Context encoders get: the Metal or simulated device (limits, compiled
                 pipelines and their cache, buffers, submit), and the one configuration
                 rule (configure, pipelines: the step-down to what each pipeline allows)

Encoders take (ctx, args, dtype, *arrays, config=None) and return (timing, record); the
configuration spaces they choose from are mpskern/tuning/spaces.py's.
"""
from mpskern.backends.gpu.backend import GpuBackend  # noqa: F401
