"""Row ops at their shipped defaults, measured by the simulator's profiling mode (issue 16:
>= 90% of device loads at vector width for contiguous rows, coalescing >= 90%, no integer
division in a loop): softmax, log_softmax, layer_norm and rms_norm (with weight and bias),
float32 and float16, rows held in registers and looped; batch_norm's elementwise pass at
planes that are and are not a multiple of 4 long. (The pools: tests/test_gpu_pool_tiles.py.)"""
import pytest

from mpskern import sim
from mpskern.profiling import run as prun
from mpskern.sim import profile_build

pytestmark = [pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler"),
              pytest.mark.skipif(profile_build.clang()[0] is None, reason="profiling needs clang")]

CASES = [(op, shape, dt) for op in ("softmax", "log_softmax", "layer_norm", "rms_norm")
         for shape in ("64,1024", "8,20000") for dt in ("float32", "float16")]
# batch_norm (inference): 14x14 and 7x7 planes, and one of 2x25 (each plane's head and tail
# in vectors that straddle two channels)
CASES += [("batch_norm", shape, dt) for shape in ("8,256,14,14", "8,64,7,7", "4,6,2,25")
          for dt in ("float32", "float16")]


@pytest.fixture
def packaged_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSKERN_TUNING_DB", str(tmp_path / "none.json"))


@pytest.mark.parametrize("op,shape,dtype", CASES, ids=[f"{o}-{s}-{d}" for o, s, d in CASES])
def test_row_loads_are_vectors_that_fill_lines(packaged_defaults, op, shape, dtype):
    """(layer_norm / rms_norm: their weight and bias load 4-wide too, from the copy aligned
    like the row (gpu/norm.py params4); they were 4 scalar loads a vector, 11-20% vector.
    batch_norm: a channel's parameters are one float4 (gpu/norm.py inference_params); they
    were 5 scalar loads a vector, 17% (and 0% where HW % 4 != 0: x read one by one).)"""
    prof, info = prun.profile_op(op, shape, dtype, family=7, max_groups=16)
    for d in prof.dispatches:
        where = (op, shape, dtype, d["kernel"])
        load = d["device"]["load"]
        assert load["vector"] >= 0.9 and load["coalescing"] >= 0.9, (where, load)
        assert d["int_div"]["in_loops"] == 0, (where, d["int_div"])
