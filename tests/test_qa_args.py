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
