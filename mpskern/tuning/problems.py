"""What `mpskern tune OP --shape ...` runs: for each tunable op, the shape form it takes on
the command line, seeded inputs, the public call, and a float64 reference every candidate's
output is checked against (so a fast wrong configuration can never be stored)."""
import math
from dataclasses import dataclass

import numpy as np

# normalised error (max |out - ref| / max |ref|) a correct kernel stays under
TOLERANCE = {"float32": 1e-4, "float16": 5e-3}


@dataclass
class Problem:
    op: str                 # the CLI name
    shape: tuple            # parsed from the shape form
    dtype: str
    call: object            # call(backend_name) -> numpy output, through the public API
    reference: np.ndarray   # float64

    def check(self, out):
        """(ok, normalised error) of an output against the float64 reference."""
        out = np.asarray(out, dtype=np.float64)
        if out.shape != self.reference.shape:
            return False, math.inf
        if not np.all(np.isfinite(out)):
            return False, math.inf
        scale = max(float(np.max(np.abs(self.reference))), 1e-30) if out.size else 1.0
        err = float(np.max(np.abs(out - self.reference))) / scale if out.size else 0.0
        return err <= TOLERANCE[self.dtype], err


def _rand(rng, shape, dtype):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def _gemm(shape, dtype, rng):
    M, N, K = shape
    a, b = _rand(rng, (M, K), dtype), _rand(rng, (K, N), dtype)
    ref = a.astype(np.float64) @ b.astype(np.float64)

    def call(backend):
        import mpskern
        return mpskern.matmul(a, b, backend=backend)
    return call, ref


def _conv2d(shape, dtype, rng, stride=1, padding=0, groups=1):
    N, C, H, W, K, R, S = shape
    if C % groups or K % groups:
        raise ValueError(f"--groups {groups} must divide C={C} and K={K}")
    g, Cg, Kg = groups, C // groups, K // groups
    x, w = _rand(rng, (N, C, H, W), dtype), _rand(rng, (K, Cg, R, S), dtype)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding,) * 2, (padding,) * 2))
    win = np.lib.stride_tricks.sliding_window_view(xp, (R, S), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]                          # (N, C, P, Q, R, S)
    win = win.reshape((N, g, Cg) + win.shape[2:])
    wd = w.astype(np.float64).reshape(g, Kg, Cg, R, S)
    ref = np.einsum("ngcpqrs,gkcrs->ngkpq", win, wd, optimize=True).reshape(N, K, *win.shape[3:5])

    def call(backend):
        import mpskern
        return mpskern.conv2d(x, w, stride=stride, padding=padding, groups=groups,
                              backend=backend)
    return call, ref


def _softmax_ref(x, log):
    x = x.astype(np.float64)
    z = x - x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def _softmax(log):
    def make(shape, dtype, rng):
        x = _rand(rng, shape, dtype) * 4

        def call(backend):
            import mpskern
            f = mpskern.log_softmax if log else mpskern.softmax
            return f(x, axis=-1, backend=backend)
        return call, _softmax_ref(x, log)
    return make


def _rownorm(rms):
    def make(shape, dtype, rng):
        rows, n = shape
        x = _rand(rng, shape, dtype) * 3 + 0.5
        w = rng.uniform(0.5, 1.5, n).astype(np.float32)
        xd = x.astype(np.float64)
        if rms:
            ref = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-5) * w
        else:
            ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * w

        def call(backend):
            import mpskern
            if rms:
                return mpskern.rms_norm(x, (n,), w, eps=1e-5, backend=backend)
            return mpskern.layer_norm(x, (n,), w, eps=1e-5, backend=backend)
        return call, ref
    return make


def _group_norm(shape, dtype, rng, groups=2):
    N, C, H, W = shape
    if C % groups:
        raise ValueError(f"--groups {groups} must divide C={C}")
    x = _rand(rng, shape, dtype) * 3 + 0.5
    w = rng.uniform(0.5, 1.5, C).astype(np.float32)
    xd = x.astype(np.float64).reshape(N, groups, -1)
    ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
    ref = ref.reshape(shape) * w.reshape(1, C, 1, 1)

    def call(backend):
        import mpskern
        return mpskern.group_norm(x, groups, w, eps=1e-5, backend=backend)
    return call, ref


# name -> (shape form shown to users, dimension count, maker, default shape on metal, on sim)
OPS = {
    "gemm": ("MxNxK", 3, _gemm, (1024, 1024, 1024), (64, 64, 64)),
    "conv2d": ("NxCxHxWxKxRxS", 7, _conv2d, (8, 64, 56, 56, 64, 3, 3), (1, 8, 10, 10, 16, 3, 3)),
    "softmax": ("ROWSxN", 2, _softmax(False), (4096, 1024), (16, 128)),
    "log_softmax": ("ROWSxN", 2, _softmax(True), (4096, 1024), (16, 128)),
    "layer_norm": ("ROWSxN", 2, _rownorm(False), (4096, 1024), (16, 128)),
    "rms_norm": ("ROWSxN", 2, _rownorm(True), (4096, 1024), (16, 128)),
    "group_norm": ("NxCxHxW", 4, _group_norm, (8, 64, 56, 56), (2, 8, 6, 6)),
}


def parse_shape(op, text):
    """"512x512x256" -> (512, 512, 256) for `op`; ValueError naming the expected form."""
    form, ndim = OPS[op][0], OPS[op][1]
    parts = text.lower().replace(",", "x").replace("*", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != ndim or min(dims) < 1:
        raise ValueError(f"--shape {text!r} is not a {op} shape: give {form} with "
                         f"{ndim} positive integers, e.g. "
                         f"{'x'.join(map(str, OPS[op][3]))}")
    return dims


def default_shape(op, backend):
    return OPS[op][4] if backend == "sim" else OPS[op][3]


def make(op, shape, dtype="float32", seed=0, **options):
    """The Problem of `op` at `shape` (a tuple in the op's shape form)."""
    if op not in OPS:
        raise ValueError(f"{op!r} is not a tunable op; tunable: {', '.join(OPS)}")
    if dtype not in TOLERANCE:
        raise ValueError(f"dtype {dtype!r}: tune float32 or float16")
    rng = np.random.default_rng(seed)
    call, ref = OPS[op][2](tuple(shape), np.dtype(dtype), rng, **options)
    return Problem(op, tuple(shape), dtype, call, ref)
