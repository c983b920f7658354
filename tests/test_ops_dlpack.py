"""Inputs that implement DLPack (`__dlpack__`: torch CPU tensors, JAX, MLX, CuPy host arrays)
are read without a copy where the exporter allows it; results stay numpy arrays. Every op of
the table is called with every array input wrapped in an object that has nothing but the
DLPack protocol (no __array__, no buffer), so a silent np.asarray fallback cannot pass."""
import numpy as np
import pytest

import mpskern as mk
from mpskern import _args
from mpskern.ops import TABLE
from mpskern.ops.op import Op

try:
    import torch
except ImportError:            # the DLPack-only wrapper needs numpy alone
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch (pip install '.[peers]')")


class DLPackOnly:
    """An array that numpy can read only through DLPack."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.mark.parametrize("name", sorted(TABLE))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_every_op_takes_dlpack_arrays(name, dtype):
    op = TABLE[name]
    for check in op.checks:
        raw = check.inputs(np.random.default_rng(3), np.dtype(dtype))
        plain = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in raw.items()}
        wrapped = {k: DLPackOnly(v.copy()) if isinstance(v, np.ndarray) else v
                   for k, v in raw.items()}
        # the public op itself (BatchNorm.call copies the statistics it returns: not here)
        call = Op.call if name == "batch_norm" else type(op).call
        want = call(op, plain, "cpu")
        got = call(op, wrapped, "cpu")
        assert type(got) is np.ndarray, (name, check.label, type(got))
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes(), (name, check.label)
        for k, v in plain.items():           # inputs updated in place (batch_norm's running
            if isinstance(v, np.ndarray):     # statistics) are updated in the DLPack array too
                assert wrapped[k]._a.tobytes() == v.tobytes(), (name, check.label, k)


@needs_torch
def test_torch_tensors_are_read_in_place_and_results_are_numpy():
    t = torch.randn(64, 32)
    a, code = _args.array(t, "x", "softmax")
    assert a.ctypes.data == t.data_ptr() and code == _args.F32          # no copy
    y = mk.softmax(t, dim=-1)
    assert type(y) is np.ndarray
    np.testing.assert_allclose(y, torch.softmax(t, -1).numpy(), rtol=1e-5, atol=1e-7)
    # a transposed (non-contiguous) tensor is read through its strides, copied to C order
    np.testing.assert_allclose(mk.softmax(t.T), torch.softmax(t.T, -1).numpy(), rtol=1e-5, atol=1e-7)
    w = torch.randn(16, 32, dtype=torch.float16)
    got = mk.linear(t.half(), w, torch.zeros(16))                      # float32 bias: the rule
    want = torch.nn.functional.linear(t.half().float(), w.float()).numpy()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batch_norm_training_updates_torch_running_stats_in_place(dtype):
    x = torch.randn(4, 3, 5, 5)
    dtype = getattr(torch, dtype)
    rm, rv = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
    rm_t, rv_t = torch.zeros(3), torch.ones(3)
    y = mk.batch_norm(x, rm, rv, training=True, momentum=0.25)
    want = torch.nn.functional.batch_norm(x, rm_t, rv_t, training=True, momentum=0.25)
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-4, atol=1e-5)
    tol = 1e-6 if dtype == torch.float32 else 2e-3
    np.testing.assert_allclose(rm.float().numpy(), rm_t.numpy(), atol=tol)
    np.testing.assert_allclose(rv.float().numpy(), rv_t.numpy(), atol=tol)
    assert float(rm.abs().max()) > 0                       # it did move


@needs_torch
@pytest.mark.parametrize("bad, match", [
    (lambda: torch.ones(3, 4, dtype=torch.float64), r"x is a Tensor of dtype float64.*\.float\(\)"),
    (lambda: torch.ones(3, 4, requires_grad=True), r"cannot read through DLPack.*detach\(\)"),
    (lambda: torch.ones(3, 4, dtype=torch.bfloat16), r"cannot read through DLPack.*float32 or float16"),
    (lambda: torch.ones(3, 4, dtype=torch.int32), r"dtype int32.*convert it first"),
])
def test_dlpack_errors_say_what_and_the_fix(bad, match):
    with pytest.raises(TypeError, match=match):
        mk.softmax(bad())


@needs_torch
def test_out_stays_numpy_and_says_how_to_write_into_a_tensor():
    t = torch.randn(8, 8)
    with pytest.raises(TypeError, match=r"out must be a numpy array, got Tensor.*np\.from_dlpack"):
        mk.softmax(t, out=torch.empty(8, 8))
    o = torch.empty(8, 8)
    mk.softmax(t, out=np.from_dlpack(o))                  # the documented way: written in place
    np.testing.assert_allclose(o.numpy(), torch.softmax(t, -1).numpy(), rtol=1e-5, atol=1e-7)
