"""The public ops, one module per family, and the op table: one declaration per op
(mpskern/ops/op.py says what it holds) that `mpskern bench`, `mpskern tune`, `mpskern
selftest` and the tests share. mpskern/__init__.py re-exports __all__."""
from mpskern import _doc
from mpskern.ops.adaptive_pool import ADAPTIVE_AVG_POOL2D, adaptive_avg_pool2d
from mpskern.ops.attention import ATTENTION, scaled_dot_product_attention
from mpskern.ops.conv2d import CONV2D, conv2d
from mpskern.ops.devices import Device, devices
from mpskern.ops.linear import LINEAR, linear
from mpskern.ops.matmul import GEMM, MATMUL, gemm, matmul
from mpskern.ops.channel_norm import BATCH_NORM, GROUP_NORM, batch_norm, group_norm
from mpskern.ops.pool import AVG_POOL2D, MAX_POOL2D, avg_pool2d, max_pool2d
from mpskern.ops.row_norm import LAYER_NORM, RMS_NORM, layer_norm, rms_norm
from mpskern.ops.softmax import LOG_SOFTMAX, SOFTMAX, log_softmax, softmax

# the op table, in the order tools list the ops: the one list of the public ops (__all__, their
# docstrings' common part and docs/api.md's Ops chapter come from it)
TABLE = {op.name: op for op in (CONV2D, MATMUL, GEMM, LINEAR, MAX_POOL2D, AVG_POOL2D,
                                ADAPTIVE_AVG_POOL2D, SOFTMAX,
                                LOG_SOFTMAX, LAYER_NORM, RMS_NORM, BATCH_NORM, GROUP_NORM,
                                ATTENTION)}

__all__ = ["Device", "devices", *TABLE]

for _name in TABLE:     # backend=, out=, dtypes and errors: written once (mpskern/_doc.py)
    _doc.complete_op(globals()[_name])


def get(name):
    """The table's declaration of op `name`; ValueError listing the ops."""
    try:
        return TABLE[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown op {name!r}; use one of {', '.join(TABLE)}") from None
