"""Bad input: each case checks the exception type and that the message names the
argument, the offending shapes/values and the fix. None of these reach a kernel."""
import re

import numpy as np
import pytest

import mpskern

f32 = np.float32
X = np.zeros((2, 4, 8, 8), f32)
W = np.zeros((6, 4, 3, 3), f32)


def bad(exc, fn, *args, must=(), **kw):
    """Call fn expecting `exc`; every regex in `must` must occur in the message."""
    kw.setdefault("backend", "cpu")
    with pytest.raises(exc) as info:
        fn(*args, **kw)
    msg = str(info.value)
    for m in must:
        assert re.search(m, msg), f"{m!r} not in message: {msg}"
    return msg


# -- dtypes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.bool_, np.complex64])
def test_wrong_dtype_is_type_error_with_cast_hint(dtype):
    x = np.zeros((2, 3), dtype)
    bad(TypeError, mpskern.softmax, x, must=[r"\bx\b", np.dtype(dtype).name, r"astype\(np\.float32\)"])


def test_float64_hint_mentions_metal():
    bad(TypeError, mpskern.matmul, np.zeros((2, 2)), np.zeros((2, 2)),
        must=["a has dtype float64", "no double", r"a\.astype\(np\.float32\)"])


def test_mixed_dtypes():
    bad(TypeError, mpskern.matmul, np.zeros((2, 2), f32), np.zeros((2, 2), np.float16),
        must=["b has dtype float16", "a has float32", "astype"])
    bad(TypeError, mpskern.conv2d, X, W.astype(np.float16), must=["weight", "float16", "x"])


def test_float64_weight_rejected():
    bad(TypeError, mpskern.layer_norm, np.zeros((2, 4), f32), 4, np.ones(4),
        must=["weight has dtype float64", "astype"])


# -- ranks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,args", [
    (mpskern.conv2d, (np.zeros((4, 8), f32), W)),
    (mpskern.max_pool2d, (np.zeros((8, 8), f32), 2)),
    (mpskern.avg_pool2d, (np.zeros((1, 1, 1, 8, 8), f32), 2)),
    (mpskern.group_norm, (np.zeros((4,), f32), 2)),
    (mpskern.batch_norm, (np.zeros((4,), f32), None, None, None, None, True)),
])
def test_wrong_rank(fn, args):
    bad(ValueError, fn, *args, must=[r"x has shape \(", r"takes \("])


def test_conv_weight_rank():
    bad(ValueError, mpskern.conv2d, X, np.zeros((6, 4, 3), f32),
        must=[r"weight has shape \(6, 4, 3\)", r"\(K, C/groups, R, S\)"])


def test_matmul_scalar_operand():
    bad(ValueError, mpskern.matmul, np.float32(2), np.zeros(3, f32), must=["at least 1 dimension"])


def test_gemm_rank():
    bad(ValueError, mpskern.gemm, np.zeros(3, f32), np.zeros((3, 2), f32),
        must=[r"a has shape \(3,\)", "2-D", "matmul"])


# -- channels and groups --------------------------------------------------------------------
def test_channel_mismatch():
    bad(ValueError, mpskern.conv2d, X, np.zeros((6, 3, 3, 3), f32),
        must=[r"weight has shape \(6, 3, 3, 3\)", "4 channels", r"x\.shape=\(2, 4, 8, 8\)",
              "must be C/groups = 4"])


def test_groups_must_divide():
    bad(ValueError, mpskern.conv2d, X, np.zeros((6, 4, 3, 3), f32), groups=3,
        must=["groups=3", r"x\.shape\[1\]=4", r"weight\.shape\[0\]=6", "divisor"])
    bad(ValueError, mpskern.group_norm, np.zeros((2, 6, 3), f32), 4,
        must=["num_groups=4", r"x\.shape\[1\]=6", "divisor of 6"])


def test_groups_positive():
    bad(ValueError, mpskern.conv2d, X, W, groups=0, must=["groups=0", ">= 1"])


def test_per_channel_vector_shapes():
    bad(ValueError, mpskern.conv2d, X, W, np.zeros(5, f32),
        must=[r"bias has shape \(5,\)", "6 output channels", r"shape \(6,\)"])
    bad(ValueError, mpskern.batch_norm, X, np.zeros(3, f32), np.ones(4, f32),
        must=[r"running_mean has shape \(3,\)", "4 channels", r"shape \(4,\)"])
    bad(ValueError, mpskern.group_norm, X, 2, np.ones(8, f32),
        must=[r"weight has shape \(8,\)", "4 channels"])


# -- kernels, strides, padding --------------------------------------------------------------
def test_kernel_larger_than_padded_input():
    bad(ValueError, mpskern.conv2d, np.zeros((1, 4, 2, 8), f32), W,
        must=["kernel's height", r"padded input's height \(2 \+ 2\*0 = 2\)", "more padding"])
    bad(ValueError, mpskern.conv2d, np.zeros((1, 4, 5, 5), f32), W, dilation=3,
        must=["3, spanning 7 with dilation 3", "padded input"])
    bad(ValueError, mpskern.max_pool2d, np.zeros((1, 1, 2, 2), f32), 3, 1,
        must=["window's height", r"kernel_size=3\)", r"padded input's height \(2 \+ 2\*0 = 2\)"])


@pytest.mark.parametrize("fn,kw,must", [
    # a huge dilation once gave "the output would be -1073741819x-1073741819"
    (mpskern.max_pool2d, dict(kernel_size=2, dilation=2**31 - 1),
     ["window's height", "kernel_size=2, spanning 2147483648 with dilation 2147483647",
      r"\(8 \+ 2\*0 = 8\)", "smaller kernel_size or dilation"]),
    (mpskern.max_pool2d, dict(kernel_size=2, dilation=2**63 - 1), ["spanning 9223372036854775808"]),
    (mpskern.max_pool2d, dict(kernel_size=(1, 2), dilation=(1, 9)), ["window's width", "dilation 9"]),
    (mpskern.avg_pool2d, dict(kernel_size=2**31 - 1), ["kernel_size=2147483647", "smaller kernel_size,"]),
    (mpskern.avg_pool2d, dict(kernel_size=(2, 9)), ["window's width", "kernel_size=9"]),
    (mpskern.conv2d, dict(dilation=2**31 - 1), ["3, spanning 4294967295 with dilation 2147483647"]),
])
def test_huge_window_names_its_span_never_a_negative_output(fn, kw, must):
    args = (X, W) if fn is mpskern.conv2d else (X,)
    msg = bad(ValueError, fn, *args, **kw, must=must + ["larger than the padded input"])
    assert not re.search(r"-\d", msg) and "output would be" not in msg, msg


@pytest.mark.parametrize("size,shape", [
    # output_size=2**31-1 gave numpy's "array is too big" (naming nothing of ours);
    # (2**16, 2**15) allocated 8 GiB and ran a kernel that counts elements in int32
    (2**31 - 1, r"\(1, 1, 2147483647, 2147483647\)"), ((2**31 - 1, 2**20), r"\(1, 1, 2147483647, 1048576\)"),
    ((2**16, 2**15), r"\(1, 1, 65536, 32768\)"), ((None, 2**31 - 1), r"\(1, 1, 4, 2147483647\)")])
def test_adaptive_pool_result_of_2_31_elements_is_named(size, shape):
    bad(ValueError, mpskern.adaptive_avg_pool2d, np.zeros((1, 1, 4, 4), f32), size,
        must=["adaptive_avg_pool2d: the result with shape " + shape, "2\\*\\*31 elements",
              "smaller calls"])
    bad(ValueError, mpskern.adaptive_avg_pool2d, np.zeros((4, 9, 9), f32), (1, 2**29),
        must=[r"\(4, 1, 536870912\)"])           # the channels count too


@pytest.mark.parametrize("fn,kw", [
    (mpskern.max_pool2d, dict(kernel_size=2, stride=1, padding=1)),          # 9x9 -> 10x10
    (mpskern.avg_pool2d, dict(kernel_size=2, stride=1, padding=1, ceil_mode=True)),
    (mpskern.max_pool2d, dict(kernel_size=2, stride=1, padding=1, return_indices=True))])
def test_pool_result_is_checked_against_the_int32_count(fn, kw, monkeypatch):
    # a window pool's result can hold more elements than x (padding, ceil_mode); only the
    # input was checked. The limit is lowered so that a 9x9 input reaches it
    from mpskern import _args
    x = np.zeros((1, 1, 9, 9), f32)
    monkeypatch.setattr(_args, "INT32_LIMIT", 100)
    bad(ValueError, fn, x, **kw, must=[rf"{fn.__name__}: the result with shape \(1, 1, 10, 10\)",
                                       "2\\*\\*31 elements"])
    fn(x[..., :8, :8], **kw, backend="cpu")       # a result under the limit still runs


@pytest.mark.parametrize("fn,kw", [
    (mpskern.max_pool2d, dict(kernel_size=True)), (mpskern.max_pool2d, dict(kernel_size=2, stride=True)),
    (mpskern.max_pool2d, dict(kernel_size=2, padding=True)),
    (mpskern.max_pool2d, dict(kernel_size=2, dilation=(1, True))),
    (mpskern.avg_pool2d, dict(kernel_size=(True, 2))), (mpskern.conv2d, dict(stride=True)),
    (mpskern.conv2d, dict(padding=(True, 0))), (mpskern.conv2d, dict(dilation=np.True_)),
    (mpskern.softmax, dict(axis=True)), (mpskern.log_softmax, dict(dim=True)),
    (mpskern.layer_norm, dict(normalized_shape=True)), (mpskern.rms_norm, dict(normalized_shape=(8, True))),
])
def test_a_bool_is_not_a_size_or_an_axis(fn, kw):
    # torch refuses them; True once ran as 1 (kernel_size=True pooled 1x1, axis=True was axis 1)
    args = (X, W) if fn is mpskern.conv2d else (X,)
    name = list(kw)[-1].replace("dim", "axis")      # dim= is torch's name for axis=
    bad(TypeError, fn, *args, **kw, must=[name, "True"])


def test_empty_kernel_is_refused_before_the_kernel():
    # was "check_args: a->R = 0 must be > 0" from the C ABI
    for ws in ((6, 4, 0, 3), (6, 4, 3, 0)):
        bad(ValueError, mpskern.conv2d, X, np.zeros(ws, f32),
            must=[r"weight has shape \(6, 4, \d, \d\)", "empty kernel", ">= 1"])


@pytest.mark.parametrize("ws,groups", [((0, 4, 3, 3), 1), ((0, 2, 3, 3), 2), ((0, 4, 1, 1), 1)])
def test_no_output_channels_is_refused_as_torch_does(ws, groups):
    # torch: "expected weight to be at least <groups> at dimension 0"; it returned (N, 0, P, Q)
    bad(ValueError, mpskern.conv2d, X, np.zeros(ws, f32), groups=groups,
        must=[r"weight has shape \(0, \d, \d, \d\)", "no output channels", f"groups={groups}"])


@pytest.mark.parametrize("fn,kw,must", [
    (mpskern.conv2d, dict(padding=-1), ["padding must be >= 0", "-1"]),
    (mpskern.max_pool2d, dict(kernel_size=3, padding=2), ["padding=2", "more than half",
                                                          r"kernel_size // 2 = \(1, 1\)"]),
    (mpskern.avg_pool2d, dict(kernel_size=2, padding=-1), ["padding must be >= 0"]),
    (mpskern.max_pool2d, dict(kernel_size=(4, 2), padding=(2, 2)), ["more than half"]),
])
def test_bad_padding(fn, kw, must):
    args = (X, W) if fn is mpskern.conv2d else (X,)
    bad(ValueError, fn, *args, **kw, must=must)


def test_same_padding_needs_stride_one():
    bad(ValueError, mpskern.conv2d, X, W, stride=2, padding="same",
        must=["padding='same' needs stride=1", "explicit padding"])
    bad(ValueError, mpskern.conv2d, X, W, padding="full", must=["'full'", "'same' or 'valid'"])


@pytest.mark.parametrize("fn,kw,name", [
    (mpskern.max_pool2d, dict(kernel_size=0), "kernel_size"),
    (mpskern.avg_pool2d, dict(kernel_size=(2, -1)), "kernel_size"),
    (mpskern.max_pool2d, dict(kernel_size=2, stride=0), "stride"),
    (mpskern.max_pool2d, dict(kernel_size=2, dilation=0), "dilation"),
    (mpskern.conv2d, dict(stride=(1, 0)), "stride"),
    (mpskern.conv2d, dict(dilation=-2), "dilation"),
])
def test_zero_or_negative_kernel_stride(fn, kw, name):
    args = (X, W) if fn is mpskern.conv2d else (X,)
    bad(ValueError, fn, *args, **kw, must=[name, ">= 1"])


def test_pair_arguments():
    bad(ValueError, mpskern.conv2d, X, W, stride=(1, 1, 1), must=["stride", r"pair \(h, w\)"])
    bad(TypeError, mpskern.max_pool2d, X, 2.5, must=["kernel_size must be an int"])


def test_divisor_override():
    bad(ValueError, mpskern.avg_pool2d, X, 2, divisor_override=0,
        must=["divisor_override=0", ">= 1"])


# -- axes and normalized_shape --------------------------------------------------------------
@pytest.mark.parametrize("axis", [2, -3, 5])
def test_axis_out_of_range(axis):
    bad(ValueError, mpskern.softmax, np.zeros((3, 4), f32), axis,
        must=[f"axis={axis}", r"shape \(3, 4\)", r"-2\.\.1"])
    bad(ValueError, mpskern.log_softmax, np.zeros((3, 4), f32), axis, must=[f"axis={axis}"])


def test_axis_type():
    bad(TypeError, mpskern.softmax, np.zeros((3, 4), f32), 1.0, must=["axis must be an int"])


@pytest.mark.parametrize("ns", [3, (4, 4), (8, 4), (), (2, 3, 4)])
def test_normalized_shape_mismatch(ns):
    x = np.zeros((3, 4), f32)
    bad(ValueError, mpskern.layer_norm, x, ns,
        must=["normalized_shape=", r"trailing dimensions of x \(x\.shape=\(3, 4\)\)", r"x\.shape\[-k:\]"])
    bad(ValueError, mpskern.rms_norm, x, ns, must=["normalized_shape="])


def test_layer_norm_weight_shape():
    bad(ValueError, mpskern.layer_norm, np.zeros((3, 4), f32), 4, np.ones(3, f32),
        must=[r"weight has shape \(3,\)", r"normalized_shape is \(4,\)", r"shape \(4,\)"])


# -- matmul / gemm --------------------------------------------------------------------------
def test_matmul_inner_mismatch():
    bad(ValueError, mpskern.matmul, np.zeros((2, 3), f32), np.zeros((4, 5), f32),
        must=[r"a has shape \(2, 3\) \(K=3\)", r"b has shape \(4, 5\) \(K=4\)",
              r"a\.shape\[-1\] must equal b\.shape\[-2\]"])
    bad(ValueError, mpskern.matmul, np.zeros((2, 3), f32), np.zeros(4, f32),
        must=[r"b\.shape\[0\]"])


def test_matmul_batch_mismatch():
    bad(ValueError, mpskern.matmul, np.zeros((2, 3, 4), f32), np.zeros((3, 4, 5), f32),
        must=["batch dimensions", r"\(2, 3, 4\)", r"\(3, 4, 5\)", "2 vs 3", "equal or 1"])


def test_gemm_inner_mismatch_names_trans_flags():
    bad(ValueError, mpskern.gemm, np.zeros((2, 3), f32), np.zeros((2, 3), f32),
        must=["op\\(a\\) is 2x3", "op\\(b\\) is 2x3", "trans_a=False", "trans_b"])


def test_gemm_beta_without_c():
    bad(ValueError, mpskern.gemm, np.zeros((2, 3), f32), np.zeros((3, 2), f32), beta=1.0,
        must=["beta=1.0 needs c", r"shape \(2, 2\)"])


def test_gemm_c_shape():
    bad(ValueError, mpskern.gemm, np.zeros((2, 3), f32), np.zeros((3, 2), f32),
        np.zeros((3, 3), f32), beta=1.0, must=[r"c has shape \(3, 3\)", r"\(2, 2\)"])


# -- out= -----------------------------------------------------------------------------------
def test_out_wrong_shape_or_dtype():
    x = np.zeros((3, 4), f32)
    bad(ValueError, mpskern.softmax, x, out=np.empty((4, 3), f32),
        must=[r"out has shape \(4, 3\)", r"result has shape \(3, 4\)", "out=np.empty"])
    bad(ValueError, mpskern.softmax, x, out=np.empty((3, 4), np.float16),
        must=["dtype float16", "dtype float32"])
    bad(ValueError, mpskern.matmul, x, x.T, out=np.empty((4, 4), f32),
        must=[r"out has shape \(4, 4\)", r"\(3, 3\)"])
    bad(TypeError, mpskern.softmax, x, out=[0.0] * 12, must=["out must be a numpy array"])


def test_out_read_only():
    out = np.empty((3, 4), f32)
    out.flags.writeable = False
    bad(ValueError, mpskern.softmax, np.zeros((3, 4), f32), out=out, must=["out is read-only"])


# -- backends, sizes, scalars --------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpu", "CPU", "", None, ["cpu"]])
def test_unknown_backend(name):
    bad(ValueError, mpskern.softmax, np.zeros(3, f32), backend=name,
        must=["backend=", "auto, cpu, metal, mps, sim"])


def test_unavailable_backend_says_why():
    from mpskern import backends
    for name in backends.NAMES:
        ok, why = backends.availability(name)
        if not ok:
            bad(mpskern.BackendUnavailable, mpskern.softmax, np.zeros(3, f32), backend=name,
                must=[name, re.escape(why)])


def test_too_many_elements():
    x = np.lib.stride_tricks.as_strided(np.zeros(1, f32), shape=(2 ** 16, 2 ** 15), strides=(0, 0))
    x.flags.writeable = False
    # the check runs before any copy: as_strided costs no memory, a copy would (8 GiB)
    from mpskern import _args
    with pytest.raises(ValueError, match=r"x with shape \(65536, 32768\) has 2\*\*31 elements"):
        _args.check_size(x.shape, "x", "softmax")
    bad(ValueError, mpskern.matmul, np.zeros((2 ** 16, 1), f32), np.zeros((1, 2 ** 15), f32),
        must=[r"the result with shape \(65536, 32768\)", "int32", "smaller calls"])


def test_real_number_arguments():
    bad(TypeError, mpskern.gemm, np.zeros((2, 2), f32), np.zeros((2, 2), f32), alpha="x",
        must=["alpha must be a real number"])
    bad(TypeError, mpskern.layer_norm, np.zeros((2, 2), f32), 2, eps=None,
        must=["eps must be a real number"])


def test_batch_norm_arguments():
    x = np.zeros((2, 3, 4), f32)
    bad(ValueError, mpskern.batch_norm, x, None, None, must=["inference", "running_mean",
                                                              "training=True"])
    bad(ValueError, mpskern.batch_norm, x, np.zeros(3, f32), None, training=True,
        must=["both running_mean and running_var"])
    rm = np.zeros(3, f32)
    rm.flags.writeable = False
    bad(ValueError, mpskern.batch_norm, x, rm, np.ones(3, f32), training=True,
        must=["running_mean is read-only", "writable"])
    bad(ValueError, mpskern.batch_norm, np.zeros((1, 3), f32), None, None, training=True,
        must=["more than 1 value per channel", r"x\.shape=\(1, 3\)"])


def test_valid_but_unsupported_is_one_exception_type():
    """metal, sim and mps say "valid, but not here" with mpskern.Unsupported (also a
    NotImplementedError): the native MK_ERR_UNSUPPORTED status, a GPU grid larger than Metal
    allows, an op a backend lacks. Before: NotImplementedError from the native layer, a
    ValueError (a bad-argument error for a valid call) from the GPU encoders."""
    import mpskern
    from mpskern import _native, backends
    from mpskern.backends.base import Backend
    assert issubclass(mpskern.Unsupported, NotImplementedError)
    assert issubclass(mpskern.Unsupported, mpskern.MpskernError)
    ok, why = backends.availability("sim")
    if not ok:
        pytest.skip(f"sim unavailable: {why}")
    with pytest.raises(mpskern.Unsupported, match="simulator compiles MSL"):
        _native.Device("sim").library_from_source("kernel void k() {}")
    a = np.zeros((65536, 1, 1), np.float32)     # 65536 batch entries: a grid z over 65535
    with pytest.raises(mpskern.Unsupported, match="65535 threadgroups"):
        mpskern.matmul(a, a, backend="sim")
    assert mpskern.matmul(a, a, backend="cpu").shape == (65536, 1, 1)
    with pytest.raises(mpskern.Unsupported, match="no softmax kernel"):
        Backend("partial").execute("softmax", {}, 0, a, a)


@pytest.mark.parametrize("fn,args,kw", [
    (mpskern.layer_norm, (X, 8), dict(eps="1e-5")), (mpskern.rms_norm, (X, 8), dict(eps=np.str_("1"))),
    (mpskern.group_norm, (X, 2), dict(eps=b"0.1")),
    (mpskern.batch_norm, (X, np.zeros(4, f32), np.ones(4, f32)), dict(momentum="0.1", training=True)),
    (mpskern.gemm, (X[0, 0], X[0, 0]), dict(alpha="2")), (mpskern.gemm, (X[0, 0], X[0, 0], X[0, 0]), dict(beta=b"1")),
    (mpskern.scaled_dot_product_attention, (X, X, X), dict(scale="1")),
    (mpskern.layer_norm, (X, 8), dict(eps=np.array([1e-5]))),
])
def test_text_is_not_a_real_number(fn, args, kw):
    # float() parses "1e-5" and b"2": such options ran as numbers
    name = next(iter(kw))
    bad(TypeError, fn, *args, **kw, must=[f"{name} must be a real number"])
