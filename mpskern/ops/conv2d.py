"""conv2d (torch.nn.functional.conv2d semantics, NCHW) on the backend's conv2d
(mk_conv2d_args), and its entry in the op table (CONV2D: shape fields, inputs, reference,
cost, bench presets, tune shapes, selftest cases)."""

from mpskern import _args
from mpskern import structs
from mpskern.backends.family import Family
from mpskern.ops.op import (ACT_FIELD, ACT_NAMES, Check, Field, Op, act_label, normal,
                            torch_activation)
from mpskern.shapes import conv_padding, positive_pair, refuse_empty


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, activation=None,
           backend="auto", out=None):
    """2-D convolution (cross-correlation, as torch) of x (N, C, H, W) or (C, H, W) with
    weight (K, C/groups, R, S) plus bias (K,). Layout is NCHW: a channels-last (NHWC)
    input is refused with the transpose to use.

    Parameters
    ----------
    x : array (N, C, H, W) or (C, H, W)
        The input, NCHW.
    weight : array (K, C/groups, R, S)
        x's dtype.
    bias : array (K,), optional
        A per-channel vector: float32 or x's dtype.
    stride : int or (int, int)
        Default 1.
    padding : int, (int, int), "same" or "valid"
        Zero padding on both sides; "same" (stride 1 only) keeps H and W.
    dilation : int or (int, int)
        Spacing of the kernel's taps (default 1).
    groups : int
        C and K split into this many groups (groups == C: depthwise).

    Returns
    -------
    numpy.ndarray
        (N, K, P, Q) (or (K, P, Q) for a 3-D x) in x's dtype, P = (H + 2 pad - dil (R - 1)
        - 1) // stride + 1 and Q likewise; (N, 0, P, Q) when x has no channels (C = 0),
        as torch.

    Example
    -------
        x = np.ones((2, 8, 16, 16), np.float32)
        w = np.ones((12, 8, 3, 3), np.float32)
        y = mk.conv2d(x, w, stride=1, padding="same")           # (2, 12, 16, 16)
        y = mk.conv2d(x, np.ones((8, 1, 3, 3), np.float32), groups=8)   # depthwise, (2, 8, 14, 14)
    """
    op = "conv2d"
    x, code = _args.array(x, "x", op)
    w = _args.same_dtype(weight, "weight", x, "x", op)
    unbatched = x.ndim == 3
    if x.ndim not in (3, 4):
        raise ValueError(f"{op}: x has shape {x.shape}; conv2d takes (N, C, H, W) or (C, H, W)")
    if w.ndim != 4:
        raise ValueError(f"{op}: weight has shape {w.shape}; conv2d takes weight "
                         "(K, C/groups, R, S)")
    xshape = x.shape
    if unbatched:
        x = x.reshape((1,) + x.shape)
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    if R < 1 or S < 1:
        raise ValueError(f"{op}: weight has shape {w.shape}: an empty kernel (R, S) = ({R}, {S}); "
                         "each kernel dimension must be >= 1")
    g = _args.whole(groups, "groups", op, 1)
    act = _args.activation(activation, op)
    if K == 0:   # torch refuses it too (weight.shape[0] must be >= groups)
        raise ValueError(f"{op}: weight has shape {w.shape}: no output channels "
                         f"(weight.shape[0] = 0); conv2d needs at least groups={g}")
    if C % g or K % g:
        raise ValueError(f"{op}: groups={g} must divide both the input channels "
                         f"(x.shape[1]={C}) and the output channels (weight.shape[0]={K}); "
                         "pick a common divisor"
                         + _layout_hint(x.shape, w.shape, g, xshape))
    if Cg != C // g:
        raise ValueError(f"{op}: weight has shape {w.shape} but x has {C} channels "
                         f"(x.shape={xshape}) and groups={g}, so weight.shape[1] must be "
                         f"C/groups = {C // g}; fix weight or groups"
                         + _layout_hint(x.shape, w.shape, g, xshape))
    s = positive_pair(stride, "stride", op)
    d = positive_pair(dilation, "dilation", op)
    (ph, pw), (P, Q) = conv_padding(padding, (H, W), (R, S), s, d, op)
    _args.window(op, (H, W), (R, S), s, (ph, pw), d, (P, Q))
    if isinstance(padding, str) and padding == "same":   # torch: H + dil*(R-1) padded
        # rows are fewer than the R taps span when H = 0
        refuse_empty(op, xshape, {"H": H, "W": W}, "padding='same' keeps an empty plane, which "
                     "torch refuses (the kernel is larger than the padded input): give H and W "
                     "of at least 1")
    if N and C:
        refuse_empty(op, xshape, {"H": H, "W": W}, "as torch, an empty plane is convolved only "
                     "in an empty batch (N = 0) or with no input channels (C = 0): give H and W "
                     "of at least 1")
    b = _args.vector(bias, "bias", K, f"weight has {K} output channels", op)
    # C == 0: torch's result has no channels either, (N, 0, P, Q), whatever K and the bias
    shape = (N, K if C else 0, P, Q)
    _args.check_size(shape, "the result", op)
    be = _args.backend(backend)
    y, out = _args.output(out, shape[1:] if unbatched else shape, x.dtype, op, (x, w, b))
    if y.size == 0:
        return _args.finish(y, out)
    args = structs.conv2d_args(N, C, H, W, K, R, S, P, Q, stride_h=s[0], stride_w=s[1],
                               pad_h=ph, pad_w=pw, dil_h=d[0], dil_w=d[1], groups=g,
                               has_bias=b is not None, activation=act)
    be.execute("conv2d", args, code, x, w, b, y)
    return _args.finish(y, out)


def _layout_hint(xs, ws, g, given):
    """What to add to a channel mismatch when x or weight looks channels-last (NHWC input,
    TensorFlow's (R, S, C, K) or (K, R, S, C) weights): mpskern takes NCHW / (K, C/g, R, S)."""
    cg = ws[1]
    hint = ""
    if xs[3] == cg * g and xs[1] != cg * g:
        t = "x.transpose(2, 0, 1)" if len(given) == 3 else "x.transpose(0, 3, 1, 2)"
        hint += (f"; x looks channels-last (NHWC: its last dimension, {xs[3]}, is the weight's "
                 f"channel count): mpskern takes NCHW, pass np.ascontiguousarray({t})")
    for layout, c, perm in (("(R, S, C, K)", ws[2], "(3, 2, 0, 1)"),
                            ("(K, R, S, C)", ws[3], "(0, 3, 1, 2)")):
        if c * g == xs[1] and cg * g != xs[1]:
            hint += (f"; weight looks {layout} (channels-last): mpskern takes (K, C/groups, R, "
                     f"S), pass np.ascontiguousarray(weight.transpose{perm})")
            break
    return hint



class Conv2dFamily(Family):
    """mk_conv2d_args: the native row 'conv2d'; on metal and sim mpskern/backends/gpu/conv2d.py."""
    name = "conv2d"

    def encode(self, ctx, args, dtype, *arrays, config=None):
        from mpskern.backends.gpu import conv2d     # the GPU path, loaded by its first call
        return conv2d.conv2d(ctx, args, dtype, *arrays, config=config)

# -- the op table's entry -------------------------------------------------------------------
# ResNet-50 (v1.5, 224x224 input) convolutions, one entry per distinct layer shape:
# (label, C, H, K, R, stride); 3x3 and 7x7 layers are padded to keep the size.
_RESNET50 = [("conv1 7x7/2", 3, 224, 64, 7, 2), ("res2 1x1 64>64", 64, 56, 64, 1, 1),
             ("res2 3x3 64", 64, 56, 64, 3, 1), ("res2 1x1 64>256", 64, 56, 256, 1, 1),
             ("res2 1x1 256>64", 256, 56, 64, 1, 1), ("res3 1x1 256>128", 256, 56, 128, 1, 1),
             ("res3 3x3/2 128", 128, 56, 128, 3, 2), ("res3 3x3 128", 128, 28, 128, 3, 1),
             ("res3 1x1 128>512", 128, 28, 512, 1, 1), ("res3 1x1 512>128", 512, 28, 128, 1, 1),
             ("res3 down 1x1/2", 256, 56, 512, 1, 2), ("res4 1x1 512>256", 512, 28, 256, 1, 1),
             ("res4 3x3/2 256", 256, 28, 256, 3, 2), ("res4 3x3 256", 256, 14, 256, 3, 1),
             ("res4 1x1 256>1024", 256, 14, 1024, 1, 1),
             ("res4 1x1 1024>256", 1024, 14, 256, 1, 1), ("res4 down 1x1/2", 512, 28, 1024, 1, 2),
             ("res5 1x1 1024>512", 1024, 14, 512, 1, 1), ("res5 3x3/2 512", 512, 14, 512, 3, 2),
             ("res5 3x3 512", 512, 7, 512, 3, 1), ("res5 1x1 512>2048", 512, 7, 2048, 1, 1),
             ("res5 1x1 2048>512", 2048, 7, 512, 1, 1), ("res5 down 1x1/2", 1024, 14, 2048, 1, 2)]
_RESNET50 = [(lbl, dict(C=c, H=h, K=k, R=r, **(dict(stride=st) if st > 1 else {}),
                        **(dict(pad=r // 2) if r > 1 else {})))
             for lbl, c, h, k, r, st in _RESNET50]
_SMALL = ["conv1 7x7/2", "res2 3x3 64", "res3 3x3 128", "res4 1x1 1024>256", "res5 3x3 512"]
# MobileNetV2 depthwise 3x3 layers (groups = channels)
_MOBILENET_DW = [(f"dw 3x3{'/2' if st == 2 else ''} {c}@{h}",
                  dict(C=c, H=h, K=c, R=3, stride=st, pad=1, groups=c))
                 for c, h, st in [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2),
                                  (192, 28, 1), (384, 14, 1), (576, 14, 1), (576, 14, 2),
                                  (960, 7, 1)]]


def _check(xs, ws, bias=False, **p):
    """A selftest case: x of shape xs, weight ws, conv2d options p."""
    def inputs(rng, dt):
        return dict(x=normal(rng, xs, dt), w=normal(rng, ws, dt),
                    b=normal(rng, ws[0], "float32") if bias else None, p=p)
    return inputs


class Conv2d(Op):
    name = "conv2d"
    kernel, cost, metric = "conv2d", staticmethod(structs.conv2d_cost), "gflops"
    fields = (Field("N", 1, "batch"), Field("C", None, "input channels"),
              Field("H", None, "height"), Field("W", "H", "width (default H)"),
              Field("K", None, "output channels"), Field("R", None, "kernel height"),
              Field("S", "R", "kernel width (default R)"), Field("stride", 1),
              Field("pad", 0), Field("dil", 1), Field("groups", 1), Field("bias", 1, "0/1"),
              ACT_FIELD)
    example = "1,64,56,56,64,3,pad=1"
    zero_ok = frozenset({"pad", "bias", "act"})
    later = {"act": 0}
    presets = {
        "small": [e for e in _RESNET50 if e[0] in _SMALL],
        "resnet50": _RESNET50,
        "mobilenet-dw": _MOBILENET_DW,
        "tiny": [("tiny 3x3 16", dict(C=16, H=16, K=16, R=3, pad=1)),
                 ("tiny 1x1 32>16", dict(C=32, H=8, K=16, R=1))],
        # ResNet's res3 3x3 (Winograd on cpu) and a 1x1 expansion (im2col-free GEMM), batch 8,
        # with each activation
        "activations": [(f"{lbl}{act_label(a)}", dict(N=8, C=c, H=h, K=k, R=r, pad=r // 2, act=a))
                        for lbl, c, h, k, r in (("res3 3x3 128 b8", 128, 28, 128, 3),
                                                ("res3 1x1 128>512 b8", 128, 28, 512, 1))
                        for a in ACT_NAMES],
    }
    tune = {"metal": dict(N=8, C=64, H=56, K=64, R=3, bias=0),
            "sim": dict(N=1, C=8, H=10, K=16, R=3, bias=0)}
    checks = (
        Check("x(2,3,9,11) w(4,3,3,3) pad 1 +bias", _check((2, 3, 9, 11), (4, 3, 3, 3), True,
                                                          padding=1)),
        Check("x(1,4,10,13) w(6,2,3,3) stride 2 pad 2 dil 2 groups 2",
              _check((1, 4, 10, 13), (6, 2, 3, 3), stride=2, padding=2, dilation=2, groups=2)),
        Check("x(2,5,8,7) w(5,1,3,3) depthwise pad 1 +bias",
              _check((2, 5, 8, 7), (5, 1, 3, 3), True, padding=1, groups=5)),
        Check("x(1,8,5,5) w(16,8,1,1) 1x1", _check((1, 8, 5, 5), (16, 8, 1, 1))),
        Check("x(1,3,7,8) w(2,3,2,4) pad same", _check((1, 3, 7, 8), (2, 3, 2, 4),
                                                      padding="same")),
        Check("x(0,3,5,5) w(4,3,3,3) empty batch", _check((0, 3, 5, 5), (4, 3, 3, 3), True)),
        Check("x(2,3,9,11) w(4,3,3,3) pad 1 +bias relu", _check((2, 3, 9, 11), (4, 3, 3, 3), True,
                                                               padding=1, activation="relu")),
        Check("x(1,6,12,12) w(8,6,3,3) pad 1 +bias gelu_tanh",
              _check((1, 6, 12, 12), (8, 6, 3, 3), True, padding=1, activation="gelu_tanh")),
        Check("x(2,5,8,7) w(5,1,3,3) depthwise +bias silu",
              _check((2, 5, 8, 7), (5, 1, 3, 3), True, padding=1, groups=5, activation="silu")),
    )

    def validate(self, s):
        super().validate(s)
        if s["C"] % s["groups"] or s["K"] % s["groups"]:
            raise ValueError(f"conv2d: groups={s['groups']} must divide C={s['C']} and K={s['K']}")
        for d, k in (("H", "R"), ("W", "S")):
            if s[d] + 2 * s["pad"] < s["dil"] * (s[k] - 1) + 1:
                raise ValueError(f"conv2d: kernel {k}={s[k]} (dil={s['dil']}) is larger than the "
                                 f"padded input {d}+2*pad={s[d] + 2 * s['pad']}")

    def label(self, s):
        g = f" g{s['groups']}" if s["groups"] > 1 else ""
        d = f" d{s['dil']}" if s["dil"] > 1 else ""
        return (f"{s['N']}x{s['C']}x{s['H']}x{s['W']} {s['R']}x{s['S']}->{s['K']} "
                f"s{s['stride']}p{s['pad']}{d}{g}{'' if s['bias'] else ' no bias'}"
                f"{act_label(s['act'])}")

    def inputs(self, s, dtype, rng):
        fan = s["C"] // s["groups"] * s["R"] * s["S"]
        return dict(x=normal(rng, (s["N"], s["C"], s["H"], s["W"]), dtype),
                    w=normal(rng, (s["K"], s["C"] // s["groups"], s["R"], s["S"]), dtype,
                             fan ** -0.5),
                    b=normal(rng, s["K"], dtype) if s["bias"] else None,
                    p=dict(stride=s["stride"], padding=s["pad"], dilation=s["dil"],
                           groups=s["groups"], activation=ACT_NAMES[s["act"]]))

    arrays = ("x", "w", "b")

    @staticmethod
    def of(ns):
        return ns.conv2d

    def torch_call(self, F, t):
        p = dict(t["p"])
        act = p.pop("activation", None)
        return torch_activation(F, F.conv2d(t["x"], t["w"], t["b"], **p), act)

    def reduction(self, i):
        _, cg, r, s_ = i["w"].shape
        return cg * r * s_

    def out_elements(self, s, inp):
        P, Q = ((n + 2 * s["pad"] - s["dil"] * (k - 1) - 1) // s["stride"] + 1
                for n, k in ((s["H"], s["R"]), (s["W"], s["S"])))
        return s["N"] * s["K"] * max(P, 0) * max(Q, 0)

    def struct(self, s, out_shape):
        return structs.conv2d_args(s["N"], s["C"], s["H"], s["W"], s["K"], s["R"], s["S"],
                                   out_shape[2], out_shape[3], groups=s["groups"],
                                   has_bias=s["bias"], activation=s["act"])


CONV2D = Conv2d()
