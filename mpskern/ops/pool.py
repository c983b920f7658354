"""max_pool2d and avg_pool2d (torch.nn.functional semantics, NCHW) on the backend's pool2d
(mk_pool2d_args)."""

from mpskern import _args
from mpskern.shapes import pool_shape

MAX, AVG = 0, 1  # metal/mk_args.h MK_POOL_MAX / MK_POOL_AVG


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *,
               backend="auto", out=None):
    """Max over kernel_size windows of x (N, C, H, W) or (C, H, W); stride defaults to
    kernel_size; padding (at most kernel_size // 2) never wins the max."""
    return _pool("max_pool2d", MAX, x, kernel_size, stride, padding, dilation, ceil_mode,
                 True, None, backend, out)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, *, backend="auto", out=None):
    """Mean over kernel_size windows of x (N, C, H, W) or (C, H, W). The divisor counts the
    zero padding when count_include_pad (but not windows' overhang past it in ceil_mode),
    or is divisor_override when given."""
    return _pool("avg_pool2d", AVG, x, kernel_size, stride, padding, 1, ceil_mode,
                 count_include_pad, divisor_override, backend, out)


def _pool(op, mode, x, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad,
          divisor_override, backend, out):
    x, code = _args.array(x, "x", op)
    if x.ndim not in (3, 4):
        raise ValueError(f"{op}: x has shape {x.shape}; {op} takes (N, C, H, W) or (C, H, W)")
    unbatched = x.ndim == 3
    N, C, H, W = (1,) + x.shape if unbatched else x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (P, Q) = pool_shape(
        op, (H, W), kernel_size, stride, padding, dilation, _args.flag(ceil_mode, "ceil_mode", op))
    _args.window(op, (H, W), (kh, kw), (sh, sw), (ph, pw), (dh, dw), (P, Q), count=mode == AVG)
    div = 0
    if divisor_override is not None:
        div = _args.whole(divisor_override, "divisor_override", op, 1,
                          " (or None for the window size)")
    shape = (C, P, Q) if unbatched else (N, C, P, Q)
    be = _args.backend(backend)
    y, out = _args.output(out, shape, x.dtype, op, (x,))
    if y.size == 0:
        return _args.finish(y, out)
    args = {"N": N, "C": C, "H": H, "W": W, "P": P, "Q": Q, "kh": kh, "kw": kw,
            "stride_h": sh, "stride_w": sw, "pad_h": ph, "pad_w": pw, "dil_h": dh, "dil_w": dw,
            "mode": mode, "count_include_pad": int(_args.flag(count_include_pad, "count_include_pad", op)), "divisor": div,
            "pad_h_end": ph, "pad_w_end": pw}
    be.pool2d(args, code, x, y)
    return _args.finish(y, out)
