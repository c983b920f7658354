"""The cases `mpskern selftest` runs: every public op on a few small shapes, odd sizes and
the options where backends tend to differ (transposes, broadcasting, groups, dilation,
"same" padding, ceil_mode, count_include_pad, divisor_override, a non-last axis, long
rows, batch_norm training). Each case builds seeded inputs for a dtype and returns:

    call(backend) -> ndarray   the public op through backend=..., outputs flattened and
                               concatenated (batch_norm training includes the updated stats)
    ref                        float64 reference (mpskern.reference); a case may give None,
                               then only the cpu backend serves as reference
    reduction                  terms summed per output (the tolerance grows with it)
"""
from dataclasses import dataclass

import numpy as np

from mpskern import reference as ref

EPS = 1e-5


@dataclass(frozen=True)
class Case:
    op: str        # the public function
    label: str     # shape and options, as shown in the table
    build: object  # build(rng, dtype) -> (call, ref, reduction)


def _r(rng, shape, dtype, scale=1.0):
    return (rng.uniform(-1.0, 1.0, size=shape) * scale).astype(dtype)


def _api(name):
    import mpskern
    f = getattr(mpskern, name, None)
    if f is None:
        raise RuntimeError(f"mpskern.{name} is not in this build of mpskern")
    return f


def _flat(*arrays):
    return np.concatenate([np.asarray(a).ravel() for a in arrays])


# -- gemm / matmul ---------------------------------------------------------------------------
def _matmul(sa, sb):
    def build(rng, dt):
        a, b = _r(rng, sa, dt), _r(rng, sb, dt)
        return lambda be: _api("matmul")(a, b, backend=be), ref.matmul(a, b), sa[-1]
    return build


def _gemm(M, N, K, trans_a, trans_b, alpha, beta, with_c):
    def build(rng, dt):
        a = _r(rng, (K, M) if trans_a else (M, K), dt)
        b = _r(rng, (N, K) if trans_b else (K, N), dt)
        c = _r(rng, (M, N), dt) if with_c else None
        call = lambda be: _api("gemm")(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a,  # noqa: E731
                                      trans_b=trans_b, backend=be)
        return call, ref.gemm(a, b, c, alpha, beta, trans_a, trans_b), K
    return build


# -- conv2d ------------------------------------------------------------------------------------
def _conv(xs, ws, stride=1, padding=0, dilation=1, groups=1, bias=False):
    def build(rng, dt):
        x, w = _r(rng, xs, dt), _r(rng, ws, dt)
        b = _r(rng, (ws[0],), np.float32) if bias else None
        call = lambda be: _api("conv2d")(x, w, b, stride=stride, padding=padding,  # noqa: E731
                                        dilation=dilation, groups=groups, backend=be)
        r = ref.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return call, r, ws[1] * ws[2] * ws[3]
    return build


# -- pooling -----------------------------------------------------------------------------------
def _pool(mode, xs, k, **kw):
    def build(rng, dt):
        x = _r(rng, xs, dt)
        name = "max_pool2d" if mode == "max" else "avg_pool2d"
        call = lambda be: _api(name)(x, k, backend=be, **kw)  # noqa: E731
        r = getattr(ref, name)(x, k, **kw)
        kk = k * k if isinstance(k, int) else k[0] * k[1]
        return call, r, kk
    return build


# -- softmax -----------------------------------------------------------------------------------
def _softmax(log, shape, axis):
    def build(rng, dt):
        x = _r(rng, shape, dt, scale=4.0)
        name = "log_softmax" if log else "softmax"
        call = lambda be: _api(name)(x, axis=axis, backend=be)  # noqa: E731
        r = (ref.log_softmax if log else ref.softmax)(x, axis=axis)
        return call, r, shape[axis]
    return build


# -- norms -------------------------------------------------------------------------------------
def _layer_norm(shape, nd):
    def build(rng, dt):
        x = _r(rng, shape, dt, scale=3.0)
        ns = shape[-nd:]
        w, b = _r(rng, ns, np.float32), _r(rng, ns, np.float32)
        call = lambda be: _api("layer_norm")(x, ns, w, b, eps=EPS, backend=be)  # noqa: E731
        return call, ref.layer_norm(x, ns, w, b, EPS), int(np.prod(ns))
    return build


def _rms_norm(shape, nd, eps):
    def build(rng, dt):
        x = _r(rng, shape, dt, scale=3.0)
        ns = shape[-nd:]
        w = _r(rng, ns, np.float32)
        call = lambda be: _api("rms_norm")(x, ns, w, eps=eps, backend=be)  # noqa: E731
        return call, ref.rms_norm(x, ns, w, eps), int(np.prod(ns))
    return build


def _batch_norm(shape, training):
    def build(rng, dt):
        C = shape[1]
        x = _r(rng, shape, dt, scale=2.0)
        rm = _r(rng, (C,), np.float32, 0.5)
        rv = (rng.uniform(0.5, 2.0, size=C)).astype(np.float32)
        w, b = _r(rng, (C,), np.float32), _r(rng, (C,), np.float32)
        mom = 0.1

        def call(be):
            m, v = rm.copy(), rv.copy()        # training updates them in place
            y = _api("batch_norm")(x, m, v, w, b, training=training, momentum=mom, eps=EPS,
                                   backend=be)
            return _flat(y, m, v) if training else y
        y, m, v = ref.batch_norm(x, rm, rv, w, b, training=training, momentum=mom, eps=EPS)
        return call, (_flat(y, m, v) if training else y), x.size // C
    return build


def _group_norm(shape, groups):
    def build(rng, dt):
        C = shape[1]
        x = _r(rng, shape, dt, scale=2.0)
        w, b = _r(rng, (C,), np.float32), _r(rng, (C,), np.float32)
        call = lambda be: _api("group_norm")(x, groups, w, b, eps=EPS, backend=be)  # noqa: E731
        return call, ref.group_norm(x, groups, w, b, EPS), x.size // shape[0] // groups
    return build


CASES = [
    Case("matmul", "(7,5) @ (5,3)", _matmul((7, 5), (5, 3))),
    Case("matmul", "(2,1,9,17) @ (3,17,13) broadcast", _matmul((2, 1, 9, 17), (3, 17, 13))),
    Case("matmul", "(17,) @ (17,6)", _matmul((17,), (17, 6))),
    Case("matmul", "(0,5) @ (5,3) empty", _matmul((0, 5), (5, 3))),
    Case("gemm", "M33 N31 K65", _gemm(33, 31, 65, False, False, 1.0, 0.0, False)),
    Case("gemm", "M6 N9 K11 A^T B^T alpha .5 beta 2 +C", _gemm(6, 9, 11, True, True, 0.5, 2.0, True)),
    Case("conv2d", "x(2,3,9,11) w(4,3,3,3) pad 1 +bias", _conv((2, 3, 9, 11), (4, 3, 3, 3), padding=1, bias=True)),
    Case("conv2d", "x(1,4,10,13) w(6,2,3,3) stride 2 pad 2 dil 2 groups 2",
         _conv((1, 4, 10, 13), (6, 2, 3, 3), stride=2, padding=2, dilation=2, groups=2)),
    Case("conv2d", "x(2,5,8,7) w(5,1,3,3) depthwise pad 1 +bias",
         _conv((2, 5, 8, 7), (5, 1, 3, 3), padding=1, groups=5, bias=True)),
    Case("conv2d", "x(1,8,5,5) w(16,8,1,1) 1x1", _conv((1, 8, 5, 5), (16, 8, 1, 1))),
    Case("conv2d", "x(1,3,7,8) w(2,3,2,4) pad same", _conv((1, 3, 7, 8), (2, 3, 2, 4), padding="same")),
    Case("conv2d", "x(0,3,5,5) w(4,3,3,3) empty batch", _conv((0, 3, 5, 5), (4, 3, 3, 3), bias=True)),
    Case("max_pool2d", "x(2,3,9,11) k3 s2 p1", _pool("max", (2, 3, 9, 11), 3, stride=2, padding=1)),
    Case("max_pool2d", "x(1,2,10,7) k(2,3) s(2,1) dil 2 ceil",
         _pool("max", (1, 2, 10, 7), (2, 3), stride=(2, 1), dilation=2, ceil_mode=True)),
    Case("avg_pool2d", "x(2,3,9,11) k3 s2 p1", _pool("avg", (2, 3, 9, 11), 3, stride=2, padding=1)),
    Case("avg_pool2d", "x(2,3,9,11) k3 s2 p1 ceil count_include_pad",
         _pool("avg", (2, 3, 9, 11), 3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)),
    Case("avg_pool2d", "x(1,2,7,10) k2 s2 p1 ceil exclude pad",
         _pool("avg", (1, 2, 7, 10), 2, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    Case("avg_pool2d", "x(1,2,6,6) k3 s1 p1 divisor_override 5",
         _pool("avg", (1, 2, 6, 6), 3, stride=1, padding=1, divisor_override=5)),
    Case("softmax", "(5,37) axis -1", _softmax(False, (5, 37), -1)),
    Case("softmax", "(3,17,6) axis 1", _softmax(False, (3, 17, 6), 1)),
    Case("softmax", "(2,1500) long rows", _softmax(False, (2, 1500), -1)),
    Case("softmax", "(0,7) empty", _softmax(False, (0, 7), -1)),
    Case("log_softmax", "(5,37) axis -1", _softmax(True, (5, 37), -1)),
    Case("log_softmax", "(3,17,6) axis 1", _softmax(True, (3, 17, 6), 1)),
    Case("layer_norm", "(7,33) over (33,) +w +b", _layer_norm((7, 33), 1)),
    Case("layer_norm", "(2,3,5,7) over (5,7) +w +b", _layer_norm((2, 3, 5, 7), 2)),
    Case("rms_norm", "(5,31) over (31,) +w eps 1e-6", _rms_norm((5, 31), 1, 1e-6)),
    Case("rms_norm", "(3,4,9) over (4,9) +w", _rms_norm((3, 4, 9), 2, EPS)),
    Case("batch_norm", "x(3,5,7,6) inference +w +b", _batch_norm((3, 5, 7, 6), False)),
    Case("batch_norm", "x(4,3,5,5) training (+ running stats)", _batch_norm((4, 3, 5, 5), True)),
    Case("group_norm", "x(2,6,5,7) 3 groups +w +b", _group_norm((2, 6, 5, 7), 3)),
    Case("group_norm", "x(3,4,9) 2 groups +w +b", _group_norm((3, 4, 9), 2)),
]

OPS = sorted({c.op for c in CASES})
