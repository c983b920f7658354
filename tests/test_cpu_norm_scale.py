"""cpu norms with huge finite values (issue 15 item 7): float32 sums of squares overflow for
|x| beyond ~1e19 (and sums near FLT_MAX), which gave Inf/NaN statistics, hence a zero or
NaN output, where the normalised output is representable. mk_cpu_norm.c redoes such a row
(group, channel) on x * 2^-e. Every path: whole rows, rows cut into segments (fewer rows
than threads), groups, batch-norm channels over several planes (and its running
statistics), against the float64 reference; ordinary rows next to a huge one are
bit-identical to their results alone (their path is unchanged); rows holding Inf or NaN
keep the reference's non-finite pattern."""
import numpy as np
import pytest

import mpskern
import refs

F32 = np.float32
BIG = 0.9 * float(np.finfo(F32).max)


@pytest.fixture(params=[1, 4], ids=["1-thread", "4-threads"])
def threads(request):
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(request.param)
    yield request.param
    mpskern.set_num_threads(old)


def _huge(rng, shape, scale):
    """Normal values times `scale`, every third one at 0.9 x FLT_MAX with its sign when
    scale is None (the sum itself overflows then)."""
    x = rng.standard_normal(shape)
    if scale is None:
        f = x.reshape(-1)
        f[::3] = np.sign(f[::3]) * BIG
        return x.astype(F32)
    return (x * scale).astype(F32)


SCALES = [1e20, 1e30, 3e37, None]
IDS = ["1e20", "1e30", "3e37", "near-max"]


@pytest.mark.parametrize("scale", SCALES, ids=IDS)
@pytest.mark.parametrize("shape", [(3, 40), (2, 20000), (1, 12289)],
                         ids=["rows", "long-rows", "one-long-row"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_rownorm_huge_rows_are_finite(threads, op, shape, scale):
    rng = np.random.default_rng(1)
    x = _huge(rng, shape, scale)
    n = shape[-1]
    w, b = rng.uniform(0.5, 1.5, n).astype(F32), rng.uniform(-1, 1, n).astype(F32)
    with np.errstate(all="ignore"):
        if op == "layer_norm":
            got, want = mpskern.layer_norm(x, n, w, b, backend="cpu"), refs.layer_norm(x, n, w, b)
        else:
            got, want = mpskern.rms_norm(x, n, w, backend="cpu"), refs.rms_norm(x, n, w)
    assert np.isfinite(got).all()
    refs.assert_close(got, want, F32, terms=n, what=f"{op} {shape} x{scale}")


@pytest.mark.parametrize("scale", SCALES, ids=IDS)
@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 7), 3), ((1, 64, 24, 24), 2)])
def test_group_norm_huge_groups_are_finite(threads, shape, groups, scale):
    rng = np.random.default_rng(2)
    x = _huge(rng, shape, scale)
    w, b = rng.uniform(0.5, 1.5, shape[1]).astype(F32), rng.uniform(-1, 1, shape[1]).astype(F32)
    with np.errstate(all="ignore"):
        got, want = mpskern.group_norm(x, groups, w, b, backend="cpu"), refs.group_norm(x, groups, w, b)
    assert np.isfinite(got).all()
    refs.assert_close(got, want, F32, terms=x[0].size // groups, what=f"group_norm x{scale}")


@pytest.mark.parametrize("scale", SCALES, ids=IDS)
def test_batch_norm_training_huge_channels_are_finite(threads, scale):
    rng = np.random.default_rng(3)
    x = _huge(rng, (4, 3, 5, 6), scale)
    x[:, 1] = rng.standard_normal((4, 5, 6)).astype(F32)      # an ordinary channel too
    rm, rv = np.zeros(3, F32), np.ones(3, F32)
    w, b = rng.uniform(0.5, 1.5, 3).astype(F32), rng.uniform(-1, 1, 3).astype(F32)
    with np.errstate(all="ignore"):
        want, wm, wv = refs.batch_norm(x, rm, rv, w, b, training=True)
        got = mpskern.batch_norm(x, rm, rv, w, b, training=True, backend="cpu")
    assert np.isfinite(got).all()
    refs.assert_close(got, want, F32, terms=4 * 30, what=f"batch_norm x{scale}")
    # the running mean is representable; the running variance may be beyond float32 (Inf)
    refs.assert_close(rm, wm, F32, terms=4 * 30, what="running_mean")
    refs.assert_close(rv, wv, F32, terms=4 * 30, what="running_var")


@pytest.mark.parametrize("shape", [(4, 40), (3, 20000)], ids=["rows", "long-rows"])
def test_ordinary_rows_next_to_a_huge_one_are_unchanged(threads, shape):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(F32)
    before = mpskern.layer_norm(x, shape[-1], backend="cpu")
    x[0] *= F32(1e30)            # the same call (same rows, same cuts) with row 0 huge
    got = mpskern.layer_norm(x, shape[-1], backend="cpu")
    assert np.array_equal(got[1:], before[1:])
    refs.assert_close(got[:1], refs.layer_norm(x[:1], shape[-1]), F32, terms=shape[-1])


@pytest.mark.parametrize("special", [np.inf, np.nan])
def test_huge_rows_with_a_non_finite_value_keep_the_reference_pattern(threads, special):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 20000)) * 1e30).astype(F32)
    x[:, 7] = special
    with np.errstate(all="ignore"):
        for op in ("layer_norm", "rms_norm"):
            got = getattr(mpskern, op)(x, 20000, backend="cpu")
            refs.assert_close(got, getattr(refs, op)(x, 20000), F32, terms=20000, what=op)
