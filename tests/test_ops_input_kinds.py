"""What an op says when an operand is not a float32/float16 numpy array (issue 15 item 13):
None, a Python list of floats (numpy would make it float64), strings and other objects,
ragged lists, and masked arrays (refused: the kernels would silently ignore the mask).
Every message names the operand, says what it is and gives the fix; the checks live in
mpskern/_args.py, so every op and every array operand (x, weight, bias, running stats)
says the same."""
import numpy as np
import pytest

import mpskern

f32 = np.float32
X = np.ones((2, 3, 4, 4), f32)
W = np.ones((2, 3, 3, 3), f32)
V3 = np.ones(3, f32)
Q = np.ones((1, 2, 4, 8), f32)

# id -> (call taking the operand, its name, a valid value of it, whether it is required)
SITES = {
    "softmax x": (lambda v: mpskern.softmax(v, backend="cpu"), "x", X, True),
    "matmul a": (lambda v: mpskern.matmul(v, np.ones((3, 2), f32), backend="cpu"), "a",
                 np.ones((2, 3), f32), True),
    "conv2d weight": (lambda v: mpskern.conv2d(X, v, backend="cpu"), "weight", W, True),
    "conv2d bias": (lambda v: mpskern.conv2d(X, W, v, backend="cpu"), "bias",
                    np.ones(2, f32), False),
    "layer_norm weight": (lambda v: mpskern.layer_norm(np.ones((2, 3), f32), 3, v,
                                                       backend="cpu"), "weight", V3, False),
    "batch_norm running_mean": (lambda v: mpskern.batch_norm(X, v, V3, backend="cpu"),
                                "running_mean", np.zeros(3, f32), False),
    "max_pool2d x": (lambda v: mpskern.max_pool2d(v, 2, backend="cpu"), "x", X, True),
    # the ops and arguments added after the sweep (issue 15: the classes hold for them too)
    "max_pool2d(return_indices) x": (lambda v: mpskern.max_pool2d(v, 2, return_indices=True,
                                                                  backend="cpu"), "x", X, True),
    "adaptive_avg_pool2d x": (lambda v: mpskern.adaptive_avg_pool2d(v, 2, backend="cpu"), "x", X, True),
    "gemm c": (lambda v: mpskern.gemm(np.ones((2, 3), f32), np.ones((3, 2), f32), v,
                                      activation="relu", backend="cpu"), "c", np.ones((2, 2), f32), False),
    "linear bias": (lambda v: mpskern.linear(np.ones((2, 3), f32), np.ones((4, 3), f32), v,
                                             activation="gelu", backend="cpu"), "bias", np.ones(4, f32), False),
    "attention query": (lambda v: mpskern.scaled_dot_product_attention(v, Q, Q, backend="cpu"),
                        "query", np.ones((1, 2, 4, 8), f32), True),
    "attention key": (lambda v: mpskern.scaled_dot_product_attention(Q, v, Q, backend="cpu"),
                      "key", np.ones((1, 2, 4, 8), f32), True),
    "attention value": (lambda v: mpskern.scaled_dot_product_attention(Q, Q, v, backend="cpu"),
                        "value", np.ones((1, 2, 4, 8), f32), True),
}


@pytest.mark.parametrize("site", [k for k, v in SITES.items() if v[3]])
def test_none_is_named_not_called_an_object_dtype(site):
    call, name, _, _ = SITES[site]
    with pytest.raises(TypeError) as e:
        call(None)
    msg = str(e.value)
    assert f"{name} is None" in msg and "dtype object" not in msg and "astype" not in msg, msg


@pytest.mark.parametrize("site", list(SITES))
def test_a_list_of_floats_is_told_to_use_asarray(site):
    call, name, good, _ = SITES[site]
    with pytest.raises(TypeError) as e:
        call(good.astype(np.float64).tolist())
    msg = str(e.value)
    assert f"{name} is a list" in msg and f"np.asarray({name}, dtype=np.float32)" in msg, msg
    assert ".astype" not in msg


@pytest.mark.parametrize("site", list(SITES))
def test_masked_arrays_are_refused(site):
    call, name, good, _ = SITES[site]
    m = np.ma.masked_array(good.copy(), mask=np.zeros(good.shape, bool))
    m.mask.flat[0] = True
    with pytest.raises(TypeError, match=rf"{name} is a masked array; .*{name}\.filled\(value\)"):
        call(m)
    call(good)                        # the same operand unmasked is fine


@pytest.mark.parametrize("mask", [np.zeros((4, 4), f32), np.ones((4, 4), bool)], ids=["float", "bool"])
def test_a_masked_attn_mask_is_refused(mask):
    """attn_mask is a mask of its own (bool or float): a numpy masked array's mask on top of
    it would be ignored (before: the kernels used the data and dropped the mask)."""
    m = np.ma.masked_array(mask, mask=np.eye(4, dtype=bool))
    with pytest.raises(TypeError, match=r"attn_mask is a masked array; .*attn_mask\.filled\(value\)"):
        mpskern.scaled_dot_product_attention(Q, Q, Q, attn_mask=m, backend="cpu")
    mpskern.scaled_dot_product_attention(Q, Q, Q, attn_mask=mask, backend="cpu")


@pytest.mark.parametrize("bad,says", [("abc", "a str, not an array of numbers"),
                                      (object(), "an object, not an array of numbers"),
                                      ([1.0, "a"], "a list, not an array of numbers"),
                                      ([[1.0], [2.0, 3.0]], "a list, not an array ("),
                                      ([1, 2], "a list, not a numpy array (as one it would be int64)")])
def test_other_non_arrays_say_what_they_are(bad, says):
    with pytest.raises(TypeError) as e:
        mpskern.softmax(bad, backend="cpu")
    assert f"softmax: x is {says}" in str(e.value), str(e.value)


def test_float32_lists_and_plain_arrays_still_work():
    """The slow branch only refuses: a list of float32 scalars is a float32 array."""
    got = mpskern.softmax([f32(0), f32(0)], backend="cpu")
    assert got.dtype == f32 and np.allclose(got, 0.5)
    assert mpskern.softmax(np.zeros(2, f32), backend="cpu").dtype == f32
