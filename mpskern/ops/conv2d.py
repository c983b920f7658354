"""conv2d (torch.nn.functional.conv2d semantics, NCHW) on the backend's conv2d
(mk_conv2d_args)."""

from mpskern import _args
from mpskern.shapes import conv_padding, positive_pair


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, backend="auto",
           out=None):
    """2-D convolution (cross-correlation, as torch) of x (N, C, H, W) or (C, H, W) with
    weight (K, C/groups, R, S) plus bias (K,). stride, padding and dilation are an int or a
    pair; padding may also be "same" (stride 1) or "valid"."""
    op = "conv2d"
    x, code = _args.array(x, "x", op)
    w = _args.same_dtype(weight, "weight", x, "x", op)
    unbatched = x.ndim == 3
    if x.ndim not in (3, 4):
        raise ValueError(f"{op}: x has shape {x.shape}; conv2d takes (N, C, H, W) or (C, H, W)")
    if w.ndim != 4:
        raise ValueError(f"{op}: weight has shape {w.shape}; conv2d takes weight "
                         "(K, C/groups, R, S)")
    if unbatched:
        x = x.reshape((1,) + x.shape)
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    g = _args.whole(groups, "groups", op, 1)
    if C % g or K % g:
        raise ValueError(f"{op}: groups={g} must divide both the input channels (x.shape[1]={C}) "
                         f"and the output channels (weight.shape[0]={K}); pick a common divisor")
    if Cg != C // g:
        raise ValueError(f"{op}: weight has shape {w.shape} but x has {C} channels "
                         f"(x.shape={tuple(x.shape)}) and groups={g}, so weight.shape[1] must be "
                         f"C/groups = {C // g}; fix weight or groups")
    s = positive_pair(stride, "stride", op)
    d = positive_pair(dilation, "dilation", op)
    (ph, pw), (P, Q) = conv_padding(padding, (H, W), (R, S), s, d, op)
    _args.window(op, (H, W), (R, S), s, (ph, pw), d, (P, Q))
    b = _args.vector(bias, "bias", K, f"weight has {K} output channels", op)
    shape = (N, K, P, Q)
    _args.check_size(shape, "the result", op)
    be = _args.backend(backend)
    y, out = _args.output(out, shape[1:] if unbatched else shape, x.dtype, op, (x, w, b))
    if y.size == 0 or C == 0:
        y[...] = 0 if b is None else b.reshape(-1, 1, 1)  # C == 0: an empty sum
        return _args.finish(y, out)
    args = {"N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": S, "P": P, "Q": Q,
            "stride_h": s[0], "stride_w": s[1], "pad_h": ph, "pad_w": pw,
            "dil_h": d[0], "dil_w": d[1], "groups": g, "has_bias": int(b is not None)}
    be.conv2d(args, code, x, w, b, y)
    return _args.finish(y, out)
