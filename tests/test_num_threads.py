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
    return subprocess.run([sys.executable, "-W", "always", "-c",
                           "import mpskern; print(mpskern.get_num_threads())"],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value, want", [("1", 1), (" 3 ", 3), ("+2", 2), ("256", 256),
                                         ("0", None), ("", None)])
def test_environment_variable_sets_the_count(value, want):
    """The values the C side's atoi() reads in full, read as written."""
    r = _threads_in_child(value)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert int(r.stdout) == (min(os.cpu_count(), 256) if want is None else want)


@pytest.mark.parametrize("value", ["abc", "-2", "4abc", "1.5", "257", "99999999999"])
def test_a_malformed_environment_variable_is_refused(value):
    """atoi() would read 'abc'/'-2' as 0 (one per core), '4abc' as 4, 1.5 as 1 and
    99999999999 as what its int wraps to: import refuses each (mpskern/env.py; once a
    warning and a count of its own)."""
    r = _threads_in_child(value)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().endswith(f"EnvError: MPSKERN_NUM_THREADS={value!r}: expected a "
                                     "whole number of threads from 0 to 256 (0: one per core)")
