"""The public ops, one module per family; mpskern/__init__.py re-exports them."""
from mpskern.ops.conv2d import conv2d
from mpskern.ops.devices import Device, devices
from mpskern.ops.matmul import gemm, matmul
from mpskern.ops.norm import batch_norm, group_norm, layer_norm, rms_norm
from mpskern.ops.pool import avg_pool2d, max_pool2d
from mpskern.ops.softmax import log_softmax, softmax

__all__ = ["avg_pool2d", "batch_norm", "conv2d", "Device", "devices", "gemm", "group_norm",
           "layer_norm", "log_softmax", "matmul", "max_pool2d", "rms_norm", "softmax"]
