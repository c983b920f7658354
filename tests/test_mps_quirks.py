"""Known MPSGraph bugs by macOS version (mpskern/backends/mps_quirks.py): backend "mps"
routes the affected conv2d cases to mpskern's own Metal kernels. The version table and
the routing are checked here (the routed-to backend replaced by the simulator, which runs
the same kernels and encoders; MPS's native layer by test_mps_math's numpy emulation)."""
import numpy as np
import pytest

import mpskern
from mpskern import backends
from mpskern.backends import mps_quirks as mq
from test_mps_math import EmulatedShim, cmath, mps  # noqa: F401  (fixtures)


def conv_args(**kw):
    a = dict(N=2, C=4, H=8, W=8, K=8, R=3, S=3, P=6, Q=6, stride_h=1, stride_w=1, pad_h=0, pad_w=0,
             dil_h=1, dil_w=1, groups=1, has_bias=0)
    a.update(kw)
    return a


@pytest.mark.parametrize("name,args,dtype,versions", [
    ("grouped-conv-batch-fp32", conv_args(groups=4, N=2, R=256, H=300), 0, [(12, 0), (14, 5), (26, 1)]),
    ("conv-out-channels-65536", conv_args(K=65537), 1, [(13, 0), (15, 1), (26, 0)]),
    ("conv-uneven-strides", conv_args(stride_h=1, stride_w=2), 0, [(12, 0), (12, 5)]),
])
def test_each_quirk_applies_where_and_when_it_is_known(name, args, dtype, versions):
    for v in versions:
        q = mq.conv2d_quirk(args, dtype, v)
        assert q is not None and q.name == name and q.links, (name, v)
    assert mq.conv2d_quirk(conv_args(), dtype, versions[0]) is None      # an ordinary conv: MPSGraph


def test_quirk_boundaries():
    assert mq.conv2d_quirk(conv_args(stride_w=2), 0, (13, 0)) is None       # fixed on macOS 13
    assert mq.conv2d_quirk(conv_args(groups=4, R=256, H=300), 1, (14, 0)) is None   # float16: correct
    assert mq.conv2d_quirk(conv_args(groups=4, R=256, H=300, N=1), 0, (14, 0)) is None  # batch 1: correct
    assert mq.conv2d_quirk(conv_args(groups=4, R=255, H=300), 0, (14, 0)) is None
    assert mq.conv2d_quirk(conv_args(K=65536), 0, (14, 0)) is None
    if mq.macos_version() is None:                                         # off macOS: nothing routed
        assert mq.active() == [] and mq.conv2d_quirk(conv_args(K=65537), 0) is None


def test_versions_summary_and_switch(monkeypatch):
    assert mq.macos_version("15.1.1") == (15, 1) and mq.macos_version("26") == (26, 0)
    assert mq.macos_version("") is None
    assert [q.name for q in mq.active((12, 5))] == [q.name for q in mq.QUIRKS]
    assert "conv-uneven-strides" not in mq.summary((14, 0)) and "grouped-conv-batch-fp32" in mq.summary((14, 0))
    monkeypatch.setenv("MPSKERN_MPS_QUIRKS", "0")
    assert mq.active((12, 5)) == [] and mq.summary((12, 5)) == ""


def test_mps_routes_an_affected_conv2d_to_mpskerns_kernels(mps, monkeypatch):
    if not backends.availability("sim")[0]:
        pytest.skip("needs the simulator")
    monkeypatch.setattr(mq, "macos_version", lambda text=None: (12, 5))
    monkeypatch.setattr(mps, "routed_to", lambda: backends.get("sim"))
    calls = []
    real = mps.native.mps_conv2d
    monkeypatch.setattr(mps.native, "mps_conv2d", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    want = mpskern.conv2d(x, w, stride=(1, 2), backend="cpu")
    got = mpskern.conv2d(x, w, stride=(1, 2), backend="mps")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert calls == []                                               # MPSGraph never saw it
    assert "MPSGraph bug conv-uneven-strides" in mps.last_config["primitive"]
    mpskern.conv2d(x, w, stride=2, backend="mps")                     # even strides: MPSGraph's
    assert calls == [1] and mps.last_config["primitive"] == "MPSGraph convolution2D"
    monkeypatch.setattr(mq, "macos_version", lambda text=None: (13, 0))
    mpskern.conv2d(x, w, stride=(1, 2), backend="mps")               # fixed there
    assert calls == [1, 1]
