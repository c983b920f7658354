"""mpskern.set_num_threads / get_num_threads and MPSKERN_NUM_THREADS."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mpskern
from mpskern import reference


@pytest.fixture
def restore_threads():
    before = mpskern.get_num_threads()
    yield
    mpskern.set_num_threads(before)


@pytest.mark.parametrize("n", [1, 2, 3, np.int64(2)])
def test_set_num_threads_is_used_and_results_stay_right(restore_threads, n):
    mpskern.set_num_threads(n)
    assert mpskern.get_num_threads() == int(n)
    rng = np.random.default_rng(int(n))
    x = rng.standard_normal((8, 16, 20, 20)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    got = mpskern.conv2d(x, w, padding=1, backend="cpu")
    ref = reference.conv2d(x, w, padding=1)
    assert reference.max_error(got, ref) <= reference.tolerance(np.float32, 16 * 9)


def test_zero_means_one_per_core_and_counts_past_the_pool_are_refused(restore_threads):
    mpskern.set_num_threads(0)
    assert mpskern.get_num_threads() == min(os.cpu_count(), 256)
    mpskern.set_num_threads(256)
    assert mpskern.get_num_threads() == 256
    mpskern.set_num_threads(3)
    for n in (257, 10 ** 6):
        with pytest.raises(ValueError, match=f"n={n} is more than 256.*pass at most 256"):
            mpskern.set_num_threads(n)
        assert mpskern.get_num_threads() == 3


@pytest.mark.parametrize("bad, err, msg", [
    (-1, ValueError, "n=-1 must be >= 0"), (2.5, TypeError, "n must be an int"),
    ("4", TypeError, "n must be an int"), (True, TypeError, "n must be an int"),
    (None, TypeError, "n must be an int")])
def test_bad_counts_say_what_is_wrong(restore_threads, bad, err, msg):
    before = mpskern.get_num_threads()
    with pytest.raises(err, match=msg):
        mpskern.set_num_threads(bad)
    assert mpskern.get_num_threads() == before


def _threads_in_child(value):
    env = dict(os.environ, MPSKERN_NUM_THREADS=value)
    r = subprocess.run([sys.executable, "-W", "always", "-c",
                        "import mpskern; print(mpskern.get_num_threads())"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return int(r.stdout), r.stderr


def test_environment_variable_sets_the_count():
    n, err = _threads_in_child("1")
    assert n == 1 and "MPSKERN_NUM_THREADS" not in err


@pytest.mark.parametrize("value", ["abc", "-2"])
def test_a_malformed_environment_variable_is_reported(value):
    n, err = _threads_in_child(value)
    assert n == min(os.cpu_count(), 256)
    assert f"MPSKERN_NUM_THREADS={value!r} is not a whole number >= 0" in err


@pytest.mark.parametrize("value, want, msg", [
    ("4abc", None, "is not a whole number >= 0; using one thread per core"),   # atoi: 4
    ("1.5", None, "is not a whole number >= 0; using one thread per core"),    # atoi: 1
    ("99999", 256, "is more than 256, the most threads the pool runs; using 256"),
    ("99999999999", 256, "is more than 256, the most threads the pool runs; using 256"),
    (" 3 ", 3, None), ("+2", 2, None), ("256", 256, None)])
def test_the_environment_count_is_what_the_warning_says(value, want, msg):
    """Every value the C side's atoi() would read otherwise than as written is reported, and
    the count used is the one the warning names; the values it reads in full are silent."""
    n, err = _threads_in_child(value)
    assert n == (min(os.cpu_count(), 256) if want is None else want)
    if msg is None:
        assert "MPSKERN_NUM_THREADS" not in err
    else:
        assert f"MPSKERN_NUM_THREADS={value!r} {msg}" in err
