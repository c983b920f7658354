"""FLOP and byte counts per op: the one place the benchmark, the roofline and the tuner
take them from.

Each function takes the fields of the op's struct in metal/mk_args.h (so a backend's
`args` dict can be passed as **args; unknown keys are ignored) plus `itemsize`, the bytes
per element of the op's dtype. Per-channel vectors (weights, biases, running stats) are
float32, as the kernels take them.

Conventions, stated once:
- FLOPs: a multiply-add is 2; exp, rsqrt, a compare and a divide count 1 each. For the
  reductions the count is nominal (what a straightforward kernel does per element); their
  throughput is read in GB/s, which is what limits them.
- conv2d counts direct-convolution FLOPs whatever the algorithm (the usual "effective
  FLOP/s"): the cpu backend's Winograd path does about 4x fewer multiplications, so its
  GFLOP/s can exceed the FMA peak (% of peak above 100). Only ops in WORK_DONE_OPS count
  what every implementation really executes.
- Bytes: the compulsory traffic, each input read once and each output written once, the
  least any kernel can move (caches and re-reads make real traffic larger). Memory-bound
  kernels can therefore reach at most 100 % of the bandwidth peak.
"""
from dataclasses import dataclass

F32 = 4
# ops whose FLOP count is the arithmetic every implementation performs (no fast algorithm
# does less): only these may raise a measured FLOP/s peak (mpskern.peaks.raise_measured)
WORK_DONE_OPS = frozenset({"matmul", "gemm"})


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    @property
    def intensity(self):
        """Arithmetic intensity, FLOP per byte."""
        return self.flops / self.bytes if self.bytes else float("inf")


def gemm(*, batch, M, N, K, itemsize, has_c=0, **_):
    """out[b] = alpha*op(A[b]) @ op(B[b]) (+ beta*C[b]): 2MNK per batch (+2MN with C)."""
    flops = batch * (2.0 * M * N * K + (2.0 * M * N if has_c else 0.0))
    elems = batch * (M * K + K * N + M * N + (M * N if has_c else 0))
    return Cost(flops, float(elems * itemsize))


def conv2d(*, N, C, H, W, K, R, S, P, Q, itemsize, groups=1, has_bias=0, **_):
    """Direct convolution: 2 * (C/groups)*R*S FLOPs per output element (+1 for the bias)."""
    out = N * K * P * Q
    flops = 2.0 * out * (C // groups) * R * S + (out if has_bias else 0)
    elems = N * C * H * W + K * (C // groups) * R * S + out
    return Cost(flops, float(elems * itemsize + (K * F32 if has_bias else 0)))


def pool2d(*, N, C, H, W, P, Q, kh, kw, itemsize, **_):
    """One compare (max) or add (avg) per window element."""
    return Cost(float(N * C * P * Q * kh * kw), float((N * C * H * W + N * C * P * Q) * itemsize))


def softmax(*, outer, n, inner, itemsize, **_):
    """max, subtract, exp, sum, scale (log: subtract a log) = 5 per element."""
    size = outer * n * inner
    return Cost(5.0 * size, float(2 * size * itemsize))


def rownorm(*, rows, n, kind=0, has_weight=0, has_bias=0, itemsize, **_):
    """layer_norm (kind 0): mean 1, variance 3, normalise 2 per element; rms_norm (kind 1):
    square-sum 2, scale 1; plus 1 each for weight and bias."""
    size = rows * n
    per = (6 if kind == 0 else 3) + (1 if has_weight else 0) + (1 if has_bias else 0)
    vecs = (int(bool(has_weight)) + int(bool(has_bias))) * n * F32
    return Cost(float(per * size), float(2 * size * itemsize + vecs))


def group_norm(*, N, C, HW, has_weight=0, has_bias=0, itemsize, **_):
    """As layer_norm over each group."""
    size = N * C * HW
    per = 6 + (1 if has_weight else 0) + (1 if has_bias else 0)
    vecs = (int(bool(has_weight)) + int(bool(has_bias))) * C * F32
    return Cost(float(per * size), float(2 * size * itemsize + vecs))


def batch_norm(*, N, C, HW, training=0, has_weight=0, has_bias=0, itemsize, **_):
    """Inference: normalise 2 per element (+weight, bias); training adds the batch mean and
    variance (4 per element). Vectors: running mean and var, weight, bias."""
    size = N * C * HW
    per = 2 + (4 if training else 0) + (1 if has_weight else 0) + (1 if has_bias else 0)
    vecs = (2 + int(bool(has_weight)) + int(bool(has_bias))) * C * F32
    return Cost(float(per * size), float(2 * size * itemsize + vecs))


# The public op -> its struct's cost function and the figure its throughput is read in:
# FLOP/s for the compute-bound ops, bytes/s for the memory-bound ones.
BY_OP = {
    "matmul": gemm, "gemm": gemm, "conv2d": conv2d,
    "max_pool2d": pool2d, "avg_pool2d": pool2d,
    "softmax": softmax, "log_softmax": softmax,
    "layer_norm": rownorm, "rms_norm": rownorm,
    "group_norm": group_norm, "batch_norm": batch_norm,
}
COMPUTE_BOUND = frozenset({"matmul", "gemm", "conv2d"})


def for_op(op, args, itemsize):
    """Cost of public op `op` given its struct fields `args`."""
    try:
        f = BY_OP[op]
    except KeyError:
        raise ValueError(f"no cost model for op {op!r}; known: {', '.join(sorted(BY_OP))}") from None
    return f(itemsize=itemsize, **args)


def primary_metric(op):
    """"gflops" for the compute-bound ops, "gbps" for the memory-bound ones."""
    return "gflops" if op in COMPUTE_BOUND else "gbps"
