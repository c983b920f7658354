"""The one step-down rule of the GPU encoders (mpskern/backends/gpu/context.py): Metal may
give a compiled pipeline fewer threads per threadgroup (maxTotalThreadsPerThreadgroup) than
the device maximum the configuration choice assumed. For any such limit >= 32 every op must
then run with threadgroups its pipelines allow, and still be right; a pinned configuration
that does not fit is refused with the reason.

The limit is imposed here by a Context whose pipelines report at most LIMIT threads (the
real simulator pipelines still run): the dispatches are checked against it before they run.
Row ops raised "the compiled pipeline allows ..." before, and gemm's split-K reduction ran
256 threads on a pipeline that allowed fewer."""
import numpy as np
import pytest

import mpskern
import refs
from mpskern import _native
from mpskern.backends.gpu.context import Context
from simtools import sim  # noqa: F401  (fixture)


class _Capped:
    """A compiled pipeline that reports at most `limit` threads per threadgroup."""

    def __init__(self, real, limit):
        self.real, self.name = real, real.name
        self.max_threads = min(real.max_threads or limit, limit)


class LimitedContext(Context):
    __slots__ = ("limit", "seen")

    def __init__(self, kind, limit):
        super().__init__(kind)
        self.limit, self.seen = limit, []

    def compiled(self, kernel, file=None, macros=None, **kw):
        return _Capped(super().compiled(kernel, file, macros, **kw), self.limit)

    def submit(self, dispatches, record=None, outputs=(), time_limit=None):
        for d in dispatches:
            tg = d["threadgroup"][0] * d["threadgroup"][1] * d["threadgroup"][2]
            assert tg <= d["pipeline"].max_threads, (d["pipeline"].name, tg, self.limit)
            self.seen.append((d["pipeline"].name, tg))
        real = [dict(d, pipeline=d["pipeline"].real) for d in dispatches]
        return super().submit(real, record, outputs, time_limit)


@pytest.fixture(params=[256, 64, 32])
def limited(sim, request, monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(tmp_path / "none.json"))
    ctx = LimitedContext("sim", request.param)
    monkeypatch.setattr(sim, "_ctx", ctx)
    return ctx


def _rand(rng, shape, dtype=np.float32, lo=-1.0, hi=1.0):
    return refs.rand(shape, dtype, rng, lo, hi)


def _cases(rng):
    """(name, call(backend), float64 reference, terms per output): every op, at shapes
    whose default configuration needs more than 64 threads (the split-K gemm more than 32)."""
    a, b = _rand(rng, (40, 70)), _rand(rng, (70, 90))
    ka, kb = _rand(rng, (8, 2048)), _rand(rng, (2048, 8))        # split-K: few tiles, long K
    x = _rand(rng, (2, 8, 12, 12))
    w = _rand(rng, (16, 8, 3, 3))
    wd = _rand(rng, (8, 1, 3, 3))
    rows = _rand(rng, (3, 2000), lo=-4, hi=4)
    cols = _rand(rng, (4, 5, 300), lo=-4, hi=4)
    v = rng.uniform(0.5, 1.5, 2000).astype(np.float32)
    c8 = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    gx = _rand(rng, (2, 8, 40, 40))
    m, var = rng.uniform(-1, 1, 8).astype(np.float32), rng.uniform(0.5, 2, 8).astype(np.float32)

    def bn_training(be):
        rm, rv = m.copy(), var.copy()
        y = mpskern.batch_norm(gx, rm, rv, c8, c8, training=True, backend=be)
        return np.concatenate([y.ravel(), rm, rv])
    y_bn, rm_bn, rv_bn = refs.batch_norm(gx, m, var, c8, c8, True, 0.1, 1e-5)
    return [
        ("matmul", lambda be: mpskern.matmul(a, b, backend=be), refs.matmul(a, b), 70),
        ("matmul split-K", lambda be: mpskern.matmul(ka, kb, backend=be), refs.matmul(ka, kb),
         2048),
        ("conv2d", lambda be: mpskern.conv2d(x, w, padding=1, backend=be),
         refs.conv2d(x, w, None, 1, 1), 72),
        ("conv2d depthwise", lambda be: mpskern.conv2d(x, wd, padding=1, groups=8, backend=be),
         refs.conv2d(x, wd, None, 1, 1, 1, 8), 9),
        ("max_pool2d", lambda be: mpskern.max_pool2d(gx, 3, 1, 1, backend=be),
         refs.max_pool2d(gx, 3, 1, 1), 1),
        ("softmax rows", lambda be: mpskern.softmax(rows, backend=be), refs.softmax(rows), 2000),
        ("softmax cols", lambda be: mpskern.log_softmax(cols, axis=0, backend=be),
         refs.log_softmax(cols, axis=0), 4),
        ("layer_norm", lambda be: mpskern.layer_norm(rows, 2000, v, v, backend=be),
         refs.layer_norm(rows, 2000, v, v, 1e-5), 2000),
        ("group_norm", lambda be: mpskern.group_norm(gx, 2, c8, c8, backend=be),
         refs.group_norm(gx, 2, c8, c8, 1e-5), 6400),
        ("batch_norm", lambda be: mpskern.batch_norm(gx, m, var, c8, c8, backend=be),
         refs.batch_norm(gx, m, var, c8, c8, False, 0.1, 1e-5)[0], 1),
        ("batch_norm training", bn_training,
         np.concatenate([y_bn.ravel(), rm_bn, rv_bn]), 3200),
    ]


def test_every_op_steps_down_to_the_pipeline_limit(sim, limited):
    for name, call, ref, terms in _cases(np.random.default_rng(0)):
        limited.seen.clear()
        got = call("sim")
        refs.assert_close(got, ref, np.float32, terms=terms, what=f"{name} at {limited.limit}")
        assert limited.seen, name
        assert all(tg <= limited.limit for _, tg in limited.seen), (name, limited.seen)
        if limited.limit <= 64:
            assert sim.last_config.get("level") == "generic", (name, sim.last_config)


def test_a_pinned_configuration_that_does_not_fit_is_refused(sim, monkeypatch):
    monkeypatch.setattr(sim, "_ctx", LimitedContext("sim", 64))
    x = np.zeros((2, 300), np.float32)
    args = {"outer": 2, "n": 300, "inner": 1, "log": 0}
    with pytest.raises(ValueError, match="softmax_rows_f32 runs 256 threads per threadgroup "
                                         "> the pipeline's 64"):
        sim.execute("softmax", args, _native.F32, x, x.copy(),
                    config={"variant": "rows", "TPR": 256, "RPG": 1, "VPT": 8})
