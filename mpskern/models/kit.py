"""What the networks of mpskern/models are written in: mpskern's public ops with numpy for
glue (residual adds, reshapes, head splits). One Kit runs one network on one backend:

    Kit("cpu")          mpskern's ops on that backend (any of mpskern.backends' names)
    Kit("reference")    the float64 twins of mpskern/reference.py, glue in float64: the
                        bench's reference for a whole network (no torch needed)

It is also the one place that says how an activation is applied and where per-layer time
is recorded (Kit(..., profile={}) fills {layer label: [seconds, calls]}; the labels name
the op and its shapes, so equal layers add up)."""
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import mpskern
from mpskern import reference as ref

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")


class Kit:
    def __init__(self, backend="cpu", profile=None):
        self.backend = backend
        self.exact = backend == "reference"
        self.profile = profile

    # -- ops --------------------------------------------------------------------------------
    def conv(self, x, w, b=None, stride=1, padding=0, act=None, out=None):
        if self.exact:
            return _into(out, self.act(ref.conv2d(x, w, b, stride, padding), act))
        t = self._start()
        y = mpskern.conv2d(x, w, b, stride, padding, activation=act, backend=self.backend,
                           out=out)
        if t is not None:
            K, C, R, S = w.shape
            self._stop(t, f"conv2d {R}x{S}/{stride} {C}->{K} @{x.shape[-1]}"
                          f"{' +' + act if act else ''}")
        return y

    def linear(self, x, w, b=None, act=None, out=None):
        if self.exact:
            return _into(out, self.act(ref.linear(x, w, b), act))
        t = self._start()
        y = mpskern.linear(x, w, b, activation=act, backend=self.backend, out=out)
        if t is not None:
            self._stop(t, f"linear {math.prod(x.shape[:-1])} x {w.shape[1]}->{w.shape[0]}"
                          f"{' +' + act if act else ''}")
        return y

    def gemm(self, a, b, c=None, trans_a=False, trans_b=False, act=None, out=None):
        """a @ b + c (mpskern.gemm: batched, a batch of 1 broadcasts, operands read
        transposed in place): the 1x1 convs and linears whose result the network wants in
        another layout (tokens <-> image, one matrix per head) write it there directly,
        with no numpy transpose copy after them."""
        if self.exact:
            y = ref.gemm(a, b, c, trans_a=trans_a, trans_b=trans_b, activation=act)
            if out is None:
                return y
            out[...] = y
            return out
        t = self._start()
        y = mpskern.gemm(a, b, c, trans_a=trans_a, trans_b=trans_b, activation=act,
                         backend=self.backend, out=out)
        if t is not None:
            sa, sb = a.shape[-2:], b.shape[-2:]
            M, K = sa[::-1] if trans_a else sa
            N = sb[0] if trans_b else sb[1]
            self._stop(t, f"linear {M} x {K}->{N} (gemm, {y.shape[0] if y.ndim == 3 else 1}"
                          f" matrices{', C' if c is not None else ''}{' +' + act if act else ''})")
        return y

    def linear_add(self, z, x, w, b=None):
        """z += linear(x, w, b), in place (a residual branch's last linear; z C-contiguous,
        (..., N)): the bias goes into z as the rank-1 GEMM ones x b and the product
        accumulates into z as the GEMM's C, both on the cpu backend's pool. No result array
        and no numpy residual-add pass (GPT-2's were 2.7 ms, the UNet's 11 ms of a forward
        pass at 16 threads on a 16-core Xeon)."""
        if self.exact:
            z += ref.linear(x, w, b)
            return z
        if not z.flags.c_contiguous:
            raise ValueError("Kit.linear_add: z must be C-contiguous (it is written in place)")
        t = self._start()
        zv = z.reshape(-1, z.shape[-1])
        if b is not None:
            mpskern.gemm(np.ones((zv.shape[0], 1), z.dtype), b.astype(z.dtype).reshape(1, -1),
                         zv, backend=self.backend, out=zv)
        mpskern.gemm(x.reshape(-1, x.shape[-1]), w, zv, trans_b=True, backend=self.backend,
                     out=zv)
        if t is not None:
            self._stop(t, f"linear {zv.shape[0]} x {w.shape[1]}->{w.shape[0]} (+= residual)")
        return z

    def heads(self, x, w, b, H):
        """linear(x, w, b) (x (B, N, C), w (H*D, C)) cut into H heads, (B, H, N, D) in C
        order as attention reads them: one GEMM per head (w's D rows of that head, read
        transposed in place) writes each head's matrix where it belongs, so no split-heads
        transpose copy follows the projection."""
        B, N, C = x.shape
        wh = w.reshape(H, -1, C)
        bh = None if b is None else b.reshape(H, 1, -1)
        out = np.empty((B, H, N, wh.shape[1]), np.result_type(x, w))
        for i in range(B):
            self.gemm(x[i], wh, bh, trans_b=True, out=out[i])
        return out

    def attention(self, q, k, v, causal=False, out=None):
        """(B, H, L, E) heads (views of one projection are read in place on cpu), written
        to `out` when given (a strided view too: merged heads); the float64 reference runs
        one (batch, head) at a time, so its L x S score matrix stays one head's."""
        if self.exact:
            if out is None:
                out = np.empty(q.shape[:-1] + v.shape[-1:])
            for i in np.ndindex(q.shape[:-2]):
                out[i] = ref.scaled_dot_product_attention(q[i], k[i], v[i], is_causal=causal)
            return out
        t = self._start()
        y = mpskern.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                 backend=self.backend, out=out)
        if t is not None:
            B, H, L, E = q.shape
            self._stop(t, f"attention {B}x{H} heads {L}x{k.shape[-2]} d{E}"
                          f"{' causal' if causal else ''}")
        return y

    def layer_norm(self, x, w, b, eps=1e-5, out=None):
        if self.exact:
            return _into(out, ref.layer_norm(x, w.shape, w, b, eps))
        t = self._start()
        y = mpskern.layer_norm(x, w.shape, w, b, eps, backend=self.backend, out=out)
        if t is not None:
            self._stop(t, f"layer_norm {math.prod(x.shape[:-1])} x {x.shape[-1]}")
        return y

    def group_norm(self, x, groups, w, b, eps=1e-5, act=None):
        if self.exact:
            return self.act(ref.group_norm(x, groups, w, b, eps), act)
        t = self._start()
        y = mpskern.group_norm(x, groups, w, b, eps, backend=self.backend)
        if t is not None:
            self._stop(t, f"group_norm {x.shape[1]}/{groups} @{x.shape[-1]}")
        return self.act(y, act)

    def max_pool(self, x, kernel, stride, padding):
        if self.exact:
            return ref.max_pool2d(x, kernel, stride, padding)
        t = self._start()
        y = mpskern.max_pool2d(x, kernel, stride, padding, backend=self.backend)
        if t is not None:
            self._stop(t, f"max_pool2d {kernel}/{stride} {x.shape[1]} @{x.shape[-1]}")
        return y

    def mean_pool(self, x):
        """(N, C, H, W) -> (N, C): the global average pool."""
        if self.exact:
            return x.mean(axis=(2, 3))
        t = self._start()
        y = mpskern.avg_pool2d(x, x.shape[2:], backend=self.backend).reshape(x.shape[:2])
        if t is not None:
            self._stop(t, f"avg_pool2d global {x.shape[1]} @{x.shape[-1]}")
        return y

    # -- glue -------------------------------------------------------------------------------
    def add(self, x, y, act=None):
        """x += y (a residual; y may broadcast), then the activation act, in place on a
        result the network owns: one pass, each piece activated while it is in cache
        (ResNet's add + ReLU as two whole-array passes read and wrote every block's output
        twice)."""
        if self.exact:
            np.add(x, y, out=x)
            return self.act(x, act)
        t = self._start()
        split(_add_act, x, np.broadcast_to(y, x.shape), act=act)
        if t is not None:
            self._stop(t, f"numpy: residual add{' +' + act if act else ''}")
        return x

    def add_bias(self, x, b):
        """x += b along dim 1 (per channel), in place, as the rank-1 GEMM b x ones with x as
        its C: a pass on the cpu backend's pool (a numpy pass over ResNet's (8, 256, 56, 56)
        took 2 ms at 16 threads, split or not)."""
        N, C = x.shape[:2]
        xv = x.reshape(N, C, -1)
        if self.exact:
            xv += b[:, None]
            return x
        t = self._start()
        ones = np.ones((N, 1, xv.shape[2]), x.dtype)
        mpskern.gemm(b.astype(x.dtype).reshape(1, C, 1), ones, xv, backend=self.backend, out=xv)
        if t is not None:
            self._stop(t, f"bias {C} @{xv.shape[2]} (rank-1 gemm)")
        return x

    def mul(self, x, y):
        """x *= y, in place (GEGLU's value times its activated gate)."""
        t = self._start()
        split(lambda a, b: np.multiply(a, b, out=a), x, np.broadcast_to(y, x.shape))
        if t is not None:
            self._stop(t, "numpy: product")
        return x

    def glue(self, label, f, *args):
        """f(*args): a numpy step (reshape/transpose copies, gathers), timed under label."""
        t = self._start()
        y = f(*args)
        if t is not None:
            self._stop(t, f"numpy: {label}")
        return y

    # -- activations ------------------------------------------------------------------------
    def act(self, y, act):
        if act is None:
            return y
        if self.exact:
            return ref.activate(y, act)
        # conv()/linear() fuse theirs (activation=); what comes here has no op to fuse
        # into: group_norm's SiLU, the time embedding's SiLU (add(act=) takes a residual's).
        # A numpy pass over the result, in place, on split()'s threads.
        t = self._start()
        split(unfused, y, act=act)
        if t is not None:
            self._stop(t, f"numpy: {act} (unfused)")
        return y

    # -- profile ----------------------------------------------------------------------------
    def _start(self):
        return None if self.profile is None else time.perf_counter()

    def _stop(self, t0, label):
        e = self.profile.setdefault(label, [0.0, 0])
        e[0] += time.perf_counter() - t0
        e[1] += 1


def _into(out, y):
    """y, written into out when one is given (the reference Kit's out=)."""
    if out is None:
        return y
    out[...] = y
    return out


# -- numpy glue on the cpu backend's threads ---------------------------------------------------
SPLIT_MIN = 1 << 18         # elements per piece: below it a thread hand-off costs more than it saves
_pool, _pool_size, _pool_lock = None, 0, threading.Lock()


def _executor(n):
    global _pool, _pool_size
    with _pool_lock:
        if _pool_size < n:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool, _pool_size = ThreadPoolExecutor(n, thread_name_prefix="mpskern-glue"), n
        return _pool


def split(f, *arrays, **kw):
    """f(*pieces, **kw) over pieces of `arrays` (equal shapes, the first one written in place)
    on as many threads as the cpu backend uses: numpy's element-wise loops release the GIL,
    so the glue between mpskern's ops is no single-threaded tail (Amdahl) at 16 threads."""
    x = arrays[0]
    n = min(mpskern.get_num_threads(), x.size // SPLIT_MIN)
    if n < 2:
        return f(*arrays, **kw)
    axis = next((i for i, d in enumerate(x.shape) if d >= n), None)
    if axis is None:
        return f(*arrays, **kw)
    cuts = np.linspace(0, x.shape[axis], n + 1).astype(int)
    pieces = [tuple(a[(slice(None),) * axis + (slice(lo, hi),)] for a in arrays)
              for lo, hi in zip(cuts[:-1], cuts[1:])]
    futures = [_executor(n - 1).submit(f, *p, **kw) for p in pieces[1:]]
    f(*pieces[0], **kw)
    for fu in futures:
        fu.result()
    return x


def _add_act(x, y, act=None):
    np.add(x, y, out=x)
    return x if act is None else unfused(x, act)


def contiguous(a):
    """np.ascontiguousarray(a) (a transposed view: head splits, token <-> image layouts),
    copied on split()'s threads. (Pieces of SPLIT_MIN / 4 were tried: GPT-2's head copies
    took 2.8x longer at 16 threads on a 16-core Xeon, the hand-offs to Python threads.)"""
    if a.flags.c_contiguous:
        return a
    out = np.empty(a.shape, a.dtype)
    split(np.copyto, out, a)
    return out


def head_views(y, parts, H):
    """(B, N, parts * H * D), one linear's result holding `parts` projections side by side
    (q|k|v), -> `parts` views (B, H, N, D) of it, no copy (attention reads their rows in
    place on the cpu backend)."""
    B, N, C = y.shape
    return list(y.reshape(B, N, parts, H, C // (parts * H)).transpose(2, 0, 3, 1, 4))


def merged(B, N, H, D, dtype):
    """(an empty (B, N, H * D) array, its (B, H, N, D) view): attention's out= that leaves
    the heads side by side, as the next linear reads them (no merge copy)."""
    o = np.empty((B, N, H * D), dtype)
    return o, o.reshape(B, N, H, D).transpose(0, 2, 1, 3)


def merge_heads(o):
    """(B, H, N, D) -> (B, N, H * D): attention's heads back side by side (one copy)."""
    B, H, N, D = o.shape
    return contiguous(o.transpose(0, 2, 1, 3)).reshape(B, N, H * D)


_GELU_C = math.sqrt(2.0 / math.pi)
# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2): relative error < 1.2e-7 for every z >= 0
# (Numerical Recipes' erfcc Chebyshev fit; numpy has no erf). P's coefficients, t^0 first:
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
         -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def unfused(y, act):
    """torch's relu / gelu (erf) / gelu(approximate="tanh") / silu of y, in place (numpy
    passes, one thread; float16 is computed in float32). NaN stays NaN; -inf gives NaN for
    the three smooth ones, as torch; the forms below do not cancel for negative y."""
    if act == "relu":
        return np.maximum(y, 0, out=y)
    if act not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {act!r}")
    x = y if y.dtype == np.float32 else y.astype(np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if act == "silu":                         # x / (1 + exp(-x))
            t = np.negative(x)
        elif act == "gelu_tanh":                  # x/2 (1 + tanh u) = x / (1 + exp(-2u)),
            t = x * x                             # u = sqrt(2/pi) (x + 0.044715 x^3)
            t *= -2 * _GELU_C * 0.044715
            t -= 2 * _GELU_C
            t *= x
        if act != "gelu":
            np.exp(t, out=t)
            t += 1
            np.divide(x, t, out=x)
        else:                                     # x/2 (1 + erf(x / sqrt 2)), with
            z = np.abs(x) * (1 / math.sqrt(2))    # q = erfc(z), z = |x| / sqrt 2
            t = 1 / (1 + 0.5 * z)
            e = _ERFC[-1] * t
            for c in _ERFC[-2:0:-1]:
                e += c
                e *= t
            e += _ERFC[0]
            z *= z
            e -= z
            np.exp(e, out=e)
            q = e
            q *= t
            q *= 0.5                              # x >= 0: x (1 - q/2); x < 0: x q/2
            np.subtract(1, q, out=q, where=x >= 0)
            x *= q
    if x is not y:
        y[...] = x
    return y
