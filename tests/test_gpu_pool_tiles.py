"""The pool kernels' tiles (metal/mk_pool_tile.h, chosen by mpskern/backends/gpu/pool.py's
`tile`): measured by the simulator's profiling mode, every kernel (max, avg, max with
indices, adaptive average) x dtype reads its input with vector loads whose SIMD-groups fill
whole 128-byte lines (issue 16: >= 90% of device loads at vector width, coalescing >= 90%;
the one-thread-per-output kernels before had 0% and 3-68%), with no integer division in a
loop; and the tiles' seams give the references' results exactly: row blocks with halo
rows and a partial last block, several planes per threadgroup with a partial last group,
windows wider than the stage (read directly), any threadgroup size, under the checking
mode and in both fiber orders."""
import contextlib

import numpy as np
import pytest

import mpskern
import refs
from simtools import in_both_orders, sim, sim_mode  # noqa: F401  (sim: a fixture)
from mpskern import reference as R
from mpskern.backends.gpu import pool as gpu_pool
from mpskern.profiling import profiling
from mpskern.sim import profile_build
from mpskern.tuning import lookup

# (x shape, max/avg_pool2d keywords): the profiled cases (k2s2, k3s2p1 with row blocks,
# k3s1 with padding, a global window over several planes per threadgroup)
PROFILED = [((1, 16, 32, 32), dict(kernel_size=2, stride=2)),
            ((1, 4, 112, 112), dict(kernel_size=3, stride=2, padding=1)),
            ((1, 64, 14, 14), dict(kernel_size=3, stride=1, padding=1)),
            ((2, 256, 7, 7), dict(kernel_size=7))]
KERNELS = {
    "max": lambda x, p: mpskern.max_pool2d(x, **p, backend="sim"),
    "avg": lambda x, p: mpskern.avg_pool2d(x, **p, backend="sim"),
    "max_indices": lambda x, p: mpskern.max_pool2d(x, **p, return_indices=True, backend="sim"),
    "adaptive": lambda x, p: mpskern.adaptive_avg_pool2d(x, 1 if p["kernel_size"] == 7 else 5,
                                                         backend="sim"),
}


@pytest.mark.skipif(profile_build.clang()[0] is None, reason="profiling needs clang")
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_pool_loads_are_vectors_that_fill_lines(sim, kernel, dtype):
    for shape, p in PROFILED:
        x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
        with profiling(max_groups=16, sampled_only=True) as prof:
            KERNELS[kernel](x, p)
        (d,) = prof.dispatches
        where = (kernel, shape, p, np.dtype(dtype).name, d["kernel"])
        load = d["device"]["load"]
        assert load["vector"] >= 0.9 and load["coalescing"] >= 0.9, (where, load)
        assert d["int_div"]["in_loops"] == 0, (where, d["int_div"])


# (x shape, kernel, stride, padding, dilation, ceil_mode): each names the seam it crosses
SEAMS = [((1, 2, 150, 40), (3, 3), (2, 2), (1, 1), (1, 1), True),   # row blocks + halos
         ((1, 1, 90, 50), (3, 2), (3, 1), (1, 0), (2, 1), False),   # dilated halos
         ((7, 13, 5, 6), (2, 2), (2, 2), (0, 0), (1, 1), True),     # planes per group
         ((1, 1, 4, 4200), (2, 3), (1, 2), (0, 1), (1, 1), False)]  # wider than the stage


def test_the_seams_take_each_tiling():
    """The SEAMS shapes reach the tilings they are meant for (cores: an M2's 10)."""
    got = []
    for shape, k, s, p, d, ceil in SEAMS:
        ref = R.max_pool2d(np.zeros(shape, np.float32), k, s, p, d, ceil)
        args = dict(N=shape[0], C=shape[1], H=shape[2], W=shape[3], P=ref.shape[2],
                    Q=ref.shape[3], kh=k[0], stride_h=s[0], pad_h=p[0], dil_h=d[0])
        got.append(gpu_pool.tile(args, "max", 256, 10))
    assert got[0]["staged"] == got[1]["staged"] == 1
    for t, (shape, *_) in zip(got[:2], SEAMS):
        assert t["NP"] == 1 and t["TP"] < shape[2] // 3, t          # several row blocks
    assert got[2]["NP"] > 1 and (7 * 13) % got[2]["NP"], got[2]    # a partial last group
    assert got[3]["staged"] == 0, got[3]


def _seams(dtype, threads, rng):
    outs = []
    for shape, k, s, p, d, ceil in SEAMS:
        x = refs.rand(shape, dtype, rng, -3, 3)
        x.flat[rng.integers(0, x.size, 3)] = np.nan
        kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil)
        with contextlib.ExitStack() as pinned:
            for op, variant in (("pool2d", "direct"), ("pool2d_indices", "max"),
                                ("adaptive_pool2d", "avg")):
                pinned.enter_context(lookup.forced(op, {"variant": variant, "threads": threads}))
            y, i = mpskern.max_pool2d(x, **kw, dilation=d, return_indices=True, backend="sim")
            ym = mpskern.max_pool2d(x, **kw, dilation=d, backend="sim")
            ya = mpskern.avg_pool2d(x, **kw, count_include_pad=False, backend="sim")
            yd = mpskern.adaptive_avg_pool2d(x, (shape[2] // 3 + 1, shape[3] // 2 + 1),
                                             backend="sim")
        ry, ri = R.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
        np.testing.assert_array_equal(y, ry.astype(dtype), err_msg=f"{shape} values")
        np.testing.assert_array_equal(i, ri, err_msg=f"{shape} indices")
        np.testing.assert_array_equal(ym, ry.astype(dtype), err_msg=f"{shape} max")
        refs.assert_close(ya, R.avg_pool2d(x, k, s, p, ceil, False), dtype, terms=k[0] * k[1],
                          what=f"avg {shape}")
        refs.assert_close(yd, R.adaptive_avg_pool2d(x, yd.shape[2:]), dtype, terms=12,
                          what=f"adaptive {shape}")
        outs += [y, i, ym, ya, yd]
    return outs


@pytest.mark.parametrize("threads", [32, 256, 1024])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_tile_seams_match_the_references(sim, dtype, threads):
    in_both_orders(sim, lambda: _seams(dtype, threads, np.random.default_rng(3)))


def test_tile_seams_checking_mode_is_clean(sim):
    with sim_mode(sim, "random", check=True):
        _seams(np.float16, 64, np.random.default_rng(4))
