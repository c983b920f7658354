"""The correctness check every case passes before it is timed: the backend's result
against the float64 reference, norm-wise (the largest error relative to the largest
reference magnitude), with a tolerance that knows the dtype and the reduction length.

Tolerance = 4 ulp of the dtype (the output's own rounding, GPU fast-math) + 16 float32 ulp x
sqrt(terms summed) (float32 accumulation, float16 included, in any order).
"""
import math

import numpy as np

_ULP = {"float32": 2.0 ** -23, "float16": 2.0 ** -10}


def tolerance(dtype, reduction=1):
    d = np.dtype(dtype).name
    if d not in _ULP:
        raise ValueError(f"no tolerance for dtype {d}; the benchmark runs float32 and float16")
    return 4 * _ULP[d] + 16 * _ULP["float32"] * math.sqrt(max(1, reduction))


def max_error(out, ref):
    """max |out - ref| / max |ref| (inf for a non-finite result or a shape mismatch)."""
    out = np.asarray(out)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        return math.inf
    if ref.size == 0:
        return 0.0
    o = out.astype(np.float64)
    if not np.all(np.isfinite(o)):
        return math.inf
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    return float(np.max(np.abs(o - ref))) / scale
