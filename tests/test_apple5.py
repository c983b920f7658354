"""GPUs without simdgroup matrices (family Apple5/6: the paravirtual GPU of GitHub's hosted
macOS runners), used when MPSKERN_METAL_MIN_FAMILY asks for them: the Metal shim compiles
the kernels with MK_NO_SIMDGROUP_MATRIX=1 (tests/test_shim_host.py checks that rule), which
leaves every simdgroup_matrix kernel out of every .metal file; the tuning rules refuse the
simd variants there and the defaults step down to the tiled ones; selftest marks the rows."""
import numpy as np
import pytest
from simtools import shipped_configs

from mpskern import backends, sim
from mpskern.cli import selftest as st
from mpskern.paths import metal_source
from mpskern.sim import compiler, parse, strict
from mpskern.tuning import spaces

APPLE5 = dict(name="Apple Paravirtual device", family=5, simd_width=32, max_threads_per_threadgroup=1024,
              max_threadgroup_memory=32768)
SIMD_WORDS = {"simdgroup_matrix", "simdgroup_load", "simdgroup_store", "simdgroup_multiply_accumulate",
              "simdgroup_multiply", "make_filled_simdgroup_matrix"}


@pytest.mark.skipif(not sim.available()[0], reason="needs a host C++ compiler")
@pytest.mark.parametrize("fname,macros", shipped_configs())
def test_no_simdgroup_matrix_left_and_still_valid_msl(fname, macros):
    m = {k: str(v) for k, v in macros}
    pre = compiler.preprocess(strict.guard_includes(metal_source(fname)), dict(m, MK_NO_SIMDGROUP_MATRIX="1"))
    assert not {t.text for t in parse.tokenize(pre)} & SIMD_WORDS
    assert strict.check_preprocessed(pre) == ()
    if fname in ("gemm.metal", "conv2d.metal", "attention.metal") and macros:
        full = compiler.preprocess(strict.guard_includes(metal_source(fname)), m)
        assert {t.text for t in parse.tokenize(full)} & SIMD_WORDS      # (the macro is what removes them)


@pytest.mark.skipif(not backends.availability("sim")[0], reason="needs the simulator")
def test_the_tiled_kernels_remain_and_run():
    be = backends.get("sim")
    macros = dict(MK_BM=32, MK_BN=32, MK_BK=16, MK_WM=2, MK_WN=2, MK_NO_SIMDGROUP_MATRIX=1)
    lib_src = metal_source("gemm.metal")
    # [[max_total_threads_per_threadgroup(MK_NT)]]: 32 * WM * WN
    assert be.pipeline("gemm_tiled_f32", source=lib_src, macros=macros).max_threads == 128
    with pytest.raises(ValueError, match="no kernel named 'gemm_simd_f32'"):
        be.pipeline("gemm_simd_f32", source=lib_src, macros=macros)


@pytest.mark.parametrize("op,shape", [("gemm", (1, 128, 128, 128)), ("conv2d", (1, 64, 3136, 576)),
                                      ("attention", (8, 128, 128, 64, 64))])
def test_tuning_steps_down_to_the_tiled_variant(op, shape):
    cfg = spaces.generic(op, "float32", shape, APPLE5)
    assert cfg["variant"] == "tiled" and not spaces.problems(op, cfg, APPLE5)
    simd = spaces.generic(op, "float32", shape, dict(APPLE5, family=7))
    assert simd["variant"] == "simd"                                     # Apple7+: as before
    assert any("needs simdgroup matrices" in p for p in spaces.problems(op, simd, APPLE5))
    assert spaces.select(op, "float32", shape, APPLE5).config["variant"] == "tiled"


def test_selftest_marks_the_rows(monkeypatch):
    class Fake:
        info = dict(APPLE5)
    real = backends.get
    monkeypatch.setattr(backends, "get", lambda name="auto": Fake() if name == "metal" else real(name))
    assert st._override_mark("metal") == "Apple5 override: no simdgroup_matrix kernels"
    assert st._override_mark("mps") == "" and st._override_mark("cpu") == ""
    Fake.info = dict(APPLE5, family=8)
    assert st._override_mark("metal") == ""
