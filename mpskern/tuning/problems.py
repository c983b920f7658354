"""What `mpskern tune OP --shape ...` runs: for each tunable op, the shape form it takes on
the command line, seeded inputs, the public call, and a float64 reference every candidate's
output is checked against (so a fast wrong configuration can never be stored). References
and the tolerance rule are mpskern/reference.py's, as for the benchmark and selftest."""
from dataclasses import dataclass

import numpy as np

from mpskern import reference as ref

DTYPES = ("float32", "float16")


@dataclass
class Problem:
    op: str                 # the CLI name
    shape: tuple            # parsed from the shape form
    dtype: str
    call: object            # call(backend_name) -> numpy output, through the public API
    reference: np.ndarray   # float64
    reduction: int = 1      # terms summed per output (the tolerance grows with it)

    def check(self, out):
        """(ok, normalised error) of an output against the float64 reference."""
        err = ref.max_error(out, self.reference)
        return err <= ref.tolerance(self.dtype, self.reduction), err


def _rand(rng, shape, dtype):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def _gemm(shape, dtype, rng):
    M, N, K = shape
    a, b = _rand(rng, (M, K), dtype), _rand(rng, (K, N), dtype)

    def call(backend):
        import mpskern
        return mpskern.matmul(a, b, backend=backend)
    return call, ref.matmul(a, b), K


def _conv2d(shape, dtype, rng, stride=1, padding=0, groups=1):
    N, C, H, W, K, R, S = shape
    if C % groups or K % groups:
        raise ValueError(f"--groups {groups} must divide C={C} and K={K}")
    Cg = C // groups
    x, w = _rand(rng, (N, C, H, W), dtype), _rand(rng, (K, Cg, R, S), dtype)

    def call(backend):
        import mpskern
        return mpskern.conv2d(x, w, stride=stride, padding=padding, groups=groups,
                              backend=backend)
    return call, ref.conv2d(x, w, stride=stride, padding=padding, groups=groups), Cg * R * S


def _softmax(log):
    def make(shape, dtype, rng):
        x = _rand(rng, shape, dtype) * 4

        def call(backend):
            import mpskern
            f = mpskern.log_softmax if log else mpskern.softmax
            return f(x, axis=-1, backend=backend)
        r = ref.log_softmax(x, axis=-1) if log else ref.softmax(x, axis=-1)
        return call, r, shape[-1]
    return make


def _rownorm(rms):
    def make(shape, dtype, rng):
        rows, n = shape
        x = _rand(rng, shape, dtype) * 3 + 0.5
        w = rng.uniform(0.5, 1.5, n).astype(np.float32)
        if rms:
            r = ref.rms_norm(x, (n,), w, eps=1e-5)
        else:
            r = ref.layer_norm(x, (n,), w, eps=1e-5)

        def call(backend):
            import mpskern
            if rms:
                return mpskern.rms_norm(x, (n,), w, eps=1e-5, backend=backend)
            return mpskern.layer_norm(x, (n,), w, eps=1e-5, backend=backend)
        return call, r, n
    return make


def _group_norm(shape, dtype, rng, groups=2):
    N, C, H, W = shape
    if C % groups:
        raise ValueError(f"--groups {groups} must divide C={C}")
    x = _rand(rng, shape, dtype) * 3 + 0.5
    w = rng.uniform(0.5, 1.5, C).astype(np.float32)

    def call(backend):
        import mpskern
        return mpskern.group_norm(x, groups, w, eps=1e-5, backend=backend)
    return call, ref.group_norm(x, groups, w, eps=1e-5), C // groups * H * W


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
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: tune float32 or float16")
    rng = np.random.default_rng(seed)
    call, want, reduction = OPS[op][2](tuple(shape), np.dtype(dtype), rng, **options)
    return Problem(op, tuple(shape), dtype, call, want, reduction)
