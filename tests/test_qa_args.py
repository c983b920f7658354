"""QA regressions in the shared argument checks (mpskern/_args.py)."""
import numpy as np
import pytest

import mpskern as mk


@pytest.mark.parametrize("dt, fix", [(">f4", "x.astype(np.float32)"), (">f2", "x.astype(np.float16)")])
def test_byte_swapped_float_says_why_and_the_fix(dt, fix):
    with pytest.raises(TypeError) as e:
        mk.softmax(np.ones(3, dt), backend="cpu")
    assert "byte-swapped" in str(e.value) and fix in str(e.value)
    y = mk.softmax(np.ones(3, dt).astype(np.dtype(dt).newbyteorder("=")), backend="cpu")
    np.testing.assert_allclose(y.astype(np.float64), np.full(3, 1 / 3), rtol=1e-3)


def test_too_big_broadcast_view_is_refused_before_any_copy(monkeypatch):
    huge = np.broadcast_to(np.float32(1), (2 ** 16, 2 ** 15))   # 2**31 elements, 4 bytes held
    monkeypatch.setattr(np, "ascontiguousarray", lambda *a, **k: pytest.fail("copied first"))
    with pytest.raises(ValueError, match=r"softmax: x with shape \(65536, 32768\) has 2\*\*31"):
        mk.softmax(huge, backend="cpu")


A = np.arange(6, dtype=np.float32).reshape(2, 3)
X = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)


@pytest.mark.parametrize("call, name", [
    (lambda v: mk.gemm(A, A, trans_a=v, backend="cpu"), "trans_a"),
    (lambda v: mk.gemm(A, A.T, trans_b=v, backend="cpu"), "trans_b"),
    (lambda v: mk.max_pool2d(X, 2, ceil_mode=v, backend="cpu"), "ceil_mode"),
    (lambda v: mk.avg_pool2d(X, 2, count_include_pad=v, backend="cpu"), "count_include_pad"),
    (lambda v: mk.batch_norm(X, None, None, training=v, backend="cpu"), "training")])
@pytest.mark.parametrize("bad", [np.array([True, False]), "False", None, 2])
def test_yes_no_options_refuse_non_booleans(call, name, bad):
    """Was: numpy's 'truth value of an array is ambiguous' for an array flag, and a silent
    True for the string "False"."""
    with pytest.raises(TypeError, match=f"{name} must be True or False, got"):
        call(bad)


def test_yes_no_options_take_numpy_bools_and_0_1():
    ref = mk.gemm(A, A, trans_a=True, backend="cpu")
    for v in (np.bool_(True), 1, np.int64(1)):
        np.testing.assert_array_equal(mk.gemm(A, A, trans_a=v, backend="cpu"), ref)
    np.testing.assert_array_equal(mk.max_pool2d(X, 3, ceil_mode=np.bool_(False), backend="cpu"),
                                  mk.max_pool2d(X, 3, ceil_mode=0, backend="cpu"))


@pytest.mark.parametrize("call, name", [
    (lambda v: mk.conv2d(X, np.ones((3, 3, 1, 1), np.float32), groups=v, backend="cpu"), "groups"),
    (lambda v: mk.group_norm(X, v, backend="cpu"), "num_groups"),
    (lambda v: mk.avg_pool2d(X, 2, divisor_override=v, backend="cpu"), "divisor_override"),
    (lambda v: mk.set_num_threads(v), "n")])
@pytest.mark.parametrize("bad", [True, 2.5, "3", np.array([1, 3])])
def test_integer_options_refuse_bools_floats_strings_arrays(call, name, bad):
    """One rule for every integer option (_args.whole); was: groups=True taken as 1."""
    with pytest.raises(TypeError, match=f"{name} must be an int, got"):
        call(bad)
