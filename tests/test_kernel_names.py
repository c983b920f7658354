"""Kernel names: built by one helper (mpskern.paths.kernel_name), instantiated by one macro
(metal/mk_common.h's MK_PER_DTYPE), and the two agree: every name the tuning spaces and
the GPU encoders can ask for exists in its .metal file, and every kernel there is asked for."""
import numpy as np
import pytest

from mpskern import _native, paths
from mpskern.sim import compiler, frontend
from mpskern.sim.msl_tokens import LineMap
from mpskern.tuning import spaces

# kernels an encoder runs beside its space's variants (mpskern/backends/gpu/*.py)
HELPERS = {"gemm": ["splitk_reduce"], "conv2d": ["splitk_reduce"],
           "batch_norm": ["apply", "finish"], "pool2d": ["max", "avg"]}
NOT_A_KERNEL = {"pool2d": {"direct"}}       # the space's one variant; the mode picks the kernel
ONE_DTYPE = {"norm_batch_finish": "f32"}    # float32 statistics for either storage type


def test_kernel_name_accepts_every_dtype_spelling():
    assert paths.kernel_name("gemm", "simd", _native.F32) == "gemm_simd_f32"
    assert paths.kernel_name("norm_batch", "apply", np.float16) == "norm_batch_apply_f16"
    assert paths.kernel_name("pool", "max", np.dtype("float32")) == "pool_max_f32"
    assert paths.kernel_name("softmax", "rows", "float16") == "softmax_rows_f16"
    assert spaces.SPACES["gemm"].kernel({"variant": "tiled"}, _native.F16) == "gemm_tiled_f16"
    assert spaces.SPACES["gemm"].kernel({"variant": "tiled"}, _native.F32,
                                        variant="splitk_reduce") == "gemm_splitk_reduce_f32"


@pytest.mark.parametrize("dtype", [np.float64, "int32", 7, None])
def test_kernel_name_refuses_other_dtypes(dtype):
    with pytest.raises(TypeError, match="float32 or float16"):
        paths.kernel_name("gemm", "simd", dtype)


def _kernels_in(fname, macros):
    pre = compiler.preprocess(paths.metal_source(fname), macros)
    return {k.host_name for k in frontend.find_kernels(pre, LineMap(pre))}


@pytest.mark.skipif(not compiler.available(), reason="no C++ compiler for the simulator")
def test_every_built_name_exists_and_every_kernel_is_built():
    built, found = {}, {}
    for op, sp in spaces.SPACES.items():
        for cfg in sp.shipped:
            names = found.setdefault(sp.file, set())
            names |= _kernels_in(sp.file, spaces.macros(op, cfg))
        variants = [v for v in sp.variants if v not in NOT_A_KERNEL.get(op, ())]
        for v in variants + HELPERS.get(op, []):
            for dt in (_native.F32, _native.F16):
                name = sp.kernel({"variant": v}, dt)
                if ONE_DTYPE.get(name.rsplit("_", 1)[0], name[-3:]) == name[-3:]:
                    built.setdefault(sp.file, set()).add(name)
    assert set(built) == set(found)
    for fname in found:
        assert built[fname] - found[fname] == set(), fname     # asked for, not compiled
        assert found[fname] - built[fname] == set(), fname     # compiled, never asked for


DEF = """template <typename T>
kernel void demo_copy(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                      uint gid [[thread_position_in_grid]])
{
    y[gid] = x[gid];
}
"""


def _find(src):
    return frontend.find_kernels(src, LineMap(src))


def test_front_end_reads_a_decltype_instantiation_from_its_template():
    ks = _find(DEF + 'template [[host_name("demo_copy_f16")]] [[kernel]] '
                     'decltype(demo_copy<half>) demo_copy<half>;\n')
    assert [(k.host_name, k.callee, [p.attr for p in k.params]) for k in ks] == [
        ("demo_copy_f16", "demo_copy<half>", ["buffer", "buffer", "thread_position_in_grid"])]


@pytest.mark.parametrize("inst, says", [
    ('template [[host_name("d")]] [[kernel]] decltype(demo_copy<half>) demo_copy<float>;',
     "with the same arguments"),
    ('template [[host_name("d")]] [[kernel]] decltype(nowhere<half>) nowhere<half>;',
     "not a template kernel"),
])
def test_front_end_refuses_a_broken_decltype_instantiation(inst, says):
    with pytest.raises(frontend.TranslateError, match=says):
        _find(DEF + inst + "\n")
