"""The GPU backends "metal" and "sim", one package (read top-down):

    backend.py   GpuBackend: device, pipeline cache, buffers, run; one method per op, each
                 handing an encode Context to its encoder
    context.py   the Context encoders get (limits, pipelines, buffers, run) and the one
                 configuration rule (configure, pipelines: the step-down to what each
                 compiled pipeline allows)
    gemm.py      gemm                              metal/gemm.metal
    conv2d.py    conv2d (depthwise, 1x1 as gemm)   metal/conv2d.metal (+ gemm.metal)
    pool.py      pool2d                            metal/pool.metal
    softmax.py   softmax                           metal/softmax.metal
    norm.py      rownorm, group_norm, batch_norm   metal/norm.metal
    attention.py attention (scaled_dot_product_attention)  metal/attention.metal
    rows.py      dispatch geometry of the row and elementwise encoders

Encoders take (ctx, args, dtype, *arrays, config=None) and return (timing, record); the
configuration spaces they choose from are mpskern/tuning/spaces.py's.
"""
from mpskern.backends.gpu.backend import GpuBackend  # noqa: F401
