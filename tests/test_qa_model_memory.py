"""`mpskern bench --model` checks memory before allocating, as op benches do: Model.footprint
estimates the weights, inputs and largest activations from the shapes alone, so a huge
--shape is one line naming the bytes and the fix (it used to be None: nothing was checked and
the weights, inputs or float64 reference were drawn until a MemoryError or an OOM kill)."""
import numpy as np
import pytest

from mpskern import memory
from mpskern.models import MODELS
from mpskern.ops.op import _ShapeRng
from test_cli_errors import _needs_line, cli

HUGE = {"resnet50": "batch=100000", "gpt2": "batch=100000", "unet-block": "batch=100000"}


@pytest.fixture
def small_memory(monkeypatch):
    """64 MiB available; drawing any real weights or inputs is the failure."""
    monkeypatch.setattr(memory, "available_bytes", lambda: 64 * 2**20)
    drawn = []
    for m in MODELS.values():
        for fn in ("params", "inputs"):
            real = getattr(m.module, fn)
            monkeypatch.setattr(m.module, fn, lambda s, rng, dtype=np.float32, real=real:
                                real(s, rng, dtype) if isinstance(rng, _ShapeRng)
                                else drawn.append(s) or 1 / 0)
    return drawn


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_huge_model_batch_is_refused_before_anything_is_allocated(small_memory, name):
    r = cli("bench", "--model", name, "--backend", "cpu", "--no-save", "--shape", HUGE[name])
    _needs_line(r, name)
    assert not small_memory


@pytest.mark.parametrize("name", sorted(MODELS))
def test_footprint_counts_at_least_the_arrays_a_small_case_draws(name):
    """The estimate covers the drawn weights, the inputs and the result in float64 too, grows
    with the batch, and the small variant fits (is not refused)."""
    m = MODELS[name]
    s = m.complete(m.small)
    inp = m.inputs(s, np.float32, np.random.default_rng(0))
    drawn = sum(a.nbytes for a in inp["params"].values()) + sum(
        inp[k].nbytes for k in m._names(inp))
    out = m.call(inp, "cpu")
    need = m.footprint(s, "float32")
    assert need >= 3 * drawn + out.size * 12, (need, drawn, out.size)
    s8 = m.complete({**m.small, "batch": 8})
    assert m.footprint(s8, "float32") > need
    m.check_memory(s, "float32")


@pytest.mark.parametrize("name, field, big", [("gpt2", "seq", 1024), ("unet-block", "size", 128)])
def test_without_torch_the_reference_attention_scores_are_counted(monkeypatch, name, field, big):
    """Without torch the float64 reference is forward() on mpskern/reference.py's ops: one
    head's attention holds ~4 float64 copies of its L x S scores (peak RSS 4.02-4.15 x at
    4096 x 4096), which the estimate left out (qa10): gpt2 seq=1024 34 MB, unet-block size=128
    (16384 tokens) 9.1 GB more than with torch."""
    from mpskern.models import model
    m = MODELS[name]
    s = m.complete({**m.small, field: big})
    monkeypatch.setattr(model, "torch_installed", lambda: True)
    with_torch = m.footprint(s, "float32")
    monkeypatch.setattr(model, "torch_installed", lambda: False)
    without = m.footprint(s, "float32")
    L = s["seq"] if name == "gpt2" else s["size"] ** 2
    assert without - with_torch >= 4.15 * 8 * L * L
    monkeypatch.setattr(memory, "available_bytes", lambda: with_torch + 16 * 2**20)
    with pytest.raises(ValueError, match="needs"):
        m.check_memory(s, "float32")


def test_the_reference_score_bound_holds_for_one_head():
    """REFERENCE_SCORE_BYTES against the reference's own peak (numpy's allocations, which
    tracemalloc sees; a child's ru_maxrss starts at its parent's on Linux)."""
    import tracemalloc
    from mpskern import reference as ref
    from mpskern.models.model import REFERENCE_SCORE_BYTES
    L = 1024
    q = np.random.default_rng(0).standard_normal((L, 64))
    for causal in (False, True):
        tracemalloc.start()
        ref.scaled_dot_product_attention(q, q, q, is_causal=causal)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert 3 * 8 * L * L < peak <= REFERENCE_SCORE_BYTES * L * L, (causal, peak / (8 * L * L))
