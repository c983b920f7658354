"""The kernel families on the Python side (mpskern/backends/family.py): every row of the native
op table (metal/mk_args.h's MK_KERNELS) has one family, declared beside its public op, that
the GPU backends run through encode(); nothing registers it elsewhere, and a program that
only runs on the CPU never imports the GPU path."""
import subprocess
import sys

import numpy as np
import pytest

import mpskern
from mpskern import _native, backends
from mpskern._errors import Unsupported
from mpskern.backends import family


def test_every_native_row_has_one_family():
    assert sorted(family._FAMILIES) == sorted(_native.OPS)
    for name, fam in family._FAMILIES.items():
        assert fam.name == name and type(fam).encode is not family.Family.encode, name
        assert type(fam).__module__.startswith("mpskern.ops."), name   # beside its public op


def test_a_family_is_declared_once():
    with pytest.raises(TypeError, match="'softmax' is declared twice"):
        type("Again", (family.Family,), {"name": "softmax"})
    assert family.get("softmax").__class__.__name__ == "SoftmaxFamily"


def test_the_gpu_backend_runs_a_family_and_refuses_an_unknown_kernel():
    sim = backends.get("sim")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.empty_like(x)
    sim.execute("softmax", dict(outer=3, n=4, inner=1, log=0), _native.F32, x, y)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)
    with pytest.raises(Unsupported, match="backend 'sim' has no nope kernel; use backend='cpu'"):
        sim.execute("nope", {}, _native.F32, x, y)


def _loaded_after(calls):
    code = ("import sys, numpy as np, mpskern\n" + calls +
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('mpskern.backends.gpu', "
            "'mpskern.tuning', 'mpskern.sim')))))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.split()


def test_a_cpu_program_never_loads_the_gpu_path():
    assert _loaded_after("mpskern.softmax(np.ones((2, 3), np.float32), backend='cpu')\n"
                         "mpskern.conv2d(np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), "
                         "np.float32), backend='cpu')\n") == []
    if mpskern.backends.availability("metal")[0]:
        return
    # backend='auto' asks the metal backend whether it is available (gpu/backend.py, its
    # Context): no encoder, no simulator, is loaded for that
    loaded = _loaded_after("mpskern.softmax(np.ones((2, 3), np.float32))\n")
    encoders = {f"mpskern.backends.gpu.{m}" for m in ("gemm", "conv2d", "pool", "softmax", "norm",
                                                      "attention", "rows")}
    assert "mpskern.backends.gpu.backend" in loaded and not encoders & set(loaded), loaded
    assert not [m for m in loaded if m.startswith("mpskern.sim")], loaded


def test_the_tuning_registry_reads_the_spaces_a_family_declares(monkeypatch):
    """A family's encoder declares its space (attention: backends/gpu/attention.py); the
    registry finds it through Family.spaces() on its first lookup, with no line of its own."""
    from mpskern.backends.gpu import attention as gpu_attention
    from mpskern.tuning import spaces
    assert spaces.SPACES["attention"] is gpu_attention.SPACES["attention"]
    assert spaces.space("attention").file == "attention.metal"
    mine = gpu_attention.SPACES["attention"]
    monkeypatch.setattr(family, "_FAMILIES", {**family._FAMILIES})   # the real one stays as it is

    class Scale(family.Family):
        name = "scale_for_this_test"

        def spaces(self):
            return {"scale": mine}

    registry = spaces._Registry()
    assert registry["scale"] is mine and "attention" in registry and "gemm" in registry
    assert [n for n in registry if n != "scale"] == list(spaces.SPACES)
