"""Findings of the simulator's checking mode as data: mpskern.KernelCheckError's fields
(kind, kernel, file, line, lines, threads, buffer, offset) for each kind of planted bug,
beside the message; and a missing barrier reported as one -- "no barrier between the write
at F:12 ... and the read at F:15" -- also where the read comes first and finds memory nobody
has written yet (it used to be reported as an uninitialised read). A read that nobody
writes before the next barrier stays an uninitialised read."""
import pickle

import numpy as np
import pytest
from simtools import BUG_ARGS, BUG_HEAD

import mpskern
from mpskern import sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

HEAD, ARGS = BUG_HEAD, BUG_ARGS

BUGS = {
    # the textbook missing barrier: thread i reads what thread i+1 writes; the reader runs first
    "no_barrier": """
    threadgroup float t[64];
    t[i] = x[g];                       // WRITE
    y[g] = t[(i + 1) % 64];            // READ
""",
    "no_barrier_after_init": """
    threadgroup float t[64];
    t[i] = 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    t[i] = x[g];                       // WRITE
    y[g] = t[(i + 1) % 64];            // READ
""",
    "uninitialised": """
    threadgroup float t[64];
    float v = t[(i + 1) % 64];         // READ
    threadgroup_barrier(mem_flags::mem_threadgroup);
    t[i] = x[g];
    y[g] = v;
""",
    "uninitialised_no_barrier": """
    threadgroup float t[64];
    y[g] = t[i];                       // READ
""",
    "out_of_bounds": """
    y[g] = x[g + 1];                   // READ
""",
    "cross_group_race": """
    if (i == 0) y[0] = float(tg);      // WRITE
""",
    "early_return": """
    threadgroup float t[64];
    if (i == 5) return;
    t[i] = x[g];
    threadgroup_barrier(mem_flags::mem_threadgroup);   // BARRIER
    y[g] = t[63 - i];
""",
}


def _source(name):
    return HEAD + f"kernel void {name}({ARGS}) {{{BUGS[name]}}}\n"


def _line(src, marker):
    return next(n for n, ln in enumerate(src.splitlines(), 1) if marker in ln)


def _finding(name, order="forward"):
    from mpskern import backends
    be = backends.get("sim")
    be.set_sim_options(order=order, seed=3)
    try:
        with pytest.raises(mpskern.KernelCheckError) as e:
            mpskern.metal_kernel(_source(name), name)(
                np.arange(128, dtype=np.float32), np.zeros(128, np.float32),
                grid=(128,), threadgroup=(64,), backend="sim", check=True)
    finally:
        be.set_sim_options()
    return e.value


@pytest.mark.parametrize("order", ["forward", "reverse", "random"])
@pytest.mark.parametrize("name", ["no_barrier", "no_barrier_after_init"])
def test_a_missing_barrier_is_named_with_both_lines(name, order):
    e = _finding(name, order)
    src, f = _source(name), f"<metal_kernel {name}>"
    w, r = _line(src, "WRITE"), _line(src, "READ")
    msg = str(e)
    assert f"no barrier between the write at {f}:{w}" in msg and f"and the read at {f}:{r}" in msg, msg
    assert e.kind == "missing_barrier" and e.kernel == name
    assert (e.file, e.line) == (f, w) and e.lines == [(f, w), (f, r)]
    assert e.buffer == "threadgroup" and e.offset % 4 == 0 and 0 <= e.offset < 32768   # in the arena
    (t1, g1), (t2, g2) = e.threads
    assert g1 == g2 and t1 != t2                      # two threads of one threadgroup


@pytest.mark.parametrize("name", ["uninitialised", "uninitialised_no_barrier"])
def test_an_unwritten_read_is_still_an_uninitialised_read(name):
    e = _finding(name)
    f = f"<metal_kernel {name}>"
    assert e.kind == "uninitialised_read", str(e)
    assert "read of uninitialised threadgroup memory" in str(e)
    assert (e.file, e.line) == (f, _line(_source(name), "READ")) and e.buffer == "threadgroup"
    assert len(e.threads) == 1


def test_out_of_bounds_fields():
    e = _finding("out_of_bounds")
    assert e.kind == "out_of_bounds" and e.kernel == "out_of_bounds"
    assert e.line == _line(_source("out_of_bounds"), "READ")
    assert e.buffer == 0 and e.offset == 512                  # one float past 128
    assert e.threads == [((63, 0, 0), (1, 0, 0))]


def test_cross_threadgroup_race_fields():
    e = _finding("cross_group_race")
    assert e.kind == "race" and e.buffer == 1 and e.offset == 0
    assert {g for _, g in e.threads} == {(0, 0, 0), (1, 0, 0)}
    assert "by two threadgroups" in str(e)


def test_barrier_divergence_fields():
    e = _finding("early_return")
    assert e.kind == "barrier_divergence" and e.kernel == "early_return"
    assert e.line == _line(_source("early_return"), "BARRIER")
    assert ((5, 0, 0), (0, 0, 0)) in e.threads and e.buffer is None


def test_fields_survive_pickling_and_the_message_is_kept():
    e = _finding("out_of_bounds")
    e2 = pickle.loads(pickle.dumps(e))
    assert str(e2) == str(e) and (e2.kind, e2.line, e2.buffer, e2.offset) == (e.kind, e.line, 0, 512)
    assert mpskern.KernelCheckError("something else").kind == "other"
