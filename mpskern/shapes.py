"""Shape rules shared by the ops: pair arguments, conv/pool padding forms and output sizes
(torch.nn.functional's rules), matmul batch broadcasting (np.matmul's rules). Pure
Python on ints and tuples; every error is a ValueError/TypeError that names the argument,
the values and the fix."""
import operator


def index(v):
    """operator.index refusing booleans (Python's and numpy's): True is not a size, a stride
    or an axis (torch refuses it too); TypeError as for 2.5 or "3"."""
    if isinstance(v, bool) or getattr(v, "dtype", None) == bool:
        raise TypeError(f"a bool is not an integer here: {v!r}")
    return operator.index(v)


def _int(v, name, op):
    try:
        return index(v)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int or a pair of ints, got {v!r}") from None


def pair(v, name, op):
    """An int or a length-2 sequence of ints -> (h, w)."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{op}: {name} must be an int or a pair (h, w), got {v!r} "
                             f"with {len(v)} values")
        return _int(v[0], name, op), _int(v[1], name, op)
    i = _int(v, name, op)
    return i, i


def positive_pair(v, name, op):
    """pair() whose values must be >= 1 (kernel sizes, strides, dilations)."""
    p = pair(v, name, op)
    if p[0] < 1 or p[1] < 1:
        raise ValueError(f"{op}: {name} must be >= 1, got {v!r}; pass a positive int or pair")
    return p


def conv_padding(padding, hw, kernel, stride, dilation, op="conv2d"):
    """Top/left padding and output size for conv2d.

    padding: int, pair, "valid" (no padding) or "same" (output size = input size, stride 1;
    an odd total padding puts the extra row/column at the bottom/right, as torch does).
    Returns ((pad_h, pad_w), (P, Q)); the bottom/right padding is implied by P/Q.
    """
    (H, W), (R, S), (sh, sw), (dh, dw) = hw, kernel, stride, dilation
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0)
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise ValueError(f"{op}: padding='same' needs stride=1, got stride={stride}; "
                                 "pass explicit padding for a strided convolution")
            # total padding dil*(k-1); the smaller half goes first (top/left)
            return ((dh * (R - 1)) // 2, (dw * (S - 1)) // 2), (H, W)
        else:
            raise ValueError(f"{op}: padding={padding!r} is not a padding; use an int, a pair, "
                             "'same' or 'valid'")
    else:
        pads = pair(padding, "padding", op)
    if pads[0] < 0 or pads[1] < 0:
        raise ValueError(f"{op}: padding must be >= 0, got {padding!r}")
    out = []
    for n, k, s, d, p, axis in ((H, R, sh, dh, pads[0], "height"), (W, S, sw, dw, pads[1], "width")):
        eff = d * (k - 1) + 1
        if eff > n + 2 * p:
            raise window_too_big(op, "the kernel's", axis, k, d, n, p, "kernel or dilation")
        out.append((n + 2 * p - eff) // s + 1)
    return pads, tuple(out)


def window_too_big(op, what, axis, k, d, n, p, fix, label=""):
    """The error for a window (kernel k with dilation d) wider than an input axis of n
    padded by p on each side: it names the sizes and never an output size (that would be
    zero or negative)."""
    size = f"{label}{k}" + ("" if d == 1 else f", spanning {d * (k - 1) + 1} with dilation {d}")
    return ValueError(f"{op}: {what} {axis} ({size}) is larger than the padded input's {axis} "
                      f"({n} + 2*{p} = {n + 2 * p}); use a smaller {fix}, more padding, or a "
                      "larger input")


def refuse_empty(op, shape, axes, rule):
    """torch's rules on empty sizes: ValueError when any of `axes` ({name: size}) is 0,
    naming those axes, x's shape and the op's `rule` (which sizes may be 0, and the fix)."""
    zero = [f"{n} = 0" for n, v in axes.items() if v == 0]
    if zero:
        raise ValueError(f"{op}: x has shape {tuple(shape)}: {' and '.join(zero)}; {rule}")


def pool_output_size(n, k, s, p, d, ceil_mode):
    """torch's pooling output size along one axis; with ceil_mode the last window must
    start inside the input or its left padding."""
    eff = d * (k - 1) + 1
    num = n + 2 * p - eff + (s - 1 if ceil_mode else 0)
    out = num // s + 1  # floor division (num may be negative: then out <= 0)
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def pool_shape(op, hw, kernel, stride, padding, dilation, ceil_mode):
    """Validated (kernel, stride, padding, dilation, (P, Q)) pairs for a 2-D pooling."""
    k = positive_pair(kernel, "kernel_size", op)
    s = k if stride is None else positive_pair(stride, "stride", op)
    p = pair(padding, "padding", op)
    d = positive_pair(dilation, "dilation", op)
    if p[0] < 0 or p[1] < 0:
        raise ValueError(f"{op}: padding must be >= 0, got {padding!r}")
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{op}: padding={padding!r} is more than half of kernel_size={kernel!r}; "
                         f"padding must be at most kernel_size // 2 = {(k[0] // 2, k[1] // 2)}")
    out = tuple(pool_output_size(hw[i], k[i], s[i], p[i], d[i], ceil_mode) for i in (0, 1))
    for i, axis in enumerate(("height", "width")):
        if out[i] < 1:      # the window spans more than the padded input
            fix = "kernel_size" if op == "avg_pool2d" else "kernel_size or dilation"
            raise window_too_big(op, "the window's", axis, k[i], d[i], hw[i], p[i], fix,
                                 label="kernel_size=")
    return k, s, p, d, out


def broadcast_batch(a_batch, b_batch, a_shape, b_shape, op="matmul"):
    """np.matmul's broadcast of the batch dims (all dims but the last two)."""
    n = max(len(a_batch), len(b_batch))
    a = (1,) * (n - len(a_batch)) + tuple(a_batch)
    b = (1,) * (n - len(b_batch)) + tuple(b_batch)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{op}: the batch dimensions of a {tuple(a_shape)} and b "
                             f"{tuple(b_shape)} do not broadcast ({x} vs {y}); make them equal "
                             "or 1")
        out.append(x if y == 1 else y)
    return tuple(out)
