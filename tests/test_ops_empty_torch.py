"""Empty inputs (a zero batch, channel, row, reduction or spatial size) in every op, against
torch itself: where torch returns, the same shape and the same values (an empty sum is 0,
then bias, beta*c, the activation; a conv2d over no input channels has no output channels;
adaptive_avg_pool2d to size 1 of an empty plane is NaN, torch's mean); where torch refuses
an empty size (an empty H or W in conv2d unless N or C is 0, any empty size but the batch
in the pools, an empty plane in adaptive_avg_pool2d), mpskern raises a ValueError that
names the op and x's shape. Every case is decided by running torch, on cpu and sim."""
import numpy as np
import pytest

import mpskern
from mpskern import sim
from mpskern import reference as R

torch = pytest.importorskip("torch")
F = torch.nn.functional
BACKENDS = ["cpu"] + (["sim"] if sim.available()[0] else [])


def z(*s):
    return np.zeros(s, np.float32)


def o(*s):
    return np.ones(s, np.float32)


# name: (mpskern op, torch function, args, keyword arguments (the same names in both))
CASES = {
    "matmul K=0": ("matmul", torch.matmul, (z(3, 0), z(0, 4)), {}),
    "matmul 1-D empty": ("matmul", torch.matmul, (z(0), z(0)), {}),
    "matmul batch 0": ("matmul", torch.matmul, (z(0, 3, 2), o(2, 4)), {}),
    "gemm K=0 beta c": ("gemm", None, (z(3, 0), z(0, 4), o(3, 4)), dict(beta=2.0)),
    "gemm K=0 beta c silu": ("gemm", None, (z(3, 0), z(0, 4), o(3, 4)),
                             dict(beta=2.0, activation="silu")),
    "linear in_features 0 bias": ("linear", F.linear, (z(5, 0), z(3, 0), o(3)), {}),
    "linear out_features 0": ("linear", F.linear, (z(5, 2), z(0, 2)), {}),
    "linear no rows": ("linear", F.linear, (z(0, 2), o(3, 2), o(3)), {}),
    "conv2d N=0": ("conv2d", F.conv2d, (z(0, 2, 5, 5), o(3, 2, 3, 3), o(3)), {}),
    "conv2d C=0 bias": ("conv2d", F.conv2d, (z(2, 0, 5, 5), o(3, 0, 3, 3), o(3)), {}),
    "conv2d C=0 no bias": ("conv2d", F.conv2d, (z(2, 0, 5, 5), o(3, 0, 3, 3)), {}),
    "conv2d C=0 relu": ("conv2d", F.conv2d, (z(2, 0, 5, 5), o(3, 0, 3, 3), -o(3)),
                        dict(activation="relu")),
    "conv2d C=0 groups 3": ("conv2d", F.conv2d, (z(2, 0, 5, 5), o(6, 0, 3, 3), o(6)),
                            dict(groups=3)),
    "conv2d C=0 stride pad dil": ("conv2d", F.conv2d, (z(2, 0, 7, 6), o(4, 0, 3, 2), o(4)),
                                  dict(stride=2, padding=1, dilation=2)),
    "conv2d C=0 same": ("conv2d", F.conv2d, (z(1, 0, 7, 6), o(4, 0, 3, 3), o(4)),
                        dict(padding="same")),
    "conv2d C=0 unbatched": ("conv2d", F.conv2d, (z(0, 5, 5), o(3, 0, 3, 3), o(3)), {}),
    "max_pool2d N=0": ("max_pool2d", F.max_pool2d, (z(0, 2, 4, 4), 2), {}),
    "adaptive size 0": ("adaptive_avg_pool2d", F.adaptive_avg_pool2d, (z(1, 2, 4, 4), 0), {}),
    "adaptive N=0": ("adaptive_avg_pool2d", F.adaptive_avg_pool2d, (z(0, 2, 4, 4), 2), {}),
    "adaptive C=0": ("adaptive_avg_pool2d", F.adaptive_avg_pool2d, (z(2, 0, 4, 4), (2, 0)), {}),
    "adaptive C=0 unbatched": ("adaptive_avg_pool2d", F.adaptive_avg_pool2d, (z(0, 4, 4), 3),
                               {}),
    "conv2d N=0 H=0 padded": ("conv2d", F.conv2d, (z(0, 2, 0, 5), o(3, 2, 1, 1), o(3)),
                              dict(padding=1)),
    "conv2d C=0 H=0 padded": ("conv2d", F.conv2d, (z(2, 0, 0, 5), o(3, 0, 3, 3)),
                              dict(padding=2)),
}
# torch refuses these (mpskern returned results for most of them before session 8)
_SAME = dict(padding="same")
for _x, _k, _kw in [((2, 2, 0, 5), 1, dict(padding=1)), ((2, 2, 5, 0), 3, dict(padding=2)),
                    ((2, 2, 0, 0), 1, dict(padding=(1, 1))), ((2, 5, 0), 1, dict(padding=1)),
                    ((2, 2, 0, 5), 3, _SAME), ((2, 2, 5, 0), 1, _SAME), ((0, 2, 0, 5), 1, _SAME),
                    ((2, 0, 0, 5), 3, _SAME), ((2, 2, 0, 5), 1, {}), ((2, 2, 4, 4), 5, {})]:
    CASES[f"conv2d x{_x} {_k}x{_k} {_kw}"] = ("conv2d", F.conv2d,
                                             (z(*_x), o(3, _x[-3], _k, _k), o(3)), _kw)
for _op in ("max_pool2d", "avg_pool2d"):
    for _x, _k, _kw in [((2, 0, 4, 4), 2, {}), ((2, 0, 4, 4), 1, {}),
                        ((2, 2, 0, 4), 2, dict(padding=1)), ((2, 2, 4, 0), 1, {}),
                        ((0, 2, 0, 4), 2, dict(padding=1)), ((0, 4, 4), 2, {}), ((2, 0, 4), 1, {}),
                        ((2, 4, 0), 2, dict(ceil_mode=True)), ((2, 2, 1, 4), 2, {}),
                        ((0, 2, 4, 4), 2, dict(padding=1, ceil_mode=True))]:
        CASES[f"{_op} x{_x} k{_k} {_kw}"] = (_op, getattr(F, _op), (z(*_x), _k), _kw)
for _x, _size in [((2, 2, 0, 4), 1), ((2, 2, 4, 0), (1, 1)), ((2, 0, 4), 1), ((0, 2, 0, 4), 1),
                  ((2, 2, 0, 4), 2), ((2, 2, 4, 0), 0), ((2, 2, 0, 4), (0, 2)),
                  ((2, 0, 4), (None, 2)), ((0, 2, 0, 4), (1, None)), ((2, 2, 1, 0), (None, 1))]:
    CASES[f"adaptive x{_x} size {_size}"] = ("adaptive_avg_pool2d", F.adaptive_avg_pool2d,
                                              (z(*_x) + 1, _size), {})
CASES.update({    "softmax empty dim": ("softmax", F.softmax, (z(3, 0),), dict(dim=-1)),
    "softmax no rows": ("softmax", F.softmax, (z(0, 3),), dict(dim=-1)),
    "log_softmax empty dim": ("log_softmax", F.log_softmax, (z(3, 0),), dict(dim=-1)),
    "layer_norm no rows": ("layer_norm", F.layer_norm, (z(0, 4), (4,)), {}),
    "layer_norm empty shape": ("layer_norm", F.layer_norm, (z(3, 0), (0,)), {}),
    "rms_norm empty shape": ("rms_norm", F.rms_norm, (z(3, 0), (0,)), {}),
    "group_norm N=0": ("group_norm", F.group_norm, (z(0, 4, 3, 3), 2), {}),
    "group_norm C=0": ("group_norm", F.group_norm, (z(2, 0, 3, 3), 1), {}),
    "group_norm HW=0": ("group_norm", F.group_norm, (z(2, 4, 0, 3), 2), {}),
    "batch_norm N=0": ("batch_norm", F.batch_norm, (z(0, 4, 3, 3), o(4), o(4)), {}),
    "batch_norm C=0": ("batch_norm", F.batch_norm, (z(2, 0, 3, 3), z(0), z(0)), {}),
    "attention L=0": ("scaled_dot_product_attention", F.scaled_dot_product_attention,
                      (z(1, 2, 0, 4), o(1, 2, 3, 4), o(1, 2, 3, 5)), {}),
    "attention S=0": ("scaled_dot_product_attention", F.scaled_dot_product_attention,
                      (o(1, 2, 3, 4), z(1, 2, 0, 4), z(1, 2, 0, 5)), {}),
    "attention S=0 causal": ("scaled_dot_product_attention", F.scaled_dot_product_attention,
                             (o(1, 2, 3, 4), z(1, 2, 0, 4), z(1, 2, 0, 5)),
                             dict(is_causal=True)),
    "attention E=0": ("scaled_dot_product_attention", F.scaled_dot_product_attention,
                      (z(1, 2, 3, 0), z(1, 2, 3, 0), o(1, 2, 3, 5)), {}),
    "attention Ev=0": ("scaled_dot_product_attention", F.scaled_dot_product_attention,
                       (o(1, 2, 3, 4), o(1, 2, 3, 4), z(1, 2, 3, 0)), {}),
    "attention batch 0": ("scaled_dot_product_attention", F.scaled_dot_product_attention,
                          (o(0, 2, 3, 4), o(0, 2, 3, 4), o(0, 2, 3, 4)), {}),
})


def _torch(name):
    """torch's result as numpy, or None where torch refuses the call."""
    op, fn, args, kw = CASES[name]
    kw = dict(kw)
    act = kw.pop("activation", None)
    t = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    try:
        if op == "gemm":      # torch.addmm(c, a, b, beta=)
            y = torch.addmm(t[2], t[0], t[1], **kw)
        else:
            y = fn(*t, **kw)
    except RuntimeError:
        return None
    if act:
        y = {"relu": F.relu, "silu": F.silu}[act](y)
    return y.numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_empty_input_as_torch(name, backend):
    op, _, args, kw = CASES[name]
    want = _torch(name)
    if want is None:      # torch refuses: so does mpskern, naming the op and x's shape
        with pytest.raises(ValueError) as e:                      # (or the sizes that clash)
            getattr(mpskern, op)(*args, backend=backend, **kw)
        msg = str(e.value)
        assert msg.startswith(op + ":"), msg
        assert str(args[0].shape) in msg or "larger than the padded input" in msg, msg
        return
    got = getattr(mpskern, op)(*args, backend=backend, **kw)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, torch {want.shape}"
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=name)
    if op == "conv2d":    # the float64 reference agrees (tests and selftest check with it)
        assert R.conv2d(*args, **kw).shape == want.shape


def test_conv2d_no_input_channels_out_has_no_channels():
    """out= takes torch's (N, 0, P, Q); the K-channel shape is refused, naming the shape."""
    x, w, b = z(2, 0, 5, 5), o(3, 0, 3, 3), o(3)
    out = z(2, 0, 3, 3)
    assert mpskern.conv2d(x, w, b, out=out) is out
    with pytest.raises(ValueError, match=r"\(2, 0, 3, 3\)"):
        mpskern.conv2d(x, w, b, out=z(2, 3, 3, 3))
    with pytest.raises(ValueError, match="bias"):   # the bias is still checked, as torch does
        mpskern.conv2d(x, w, o(5))
