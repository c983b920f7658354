"""The macOS shim's host logic, run here: objc/mk_shim_*.c, objc/mk_mps_host.c, the ops' own
host halves (objc/mps_host/<op>.c, included by their .m) and the
generic dispatch checks of objc/mk_device.c are plain C that objc/*.m only glue to Apple's
API. This file compiles them with the host C compiler and runs them through ctypes: page
rounding for no-copy buffers, copy-mode mirroring, overlap and size checks, macro
dictionaries, Metal's dispatch validation, how bindings are encoded, command-buffer error
collection, graph staging and cache keys, every MPS op's argument checks, the K=0 gemm
and C=0 conv2d host paths and gemm's prefill -- against numpy or the rule in words.

MPSKERN_HOST_COVERAGE=DIR builds the library with --coverage into DIR (gcov then counts
the lines no test executes; docs/verification.md). The last tests check the .m files
themselves: every exported function catches Objective-C exceptions, and fewer than 50
host-logic lines remain in them."""
import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from test_mps_math import GemmArgs, Matrix, GemmPlan, PoolArgs, _struct  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
OBJC = ROOT / "objc"
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")

SOURCES = ["mk_error.c", "mk_device.c", "mk_mps_math.c", "mk_mps_host.c", "mk_shim_buffer.c",
           "mk_shim_device.c", "mk_shim_graph.c", "mk_shim_run.c"]
# an op's own host half, which its objc/mk_mps_<op>.m includes (plain C: compiled here alone)
SOURCES += sorted(str(p.relative_to(OBJC)) for p in OBJC.glob("mps_host/*.c"))
MAX_BINDINGS = int(re.search(r"#define MK_MAX_BINDINGS (\d+)", (OBJC / "mpskern.h").read_text()).group(1))
F32, F16 = 0, 1
MK_OK, MK_ERR_INVALID, MK_ERR_RUNTIME, MK_ERR_UNSUPPORTED = 0, 1, 4, 7
READ, WRITE = 1, 2
METAL, SIM = 1, 2

ConvArgs = _struct("mk_conv2d_args")
SoftmaxArgs = _struct("mk_softmax_args")
RownormArgs = _struct("mk_rownorm_args")
GroupNormArgs = _struct("mk_group_norm_args")
BatchNormArgs = _struct("mk_batch_norm_args")
ALL_ARGS = (GemmArgs, ConvArgs, PoolArgs, SoftmaxArgs, RownormArgs, GroupNormArgs, BatchNormArgs)


class Ops(ctypes.Structure):          # mk_device_ops: only its first field (kind) is read
    _fields_ = [("kind", ctypes.c_int), ("rest", ctypes.c_void_p * 16)]


class Device(ctypes.Structure):
    _fields_ = [("ops", ctypes.POINTER(Ops)), ("impl", ctypes.c_void_p)]


class Buffer(ctypes.Structure):
    _fields_ = [("device", ctypes.POINTER(Device)), ("impl", ctypes.c_void_p), ("host", ctypes.c_void_p),
                ("nbytes", ctypes.c_size_t), ("flags", ctypes.c_int), ("zero_copy", ctypes.c_int)]


class Pipeline(ctypes.Structure):
    _fields_ = [("device", ctypes.POINTER(Device)), ("impl", ctypes.c_void_p),
                ("max_threads", ctypes.c_uint32), ("exec_width", ctypes.c_uint32),
                ("name", ctypes.c_char_p), ("min_bytes", ctypes.c_uint32 * MAX_BINDINGS)]


class Binding(ctypes.Structure):
    _fields_ = [("buffer", ctypes.POINTER(Buffer)), ("offset", ctypes.c_uint64),
                ("bytes", ctypes.c_void_p), ("nbytes", ctypes.c_uint32)]


class Dispatch(ctypes.Structure):
    _fields_ = [("pipeline", ctypes.POINTER(Pipeline)), ("grid", ctypes.c_uint32 * 3),
                ("threadgroup", ctypes.c_uint32 * 3), ("grid_units", ctypes.c_int),
                ("threadgroup_memory", ctypes.c_uint32 * 4), ("nbindings", ctypes.c_uint32),
                ("bindings", Binding * MAX_BINDINGS)]


class Timing(ctypes.Structure):
    _fields_ = [("gpu_ms", ctypes.c_double), ("wall_ms", ctypes.c_double)]


class PageSpan(ctypes.Structure):
    _fields_ = [("base", ctypes.c_size_t), ("offset", ctypes.c_size_t), ("length", ctypes.c_size_t)]


class Macro(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 128), ("value", ctypes.c_char * 512), ("is_int", ctypes.c_int),
                ("ival", ctypes.c_longlong)]


class CbErrors(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int), ("failed", ctypes.c_int), ("gpu_start", ctypes.c_double),
                ("gpu_end", ctypes.c_double), ("msg", ctypes.c_char * 1024)]


class GraphIO(ctypes.Structure):
    _fields_ = [("buffer", ctypes.POINTER(Buffer)), ("offset", ctypes.c_size_t), ("storage", ctypes.c_void_p)]


class Need(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("a", "b", "c", "out")]


class WindowPlan(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("pb", "pr", "gp", "gq")]


class Library(ctypes.Structure):
    _fields_ = [("device", ctypes.POINTER(Device)), ("impl", ctypes.c_void_p)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 128), ("architecture", ctypes.c_char * 64), ("family", ctypes.c_int),
                ("is_simulator", ctypes.c_int), ("simd_width", ctypes.c_int),
                ("max_threads_per_threadgroup", ctypes.c_uint32), ("max_threadgroup_memory", ctypes.c_uint32),
                ("recommended_working_set", ctypes.c_uint64), ("unified_memory", ctypes.c_int),
                ("page_size", ctypes.c_uint32)]


AttnArgs = _struct("mk_attention_args")


class AttnShapes(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("bq", "bk", "bv", "gk", "gv", "mb", "mh", "ml", "ms", "batch", "bw", "bo")]


MACRO_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Macro))
STATIC_TG_CB = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.POINTER(Pipeline))
BUFFER_CB = ctypes.CFUNCTYPE(None, ctypes.POINTER(Buffer))
_U32P = ctypes.POINTER(ctypes.c_uint32)


class Encoder(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p),
                ("pipeline", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Pipeline))),
                ("buffer", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(Buffer),
                                            ctypes.c_uint64)),
                ("bytes", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32)),
                ("temp", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                                          ctypes.c_uint32)),
                ("tg_memory", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32)),
                ("dispatch", ctypes.CFUNCTYPE(None, ctypes.c_void_p, _U32P, _U32P, ctypes.c_int))]


P = ctypes.POINTER
SIGS = {
    "mk_last_error": (ctypes.c_char_p, []),
    "mk_check_binding_sizes": (ctypes.c_int, [P(Dispatch)]),
    "mk_shim_newest_family": (ctypes.c_int, [ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int),
                                             ctypes.c_void_p, ctypes.c_int]),
    "mk_shim_min_family": (ctypes.c_int, []),
    "mk_shim_family_macro": (ctypes.c_char_p, [ctypes.c_int]),
    "mk_shim_no_device_why": (None, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, P(ctypes.c_char_p)]),
    "mk_shim_page_span": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, P(PageSpan)]),
    "mk_shim_zero_copy_allowed": (ctypes.c_int, []),
    "mk_shim_upload": (ctypes.c_int, [P(Buffer), ctypes.c_int, ctypes.c_void_p]),
    "mk_shim_download": (ctypes.c_int, [P(Buffer), ctypes.c_int, ctypes.c_void_p]),
    "mk_shim_overlap": (ctypes.c_int, [P(Buffer), P(Buffer), ctypes.c_int]),
    "mk_shim_check_device": (ctypes.c_int, [P(Device), ctypes.c_char_p]),
    "mk_shim_check_buffer": (ctypes.c_int, [P(Device), P(Buffer), ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p]),
    "mk_shim_macro_parse": (ctypes.c_int, [ctypes.c_char_p, P(Macro)]),
    "mk_shim_fast_math": (ctypes.c_int, []),
    "mk_shim_check_dispatch": (ctypes.c_int, [P(Device), P(Dispatch), ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64]),
    "mk_shim_bind_kind": (ctypes.c_int, [P(Binding)]),
    "mk_shim_tg_length": (ctypes.c_uint32, [ctypes.c_uint32]),
    "mk_shim_dispatch_empty": (ctypes.c_int, [P(Dispatch)]),
    "mk_cb_errors_init": (None, [P(CbErrors)]),
    "mk_cb_errors_add": (None, [P(CbErrors), ctypes.c_int, ctypes.c_char_p, ctypes.c_double, ctypes.c_double]),
    "mk_cb_errors_finish": (ctypes.c_int, [P(CbErrors), ctypes.c_char_p, ctypes.c_double, P(Timing)]),
    "mk_shim_now_ms": (ctypes.c_double, []),
    "mk_shim_tensor_bytes": (ctypes.c_size_t, [ctypes.c_int, P(ctypes.c_int64), ctypes.c_size_t]),
    "mk_shim_graph_staging": (None, [P(GraphIO), ctypes.c_int, P(GraphIO), ctypes.c_int, P(ctypes.c_int),
                                     P(ctypes.c_int)]),
    "mk_shim_graph_key": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int,
                                         ctypes.c_void_p, ctypes.c_size_t]),
    "mk_shim_graph_prepare": (ctypes.c_int, [P(Device), P(GraphIO), P(ctypes.c_size_t), ctypes.c_int, P(GraphIO),
                                             P(ctypes.c_size_t), ctypes.c_int, P(ctypes.c_int), P(ctypes.c_int),
                                             ctypes.c_char_p]),
    "mk_shim_graph_copy_back": (None, [P(ctypes.c_void_p), P(ctypes.c_void_p), P(ctypes.c_size_t), P(ctypes.c_int),
                                       ctypes.c_int]),
    "mk_shim_iota": (None, [ctypes.c_void_p, ctypes.c_int]),
    "mk_shim_out": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "mk_shim_device_new": (ctypes.c_int, [P(Ops), P(P(Device))]),
    "mk_shim_buffer_new": (ctypes.c_int, [P(Device), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                          P(P(Buffer))]),
    "mk_shim_library_new": (ctypes.c_int, [P(Device), P(ctypes.c_void_p)]),
    "mk_shim_pipeline_new": (ctypes.c_int, [P(Device), ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p,
                                            P(P(Pipeline))]),
    "mk_shim_pipeline_free": (None, [P(Pipeline)]),
    "mk_shim_wrap_check": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "mk_shim_library_check": (ctypes.c_int, [ctypes.c_char_p]),
    "mk_shim_pipeline_check": (ctypes.c_int, [P(Device), P(Library), ctypes.c_char_p]),
    "mk_shim_fill_info": (None, [P(DeviceInfo), ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint32,
                                 ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32]),
    "mk_shim_page_span_of": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, P(PageSpan)]),
    "mk_shim_alloc_length": (ctypes.c_size_t, [ctypes.c_size_t]),
    "mk_shim_each_macro": (ctypes.c_int, [P(ctypes.c_char_p), MACRO_CB, ctypes.c_void_p]),
    "mk_shim_check_dispatches": (ctypes.c_int, [P(Device), P(Dispatch), ctypes.c_uint32, STATIC_TG_CB, ctypes.c_void_p,
                                                ctypes.c_uint64]),
    "mk_shim_encode": (ctypes.c_int, [P(Dispatch), ctypes.c_uint32, P(Encoder)]),
    "mk_shim_each_bound_buffer": (None, [P(Dispatch), ctypes.c_uint32, BUFFER_CB]),
    "mk_shim_each": (None, [P(P(Buffer)), ctypes.c_int, BUFFER_CB]),
    "mk_shim_set_wall": (None, [P(Timing), ctypes.c_double]),
    "mk_mps_check": (ctypes.c_int, [P(Device), ctypes.c_int, ctypes.c_char_p]),
    "mk_mps_done": (ctypes.c_int, [ctypes.c_int, P(Timing)]),
    "mk_mps_gemm_host": (ctypes.c_int, [P(Device), P(GemmArgs), ctypes.c_int] + [P(Buffer)] * 4 +
                         [ctypes.c_int, ctypes.c_int, P(ctypes.c_int)]),
    "mk_mps_gemm_prefill_buffers": (None, [P(GemmArgs), ctypes.c_int, P(Buffer), P(Buffer), ctypes.c_void_p,
                                           ctypes.c_void_p]),
    "mk_mps_gemm_encodes": (None, [P(GemmPlan), P(GemmArgs), P(ctypes.c_int), P(ctypes.c_int)]),
    "mk_mps_gemm_plan_make": (None, [P(GemmArgs), P(GemmPlan)]),
    "mk_mps_conv2d_plan": (ctypes.c_int, [P(ConvArgs), P(WindowPlan)]),
    "mk_mps_pool2d_plan": (ctypes.c_int, [P(PoolArgs), P(WindowPlan)]),
    "mk_mps_conv2d_host": (ctypes.c_int, [P(Device), P(ConvArgs), ctypes.c_int, P(Buffer), P(Buffer), P(ctypes.c_int)]),
    "mk_mps_pool2d_is_avg": (ctypes.c_int, [P(PoolArgs)]),
    "mk_mps_batch_norm_updates": (ctypes.c_int, [P(BatchNormArgs)]),
    "mk_mps_attention_check": (ctypes.c_int, [P(AttnArgs), P(Buffer), P(ctypes.c_int)]),
    "mk_mps_attention_shapes_of": (None, [P(AttnArgs), P(AttnShapes)]),
    "mk_mps_attention_fusable": (ctypes.c_int, [P(AttnArgs)]),
    "mk_mps_attention_host": (ctypes.c_int, [P(Device), P(AttnArgs), ctypes.c_int, P(Buffer), P(ctypes.c_int)]),
    "mk_mps_check_dtype": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
    "mk_mps_span": (ctypes.c_size_t, [ctypes.c_int] * 5),
    "mk_mps_gemm_check": (ctypes.c_int, [P(GemmArgs), ctypes.c_int, P(Need)]),
    "mk_mps_gemm_graph_check": (ctypes.c_int, [P(GemmArgs)]),
    "mk_mps_gemm_k0": (None, [P(GemmArgs), ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
    "mk_mps_gemm_prefill": (None, [P(GemmArgs), ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]),
    "mk_mps_window_plan_make": (ctypes.c_int, [ctypes.c_int] * 12 + [P(WindowPlan), ctypes.c_char_p]),
    "mk_mps_conv2d_check": (ctypes.c_int, [P(ConvArgs), P(Buffer), P(ctypes.c_int)]),
    "mk_mps_conv2d_c0": (None, [P(ConvArgs), ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
    "mk_mps_pool2d_check": (ctypes.c_int, [P(PoolArgs), P(ctypes.c_int)]),
    "mk_mps_softmax_check": (ctypes.c_int, [P(SoftmaxArgs), P(ctypes.c_int)]),
    "mk_mps_rownorm_check": (ctypes.c_int, [P(RownormArgs), P(Buffer), P(Buffer), P(ctypes.c_int)]),
    "mk_mps_group_norm_check": (ctypes.c_int, [P(GroupNormArgs), P(Buffer), P(Buffer), P(ctypes.c_int)]),
    "mk_mps_batch_norm_check": (ctypes.c_int, [P(BatchNormArgs)] + [P(Buffer)] * 4 + [P(ctypes.c_int)]),
    "mk_mps_norm_inputs": (ctypes.c_int, [P(P(Buffer)), P(Buffer), ctypes.c_int, P(Buffer), P(Buffer), ctypes.c_int,
                                          P(Buffer), ctypes.c_int, P(Buffer)]),
    "mk_mps_unbias": (ctypes.c_double, [P(BatchNormArgs)]),
}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("shimhost")
    cov = os.environ.get("MPSKERN_HOST_COVERAGE")
    flags = ["-shared", "-fPIC", "-O0", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
             "-Wno-unused-parameter", "-I", str(OBJC), "-I", str(ROOT / "metal")]
    so = out / "mk_shim_host.so"
    if cov:                      # objects (and their .gcno/.gcda) in DIR
        os.makedirs(cov, exist_ok=True)
        objs = []
        for s in SOURCES:
            o = os.path.join(cov, os.path.basename(s)[:-2] + ".o")
            subprocess.run([CC, "-c", "--coverage"] + [f for f in flags if f != "-shared"] +
                           [str(OBJC / s), "-o", o], check=True)
            objs.append(o)
        subprocess.run([CC, "-shared", "--coverage", "-o", str(so)] + objs, check=True)
    else:
        subprocess.run([CC] + flags + [str(OBJC / s) for s in SOURCES] + ["-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    for name, (res, args) in SIGS.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    yield lib
    if cov:                      # flush the .gcda files while the process lives on
        gcov_dump = getattr(lib, "__gcov_dump", None)
        if gcov_dump:
            gcov_dump()


def err(lib):
    return lib.mk_last_error().decode()


# ------------------------------------------------------------------------ fixtures of handles
class World:
    """A Metal-kind device, buffers over numpy memory, a pipeline: the C structs the shim
    sees, kept alive together."""

    def __init__(self, kind=METAL):
        self.ops = Ops(kind=kind)
        self.dev = Device(ctypes.pointer(self.ops), None)
        self.keep = []

    def buffer(self, array=None, nbytes=None, flags=READ | WRITE, dev=None):
        host = array.ctypes.data if array is not None else None
        n = array.nbytes if array is not None else (nbytes or 0)
        b = Buffer(ctypes.pointer(dev or self.dev), None, host, n, flags, 1)
        self.keep.append((b, array))
        return b

    def pipeline(self, max_threads=1024, min_bytes=None):
        p = Pipeline(ctypes.pointer(self.dev), None, max_threads, 32, b"k")
        for i, v in (min_bytes or {}).items():
            p.min_bytes[i] = v
        self.keep.append(p)
        return p

    def dispatch(self, p, grid=(1, 1, 1), tg=(32, 1, 1), tgmem=(0, 0, 0, 0), bindings=()):
        x = Dispatch()
        x.pipeline = ctypes.pointer(p)
        x.grid[:] = grid
        x.threadgroup[:] = tg
        x.threadgroup_memory[:] = tgmem
        x.nbindings = len(bindings)
        for i, b in enumerate(bindings):
            x.bindings[i] = b
        self.keep.append(x)
        return x


def bind_buffer(b, offset=0):
    return Binding(ctypes.pointer(b), offset, None, 0)


def bind_bytes(data):
    buf = ctypes.create_string_buffer(bytes(data), max(1, len(data)))
    bnd = Binding(None, 0, ctypes.cast(buf, ctypes.c_void_p), len(data))
    bnd._keep = buf
    return bnd


# ------------------------------------------------------------------------ devices
def test_newest_family(lib):
    cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    for supported, want in (({7, 8}, 8), ({7}, 7), (set(), 0), ({10, 7}, 10), ({6}, 0), ({9, 8, 7}, 9)):
        f = cb(lambda ctx, fam, s=supported: int(fam in s))
        assert lib.mk_shim_newest_family(f, None, 7) == want, supported
    apple5 = cb(lambda ctx, fam: int(fam == 5))           # a paravirtual CI GPU
    assert lib.mk_shim_newest_family(apple5, None, 7) == 0
    assert lib.mk_shim_newest_family(apple5, None, 5) == 5


def test_min_family_override_and_kernel_macro(lib, monkeypatch):
    for env, want in ((None, 7), ("5", 5), ("apple6", 6), ("Apple5", 5), ("4", 7), ("8", 7), ("x", 7), ("", 7)):
        if env is None:
            monkeypatch.delenv("MPSKERN_METAL_MIN_FAMILY", raising=False)
        else:
            monkeypatch.setenv("MPSKERN_METAL_MIN_FAMILY", env)
        assert lib.mk_shim_min_family() == want, env
    assert lib.mk_shim_family_macro(5) == b"MK_NO_SIMDGROUP_MATRIX=1"
    assert lib.mk_shim_family_macro(6) == b"MK_NO_SIMDGROUP_MATRIX=1"
    assert lib.mk_shim_family_macro(7) is None and lib.mk_shim_family_macro(10) is None


def test_no_device_message(lib):
    buf = ctypes.create_string_buffer(256)
    lib.mk_shim_no_device_why(buf, 256, 0, None)
    assert buf.value == b"no Metal device found (metal needs macOS on Apple silicon)"
    names = (ctypes.c_char_p * 2)(b"AMD Radeon Pro 5500M", b"Intel UHD Graphics 630")
    lib.mk_shim_no_device_why(buf, 256, 2, names)
    assert buf.value.endswith(b"this Mac has: AMD Radeon Pro 5500M, Intel UHD Graphics 630")
    assert b"MPSKERN_METAL_MIN_FAMILY=5" in buf.value                # the way to use an older GPU
    small = ctypes.create_string_buffer(b"\xff" * 40, 40)
    lib.mk_shim_no_device_why(small, 30, 2, names)               # truncated, terminated, in bounds
    assert len(small.value) == 29 and small.raw[30:] == b"\xff" * 10


# ------------------------------------------------------------------------ buffers
@pytest.mark.parametrize("page", [4096, 16384])
def test_page_span_encloses_the_data_in_whole_pages(lib, page):
    rng = np.random.default_rng(page)
    for _ in range(500):
        host = int(rng.integers(page, 1 << 40))
        n = int(rng.choice([1, 2, page - 1, page, page + 1, int(rng.integers(1, 1 << 24))]))
        s = PageSpan()
        assert lib.mk_shim_page_span(host, n, page, ctypes.byref(s)) == 0
        assert s.base % page == 0 and s.length % page == 0
        assert s.base + s.offset == host and s.offset < page
        assert s.base + s.length >= host + n > s.base + s.length - page     # no extra page


def test_page_span_refuses_what_cannot_be_wrapped(lib):
    s = PageSpan()
    assert lib.mk_shim_page_span(4096, 10, 3000, ctypes.byref(s)) == -1     # not a power of two
    assert lib.mk_shim_page_span(4096, 10, 0, ctypes.byref(s)) == -1
    top = (1 << 64) - 100
    assert lib.mk_shim_page_span(top, 200, 16384, ctypes.byref(s)) == -1    # past the address space
    assert lib.mk_shim_page_span(top - 16384 * 4, 200, 16384, ctypes.byref(s)) == 0
    assert lib.mk_shim_page_span((1 << 64) - 16384, 16384, 16384, ctypes.byref(s)) == -1
    assert lib.mk_shim_page_span((1 << 64) - 16384, 16383, 16384, ctypes.byref(s)) == 0   # the last page
    assert (s.base, s.offset, s.length) == ((1 << 64) - 16384, 0, 16384)


def test_zero_copy_and_fast_math_switches(lib, monkeypatch):
    # variable, the switch it sets, its value unset, and after "0" / "1"
    for var, switch, unset in (("MPSKERN_ZERO_COPY", lib.mk_shim_zero_copy_allowed, 1),
                               ("MPSKERN_METAL_FAST_MATH", lib.mk_shim_fast_math, 0)):
        monkeypatch.delenv(var, raising=False)
        assert switch() == unset, var
        for value in ("0", "1", "0") if unset else ("1", "0"):
            monkeypatch.setenv(var, value)
            assert switch() == int(value), (var, value)


def test_copy_mode_mirrors_by_direction(lib):
    w = World()
    host = np.arange(16, dtype=np.float32)
    dev = np.zeros(16, np.float32)
    for flags, up, down in ((READ, 1, 0), (WRITE, 0, 1), (READ | WRITE, 1, 1), (0, 0, 0)):
        b = w.buffer(host, flags=flags)
        dev[:] = -1
        assert lib.mk_shim_upload(ctypes.byref(b), 1, dev.ctypes.data) == up
        np.testing.assert_array_equal(dev, host if up else -1)
        dev[:] = 7
        before = host.copy()
        assert lib.mk_shim_download(ctypes.byref(b), 1, dev.ctypes.data) == down
        np.testing.assert_array_equal(host, 7 if down else before)
        host[:] = np.arange(16)
        # zero-copy buffers are never copied
        assert lib.mk_shim_upload(ctypes.byref(b), 0, dev.ctypes.data) == 0
        assert lib.mk_shim_download(ctypes.byref(b), 0, dev.ctypes.data) == 0
    empty = w.buffer(nbytes=0)
    assert lib.mk_shim_upload(ctypes.byref(empty), 1, dev.ctypes.data) == 0


def test_overlap(lib):
    w = World()
    mem = np.zeros(64, np.uint8)
    a = w.buffer(mem[0:16])
    b = w.buffer(mem[16:32])          # adjacent: no overlap
    c = w.buffer(mem[15:17])
    none = w.buffer(nbytes=0)
    assert not lib.mk_shim_overlap(ctypes.byref(a), ctypes.byref(b), 0)
    assert lib.mk_shim_overlap(ctypes.byref(a), ctypes.byref(c), 0)
    assert lib.mk_shim_overlap(ctypes.byref(c), ctypes.byref(b), 0)
    assert lib.mk_shim_overlap(ctypes.byref(a), ctypes.byref(a), 0)
    assert lib.mk_shim_overlap(ctypes.byref(a), ctypes.byref(b), 1)      # one Metal buffer
    assert not lib.mk_shim_overlap(ctypes.byref(a), ctypes.byref(none), 0)
    assert not lib.mk_shim_overlap(None, ctypes.byref(a), 0)


def test_device_and_buffer_checks(lib):
    w, other = World(), World()
    sim = World(SIM)
    assert lib.mk_shim_check_device(ctypes.byref(w.dev), b"op") == MK_OK
    assert lib.mk_shim_check_device(ctypes.byref(sim.dev), b"op") == MK_ERR_INVALID
    assert "need a Metal device, not a simulated one" in err(lib)
    assert lib.mk_shim_check_device(None, b"op") == MK_ERR_INVALID and "device is NULL" in err(lib)
    b = w.buffer(np.zeros(4, np.float32))
    assert lib.mk_shim_check_buffer(ctypes.byref(w.dev), ctypes.byref(b), 16, b"op", b"x") == MK_OK
    assert lib.mk_shim_check_buffer(ctypes.byref(w.dev), ctypes.byref(b), 17, b"op", b"x") == MK_ERR_INVALID
    assert err(lib) == "op: buffer x holds 16 bytes, the arguments need 17"
    assert lib.mk_shim_check_buffer(ctypes.byref(other.dev), ctypes.byref(b), 1, b"op", b"x") == MK_ERR_INVALID
    assert "belongs to another device" in err(lib)
    assert lib.mk_shim_check_buffer(ctypes.byref(w.dev), None, 1, b"op", b"x") == MK_ERR_INVALID
    assert "buffer x is NULL" in err(lib)
    assert lib.mk_shim_check_buffer(ctypes.byref(w.dev), ctypes.byref(b), (1 << 64) - 1, b"op", b"x") \
        == MK_ERR_INVALID and "address space" in err(lib)


# ------------------------------------------------------------------------ libraries and dispatch
@pytest.mark.parametrize("text,want", [
    (b"MK_BM=64", (0, b"MK_BM", b"64", 1, 64)),
    (b"FLAG", (0, b"FLAG", b"1", 1, 1)),
    (b"NAME=value", (0, b"NAME", b"value", 0, 0)),
    (b"A=", (0, b"A", b"", 0, 0)),
    (b"A=-12", (0, b"A", b"-12", 1, -12)),
    (b"A=+7", (0, b"A", b"+7", 1, 7)),
    (b"A= 5", (0, b"A", b" 5", 0, 0)),
    (b"A=5x", (0, b"A", b"5x", 0, 0)),
    (b"A=0x10", (0, b"A", b"0x10", 0, 0)),
    (b"A=99999999999999999999", (0, b"A", b"99999999999999999999", 0, 0)),
    (b"A=B=C", (0, b"A", b"B=C", 0, 0)),
    (b"", (1, b"", b"", 0, 0)),
    (b"=5", (-1, b"", b"", 0, 0)),
    (b"X" * 128 + b"=1", (-1, b"", b"", 0, 0)),
    (b"X=" + b"v" * 512, (-1, b"", b"", 0, 0)),
])
def test_macro_parse(lib, text, want):
    m = Macro()
    r = lib.mk_shim_macro_parse(text, ctypes.byref(m))
    assert (r, m.name, m.value, m.is_int, m.ival) == want


def test_dispatch_validation(lib):
    w, other = World(), World()
    p = w.pipeline(max_threads=256)
    arr = np.zeros(16, np.float32)
    good = w.dispatch(p, tg=(16, 16, 1), tgmem=(100, 0, 0, 0), bindings=[bind_buffer(w.buffer(arr)), bind_bytes(b"abcd")])

    def check(x, static=0, device=32768):
        return lib.mk_shim_check_dispatch(ctypes.byref(w.dev), ctypes.byref(x), 3, static, device)

    assert check(good) == MK_OK
    assert check(w.dispatch(p, tg=(0, 1, 1))) == MK_ERR_INVALID and "dispatch 3 has an empty threadgroup" in err(lib)
    assert check(w.dispatch(p, tg=(16, 16, 2))) == MK_ERR_INVALID
    assert "asks for 512 threads per threadgroup; this pipeline allows at most 256" in err(lib)
    # threadgroup memory: static + each [[threadgroup(i)]] rounded to 16 bytes
    assert check(w.dispatch(p, tgmem=(16368, 16368, 0, 0)), static=32) == MK_OK        # 32 + 2*16368
    assert check(w.dispatch(p, tgmem=(16369, 16368, 0, 0)), static=32) == MK_ERR_INVALID
    assert "needs 32784 bytes of threadgroup memory; the device has 32768" in err(lib)
    assert check(w.dispatch(p, bindings=[bind_buffer(w.buffer(arr, dev=other.dev))])) == MK_ERR_INVALID
    assert "binds a buffer of another device at 0" in err(lib)
    assert check(w.dispatch(p, bindings=[bind_buffer(w.buffer(arr), offset=65)])) == MK_ERR_INVALID
    assert "offset 65 past the buffer's 64 bytes" in err(lib)
    assert check(w.dispatch(p, bindings=[bind_buffer(w.buffer(arr), offset=64)])) == MK_OK
    empty = bind_bytes(b"x")
    empty.nbytes = 0
    assert check(w.dispatch(p, bindings=[empty])) == MK_ERR_INVALID and "empty constant data" in err(lib)


def test_binding_sizes_against_the_pipeline(lib):
    """mk_run's generic check (every device): a constant T& bound shorter than sizeof(T)."""
    w = World()
    p = w.pipeline(min_bytes={1: 68})
    arr = np.zeros(17, np.float32)                                # 68 bytes
    ok = w.dispatch(p, bindings=[bind_bytes(b"1234"), bind_bytes(b"x" * 68)])
    assert lib.mk_check_binding_sizes(ctypes.byref(ok)) == MK_OK
    assert lib.mk_check_binding_sizes(ctypes.byref(w.dispatch(p, bindings=[bind_bytes(b"1"), bind_bytes(b"x" * 67)]))) \
        == MK_ERR_INVALID
    assert err(lib) == "kernel 'k': [[buffer(1)]] is a constant reference to 68 bytes; 67 bytes are bound"
    buf = w.buffer(arr)
    assert lib.mk_check_binding_sizes(ctypes.byref(w.dispatch(p, bindings=[bind_bytes(b"1"), bind_buffer(buf)]))) == MK_OK
    assert lib.mk_check_binding_sizes(ctypes.byref(w.dispatch(p, bindings=[bind_bytes(b"1"), bind_buffer(buf, 4)]))) \
        == MK_ERR_INVALID and "64 bytes are bound" in err(lib)
    assert lib.mk_check_binding_sizes(ctypes.byref(w.dispatch(p, bindings=[bind_bytes(b"1"), bind_buffer(buf, 999)]))) \
        == MK_ERR_INVALID and "0 bytes are bound" in err(lib)


def test_binding_kinds_tg_lengths_and_empty_grids(lib):
    w = World()
    BUFFER, BYTES, TEMP, NONE = 1, 2, 3, 0
    assert lib.mk_shim_bind_kind(ctypes.byref(bind_buffer(w.buffer(np.zeros(1))))) == BUFFER
    assert lib.mk_shim_bind_kind(ctypes.byref(bind_bytes(b"x" * 4096))) == BYTES
    assert lib.mk_shim_bind_kind(ctypes.byref(bind_bytes(b"x" * 4097))) == TEMP
    assert lib.mk_shim_bind_kind(ctypes.byref(Binding())) == NONE
    for n, want in ((0, 0), (1, 16), (16, 16), (17, 32), (4095, 4096), (2 ** 32 - 1, 2 ** 32 - 16),
                    (2 ** 32 - 16, 2 ** 32 - 16)):
        assert lib.mk_shim_tg_length(n) == want, n
    p = w.pipeline()
    assert lib.mk_shim_dispatch_empty(ctypes.byref(w.dispatch(p, grid=(4, 0, 1))))
    assert not lib.mk_shim_dispatch_empty(ctypes.byref(w.dispatch(p, grid=(4, 2, 1))))


def test_command_buffer_errors_all_collected(lib):
    e = CbErrors()
    lib.mk_cb_errors_init(ctypes.byref(e))
    for start, end in ((2.0, 2.5), (1.5, 1.75), (2.6, 3.0)):
        lib.mk_cb_errors_add(ctypes.byref(e), 0, None, start, end)
    t = Timing()
    assert lib.mk_cb_errors_finish(ctypes.byref(e), b"op", lib.mk_shim_now_ms(), ctypes.byref(t)) == MK_OK
    assert t.gpu_ms == pytest.approx(1500.0) and 0 <= t.wall_ms < 1000
    # failures anywhere (not only the first and last), each message once, in order
    lib.mk_cb_errors_init(ctypes.byref(e))
    lib.mk_cb_errors_add(ctypes.byref(e), 0, None, 1.0, 1.1)
    lib.mk_cb_errors_add(ctypes.byref(e), 1, b"Internal Error (0000000e)", 1.1, 1.2)
    lib.mk_cb_errors_add(ctypes.byref(e), 1, b"Internal Error (0000000e)", 1.2, 1.3)
    lib.mk_cb_errors_add(ctypes.byref(e), 1, None, 0, 0)
    lib.mk_cb_errors_add(ctypes.byref(e), 0, None, 1.3, 1.4)
    assert lib.mk_cb_errors_finish(ctypes.byref(e), b"mk_mps_conv2d", 0.0, ctypes.byref(t)) == MK_ERR_RUNTIME
    assert err(lib) == ("mk_mps_conv2d: Metal command buffer failed (3 of 5): Internal Error (0000000e); "
                        "(no message)")
    # many long messages: bounded, terminated
    lib.mk_cb_errors_init(ctypes.byref(e))
    for i in range(100):
        lib.mk_cb_errors_add(ctypes.byref(e), 1, (b"error %d " % i) * 10, 0, 0)
    assert lib.mk_cb_errors_finish(ctypes.byref(e), b"op", 0.0, None) == MK_ERR_RUNTIME
    assert "(100 of 100)" in err(lib) and len(e.msg) < 1024
    lib.mk_cb_errors_init(ctypes.byref(e))                 # no timestamps: no GPU time, no crash
    assert lib.mk_cb_errors_finish(ctypes.byref(e), b"op", 0.0, ctypes.byref(t)) == MK_OK and t.gpu_ms == 0


# ------------------------------------------------------------------------ graphs
def test_tensor_bytes(lib):
    def tb(shape, es=4):
        a = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        return lib.mk_shim_tensor_bytes(len(shape), a, es)
    assert tb([2, 3, 4]) == 96 and tb([2, 3, 4], 2) == 48 and tb([]) == 4 and tb([5, 0, 7]) == 0
    assert tb([-1, 4]) == 2 ** 64 - 1
    assert tb([2 ** 40, 2 ** 30]) == 2 ** 64 - 1            # overflow is SIZE_MAX, never a wrap
    assert tb([0, 2 ** 62, 2 ** 62]) == 0


def test_graph_staging(lib):
    w = World()
    mem = np.zeros(256, np.uint8)
    x, rm, y = w.buffer(mem[0:64]), w.buffer(mem[64:96]), w.buffer(mem[128:192])
    storage = [ctypes.c_void_p(i) for i in (1, 2, 3, 4)]

    def plan(ins, outs):
        a = (GraphIO * len(ins))(*ins)
        b = (GraphIO * len(outs))(*outs)
        si, so = (ctypes.c_int * len(ins))(), (ctypes.c_int * len(outs))()
        lib.mk_shim_graph_staging(a, len(ins), b, len(outs), si, so)
        return list(si), list(so)

    io = lambda b, off, st: GraphIO(ctypes.pointer(b), off, st)   # noqa: E731
    assert plan([io(x, 0, 1), io(rm, 0, 2)], [io(y, 0, 3)]) == ([0, 0], [0])
    assert plan([io(x, 4096, 1), io(rm, 0, 2)], [io(y, 96, 3)]) == ([1, 0], [1])   # offsets
    # batch_norm: the running mean is read and written by one graph
    assert plan([io(x, 0, 1), io(rm, 0, 2)], [io(y, 0, 3), io(rm, 0, 2)]) == ([0, 0], [0, 1])
    # an output in the same Metal buffer as an input (different host ranges)
    assert plan([io(x, 0, 1)], [io(y, 0, 1)]) == ([0], [1])


@pytest.mark.parametrize("Args", ALL_ARGS, ids=lambda a: a.__name__)
def test_graph_key_names_every_field(lib, Args):
    def key(a, dtype=F32, size=512):
        buf = ctypes.create_string_buffer(size)
        r = lib.mk_shim_graph_key(buf, size, b"op", dtype, ctypes.byref(a), ctypes.sizeof(a))
        return r, buf.value
    base = Args()
    r, k0 = key(base)
    assert r == 0 and k0.startswith(b"op:0:")
    keys = {k0}
    for name, typ in Args._fields_:
        a = Args()
        setattr(a, name, 3 if typ is ctypes.c_int32 else 0.5)
        keys.add(key(a)[1])
    assert len(keys) == len(Args._fields_) + 1            # every field changes the key
    assert key(base, F16)[1] != k0 and key(Args())[1] == k0
    assert key(base, size=20)[0] == MK_ERR_INVALID         # too short: refused, never cut
    assert "arguments too large for a graph cache key" in err(lib)


# ------------------------------------------------------------------------ MPS ops: checks
def gemm_args(**kw):
    a = GemmArgs(batch=1, M=3, N=4, K=5, lda=5, ldb=4, ldc=4, stride_a=15, stride_b=20, stride_c=12,
                 stride_out=12, trans_a=0, trans_b=0, has_c=0, alpha=1.0, beta=0.0, split_k=1)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_gemm_checks_and_operand_sizes(lib):
    need = Need()
    assert lib.mk_mps_gemm_check(ctypes.byref(gemm_args()), F32, ctypes.byref(need)) == MK_OK
    assert (need.a, need.b, need.c, need.out) == (60, 80, 0, 48)
    a = gemm_args(batch=3, stride_out=20, ldc=5, has_c=1, stride_c=0, trans_a=1, lda=3, stride_a=15)
    assert lib.mk_mps_gemm_check(ctypes.byref(a), F16, ctypes.byref(need)) == MK_OK
    # out: 2*20 + 2*5 + 4 elements; C broadcast (stride 0): one matrix; A transposed 5x3
    assert (need.out, need.c, need.a) == ((40 + 10 + 4) * 2, (10 + 4) * 2, (30 + 12 + 3) * 2)
    assert lib.mk_mps_gemm_check(ctypes.byref(gemm_args(K=0)), F32, ctypes.byref(need)) == MK_OK
    assert need.a == 0 and need.b == 0 and need.out == 48
    for kw, words in ((dict(M=-1), "negative size"), (dict(stride_b=-4), "negative batch stride"),
                      (dict(lda=4), "lda 4, ldb 4, ldc 4 are smaller than the rows they hold (5, 4, 4)"),
                      (dict(trans_b=1), "smaller than the rows"), (dict(ldc=3), "smaller")):
        assert lib.mk_mps_gemm_check(ctypes.byref(gemm_args(**kw)), F32, ctypes.byref(need)) == MK_ERR_INVALID, kw
        assert words in err(lib), (kw, err(lib))
    assert lib.mk_mps_gemm_check(ctypes.byref(gemm_args()), 2, ctypes.byref(need)) == MK_ERR_INVALID
    assert "dtype 2 is neither float32 (0) nor float16 (1)" in err(lib)
    assert lib.mk_mps_gemm_check(None, F32, ctypes.byref(need)) == MK_ERR_INVALID and "args is NULL" in err(lib)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("has_c", [0, 1])
def test_gemm_k0_and_prefill_on_the_host(lib, dtype, has_c):
    np_dt = np.float32 if dtype == F32 else np.float16
    rng = np.random.default_rng(3)
    batch, M, N, ldc = 3, 4, 5, 7
    a = gemm_args(batch=batch, M=M, N=N, K=0, ldc=ldc, stride_c=M * ldc, stride_out=M * ldc + 2,
                  has_c=has_c, beta=-1.5)
    C = rng.standard_normal(batch * M * ldc).astype(np_dt)
    out = np.full(batch * (M * ldc + 2), 9, np_dt)
    lib.mk_mps_gemm_k0(ctypes.byref(a), dtype, C.ctypes.data if has_c else None, out.ctypes.data)
    ref = out.copy()
    for b in range(batch):
        for i in range(M):
            o, c = b * (M * ldc + 2) + i * ldc, b * M * ldc + i * ldc
            ref[o:o + N] = (np.float32(-1.5) * C[c:c + N].astype(np.float32)).astype(np_dt) if has_c else 0
    np.testing.assert_array_equal(out, ref)          # and the gaps (ldc > N, batch padding) untouched
    assert (out[np.arange(out.size) % 1 == 0] == ref).all()
    out[:] = 9
    lib.mk_mps_gemm_prefill(ctypes.byref(a), dtype, C.ctypes.data if has_c else None, out.ctypes.data, 0)
    for b in range(batch):
        for i in range(M):
            o, c = b * (M * ldc + 2) + i * ldc, b * M * ldc + i * ldc
            ref[o:o + N] = C[c:c + N] if has_c else 0
    np.testing.assert_array_equal(out, ref)
    # C is out with the same strides: nothing to do
    same = gemm_args(batch=1, M=M, N=N, ldc=ldc, stride_c=0, stride_out=0, has_c=1)
    x = C.copy()
    lib.mk_mps_gemm_prefill(ctypes.byref(same), dtype, x.ctypes.data, x.ctypes.data, 1)
    np.testing.assert_array_equal(x, C)


def test_window_plan(lib):
    wp = WindowPlan()
    # torch: 7x7 input, 3x3 window, stride 2, pad 1 -> 4x4 (ceil mode) needs bottom padding
    assert lib.mk_mps_window_plan_make(7, 7, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, ctypes.byref(wp), b"op") == MK_OK
    assert (wp.pb, wp.pr, wp.gp, wp.gq) == (1, 1, 4, 4)
    assert lib.mk_mps_window_plan_make(8, 8, 3, 3, 3, 3, 2, 2, 1, 1, 0, 0, ctypes.byref(wp), b"op") == MK_OK
    assert (wp.pb, wp.gp) == (0, 3)
    assert lib.mk_mps_window_plan_make(6, 6, 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, ctypes.byref(wp), b"op") == MK_OK
    assert wp.gp == 4                                                       # one row sliced off
    assert lib.mk_mps_window_plan_make(2, 2, 3, 3, 5, 5, 1, 1, 1, 1, 0, 0, ctypes.byref(wp), b"pool") \
        == MK_OK                                                            # padding makes room
    assert lib.mk_mps_window_plan_make(4, 4, 9, 9, 3, 3, 1, 1, 1, 1, 0, 0, ctypes.byref(wp), b"pool") == MK_OK
    assert (wp.pb, wp.gp) == (7, 9)                        # any P: padding at the end makes room
    for bad in ((0, 1, 1), (1, 0, 1), (1, 1, 0)):            # never a division by zero
        assert lib.mk_mps_window_plan_make(4, 4, 2, 2, 3, bad[0], 1, bad[1], 1, bad[2], 0, 0, ctypes.byref(wp),
                                           b"pool") == MK_ERR_INVALID and "invalid window" in err(lib)


def conv_args(**kw):
    a = ConvArgs(N=2, C=4, H=5, W=5, K=6, R=3, S=3, P=3, Q=3, stride_h=1, stride_w=1, pad_h=0, pad_w=0,
                 dil_h=1, dil_w=1, groups=2, has_bias=1)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_conv2d_checks_plan_and_c0(lib):
    w = World()
    bias_buf = w.buffer(np.zeros(6, np.float32))
    empty = ctypes.c_int(-1)
    check = lambda a, b=ctypes.byref(bias_buf): lib.mk_mps_conv2d_check(ctypes.byref(a), b, ctypes.byref(empty))  # noqa: E731
    assert check(conv_args()) == MK_OK and empty.value == 0
    assert check(conv_args(P=0)) == MK_OK and empty.value == 1
    for kw in (dict(groups=3), dict(groups=0), dict(K=5), dict(stride_w=0), dict(dil_h=0), dict(pad_w=-1),
               dict(N=-1), dict(R=0), dict(P=-2)):
        assert check(conv_args(**kw)) == MK_ERR_INVALID, kw
        assert err(lib).startswith("mk_mps_conv2d: invalid"), err(lib)
    assert check(conv_args(), None) == MK_ERR_INVALID and "has_bias is set but bias is NULL" in err(lib)
    assert check(conv_args(has_bias=0), None) == MK_OK
    assert lib.mk_mps_conv2d_check(None, None, ctypes.byref(empty)) == MK_ERR_INVALID
    wp = WindowPlan()
    assert lib.mk_mps_conv2d_plan(ctypes.byref(conv_args(H=7, W=7, P=4, Q=4, stride_h=2, stride_w=2, pad_h=1,
                                                         pad_w=1)), ctypes.byref(wp)) == MK_OK
    assert (wp.pb, wp.pr, wp.gp, wp.gq) == (1, 1, 4, 4)
    for dtype, np_dt in ((F32, np.float32), (F16, np.float16)):
        for has_bias in (0, 1):
            a = conv_args(C=0, groups=1, has_bias=has_bias)
            bias = np.arange(6, dtype=np.float32) + 0.5
            y = np.full(2 * 6 * 3 * 3, 9, np_dt)
            lib.mk_mps_conv2d_c0(ctypes.byref(a), dtype, bias.ctypes.data if has_bias else None, y.ctypes.data)
            want = np.broadcast_to((bias if has_bias else np.zeros(6))[None, :, None, None], (2, 6, 3, 3))
            np.testing.assert_array_equal(y.reshape(2, 6, 3, 3), want.astype(np_dt))
            # the same through the op's host half, with the buffers checked
            y[:] = 9
            st = ctypes.c_int(-1)
            yb, bb = w.buffer(y), w.buffer(bias)
            assert lib.mk_mps_conv2d_host(ctypes.byref(w.dev), ctypes.byref(a), dtype, ctypes.byref(bb),
                                          ctypes.byref(yb), ctypes.byref(st)) == 1 and st.value == MK_OK
            np.testing.assert_array_equal(y.reshape(2, 6, 3, 3), want.astype(np_dt))
            short = w.buffer(y[:-1])
            assert lib.mk_mps_conv2d_host(ctypes.byref(w.dev), ctypes.byref(a), dtype, ctypes.byref(bb),
                                          ctypes.byref(short), ctypes.byref(st)) == 1
            assert st.value == MK_ERR_INVALID and "buffer y holds" in err(lib)
    st = ctypes.c_int(-1)
    assert lib.mk_mps_conv2d_host(ctypes.byref(w.dev), ctypes.byref(conv_args()), F32, None, None,
                                  ctypes.byref(st)) == 0 and st.value == MK_OK      # C > 0: the GPU's


def test_pool_softmax_and_norm_checks(lib):
    w = World()
    buf = w.buffer(np.zeros(8, np.float32))
    B = ctypes.byref(buf)
    empty = ctypes.c_int(-1)
    E = ctypes.byref(empty)
    pool = PoolArgs(N=1, C=1, H=4, W=4, P=2, Q=2, kh=2, kw=2, stride_h=2, stride_w=2, pad_h=0, pad_w=0,
                    dil_h=1, dil_w=1, mode=1, count_include_pad=1, divisor=0, pad_h_end=0, pad_w_end=0)
    assert lib.mk_mps_pool2d_check(ctypes.byref(pool), E) == MK_OK and empty.value == 0
    assert lib.mk_mps_pool2d_is_avg(ctypes.byref(pool)) == 1
    wp = WindowPlan()
    assert lib.mk_mps_pool2d_plan(ctypes.byref(pool), ctypes.byref(wp)) == MK_OK and (wp.gp, wp.gq) == (2, 2)
    for field, v, words in (("mode", 3, "mode 3 is neither max (0), avg (1) nor adaptive avg (2)"), ("kh", 0, "invalid kernel"),
                            ("stride_w", 0, "invalid kernel"), ("pad_h", -1, "padding"),
                            ("H", -1, "negative size")):
        bad = PoolArgs.from_buffer_copy(pool)
        setattr(bad, field, v)
        assert lib.mk_mps_pool2d_check(ctypes.byref(bad), E) == MK_ERR_INVALID and words in err(lib), field
    pool.mode = 0
    assert lib.mk_mps_pool2d_is_avg(ctypes.byref(pool)) == 0
    pool.C = 0
    assert lib.mk_mps_pool2d_check(ctypes.byref(pool), E) == MK_OK and empty.value == 1
    assert lib.mk_mps_softmax_check(ctypes.byref(SoftmaxArgs(outer=2, n=3, inner=1, log=0)), E) == MK_OK
    assert empty.value == 0
    assert lib.mk_mps_softmax_check(ctypes.byref(SoftmaxArgs(outer=2, n=0, inner=1, log=0)), E) == MK_OK
    assert empty.value == 1
    assert lib.mk_mps_softmax_check(ctypes.byref(SoftmaxArgs(outer=2, n=-3, inner=1, log=0)), E) == MK_ERR_INVALID
    assert "negative size (outer 2, n -3, inner 1)" in err(lib)
    rn = RownormArgs(rows=2, n=8, kind=0, has_weight=1, has_bias=0, eps=1e-5)
    assert lib.mk_mps_rownorm_check(ctypes.byref(rn), B, None, E) == MK_OK and empty.value == 0
    assert lib.mk_mps_rownorm_check(ctypes.byref(rn), None, None, E) == MK_ERR_INVALID
    assert "without the buffer" in err(lib)
    rn.kind = 5
    assert lib.mk_mps_rownorm_check(ctypes.byref(rn), B, B, E) == MK_ERR_INVALID and "kind 5" in err(lib)
    rn.kind, rn.rows = 1, 0
    assert lib.mk_mps_rownorm_check(ctypes.byref(rn), B, B, E) == MK_OK and empty.value == 1
    rn.n = -1
    assert lib.mk_mps_rownorm_check(ctypes.byref(rn), B, B, E) == MK_ERR_INVALID and "negative size" in err(lib)
    assert lib.mk_mps_group_norm_check(ctypes.byref(GroupNormArgs(N=1, C=-2, HW=1, groups=1)), None, None, E) \
        == MK_ERR_INVALID and "negative size (N 1, C -2, HW 1)" in err(lib)
    assert lib.mk_mps_batch_norm_check(ctypes.byref(BatchNormArgs(N=-1, C=2, HW=1, training=1)), None, None, None,
                                       None, E) == MK_ERR_INVALID and "negative size (N -1" in err(lib)
    gn = GroupNormArgs(N=2, C=6, HW=4, groups=4, has_weight=0, has_bias=1, eps=1e-5)
    assert lib.mk_mps_group_norm_check(ctypes.byref(gn), None, B, E) == MK_ERR_INVALID
    assert "4 groups do not divide 6 channels" in err(lib)
    gn.groups = 3
    assert lib.mk_mps_group_norm_check(ctypes.byref(gn), None, B, E) == MK_OK and empty.value == 0
    assert lib.mk_mps_group_norm_check(ctypes.byref(gn), None, None, E) == MK_ERR_INVALID
    bn = BatchNormArgs(N=1, C=3, HW=1, training=1, has_running=1, has_weight=0, has_bias=0, eps=1e-5,
                       momentum=0.1)
    assert lib.mk_mps_batch_norm_check(ctypes.byref(bn), B, B, None, None, E) == MK_ERR_INVALID
    assert "more than 1 value per channel (N*H*W = 1)" in err(lib)
    bn.HW = 10
    assert lib.mk_mps_batch_norm_check(ctypes.byref(bn), B, B, None, None, E) == MK_OK and empty.value == 0
    assert lib.mk_mps_batch_norm_updates(ctypes.byref(bn)) == 1
    assert lib.mk_mps_unbias(ctypes.byref(bn)) == pytest.approx(10 / 9)
    assert lib.mk_mps_batch_norm_check(ctypes.byref(bn), B, None, None, None, E) == MK_ERR_INVALID
    bn.training, bn.has_running = 0, 0
    assert lib.mk_mps_batch_norm_updates(ctypes.byref(bn)) == 0
    assert lib.mk_mps_batch_norm_check(ctypes.byref(bn), None, None, None, None, E) == MK_ERR_INVALID
    assert "inference needs running_mean and running_var" in err(lib)
    bn.N, bn.HW = 1, 1
    assert lib.mk_mps_unbias(ctypes.byref(bn)) == 1.0


def test_norm_graph_inputs_in_placeholder_order(lib):
    w = World()
    bufs = [w.buffer(np.zeros(i + 1, np.float32)) for i in range(5)]
    ptr = [ctypes.pointer(b) for b in bufs]
    arr = (P(Buffer) * 5)()
    assert lib.mk_mps_norm_inputs(arr, ptr[0], 0, ptr[1], ptr[2], 1, ptr[3], 0, ptr[4]) == 2
    assert [arr[i].contents.nbytes for i in range(2)] == [4, 16]
    assert lib.mk_mps_norm_inputs(arr, ptr[0], 1, ptr[1], ptr[2], 1, ptr[3], 1, ptr[4]) == 5
    assert [arr[i].contents.nbytes for i in range(5)] == [4, 8, 12, 16, 20]
    assert lib.mk_mps_norm_inputs(arr, ptr[0], 1, ptr[1], ptr[2], 0, None, 1, ptr[4]) == 4
    assert [arr[i].contents.nbytes for i in range(4)] == [4, 8, 12, 20]


# ------------------------------------------------------------------------ MPS ops: host halves
def test_mps_check_and_done(lib):
    w, sim = World(), World(SIM)
    assert lib.mk_mps_check(ctypes.byref(w.dev), F16, b"op") == MK_OK
    assert lib.mk_mps_check(ctypes.byref(sim.dev), F32, b"op") == MK_ERR_INVALID and "simulated" in err(lib)
    assert lib.mk_mps_check(ctypes.byref(w.dev), 7, b"op") == MK_ERR_INVALID and "dtype 7" in err(lib)
    t = Timing(3.0, 4.0)
    assert lib.mk_mps_done(MK_OK, ctypes.byref(t)) == MK_OK and (t.gpu_ms, t.wall_ms) == (0, 0)
    t = Timing(3.0, 4.0)
    assert lib.mk_mps_done(MK_ERR_INVALID, ctypes.byref(t)) == MK_ERR_INVALID and t.gpu_ms == 3.0
    assert lib.mk_mps_done(MK_OK, None) == MK_OK


def test_gemm_host_half(lib):
    w = World()
    A, Bm = np.ones(15, np.float32), np.ones(20, np.float32)
    C, out = np.full(12, 2, np.float32), np.full(12, 9, np.float32)
    bA, bB, bC, bO = (w.buffer(x) for x in (A, Bm, C, out))
    st = ctypes.c_int(-1)

    def host(a, A=bA, B=bB, C=bC, out=bO, sa=0, sb=0, dtype=F32):
        return lib.mk_mps_gemm_host(ctypes.byref(w.dev), ctypes.byref(a), dtype, A and ctypes.byref(A),
                                    B and ctypes.byref(B), C and ctypes.byref(C), out and ctypes.byref(out),
                                    sa, sb, ctypes.byref(st))
    assert host(gemm_args()) == 0 and st.value == MK_OK                   # for the GPU
    assert host(gemm_args(M=0)) == 1 and st.value == MK_OK                # empty
    assert host(gemm_args(K=0, has_c=1, beta=0.5, lda=0, ldb=4)) == 1 and st.value == MK_OK
    np.testing.assert_array_equal(out, 1.0)                               # K == 0: beta * C
    assert host(gemm_args(), sa=1) == 1 and st.value == MK_ERR_INVALID and "out overlaps A or B" in err(lib)
    assert host(gemm_args(), out=bA) == 1 and "out overlaps" in err(lib)   # the same memory
    assert host(gemm_args(), A=w.buffer(A[:-1])) == 1 and "buffer A holds 56 bytes, the arguments need 60" in err(lib)
    assert host(gemm_args(has_c=1), C=w.buffer(C[:-1])) == 1 and "buffer C holds" in err(lib)
    assert host(gemm_args(), out=None) == 1 and "buffer out is NULL" in err(lib)
    assert host(gemm_args(), dtype=3) == 1 and "dtype 3" in err(lib)
    sim = World(SIM)
    assert lib.mk_mps_gemm_host(ctypes.byref(sim.dev), ctypes.byref(gemm_args()), F32, None, None, None, None, 0, 0,
                                ctypes.byref(st)) == 1 and "simulated" in err(lib)


def test_fused_activation_checks(lib):
    """gemm / conv2d: activation codes past MK_ACT_* are invalid; the graph path (a fused
    activation on mps) takes dense operands only; K == 0 / C == 0 with an activation are
    refused on the host (the Python layer computes them)."""
    need, empty = Need(), ctypes.c_int(-1)
    for act, want in ((0, MK_OK), (4, MK_OK), (5, MK_ERR_INVALID), (-1, MK_ERR_INVALID)):
        assert lib.mk_mps_gemm_check(ctypes.byref(gemm_args(activation=act)), F32, ctypes.byref(need)) == want
        assert lib.mk_mps_conv2d_check(ctypes.byref(conv_args(activation=act, has_bias=0)), None,
                                       ctypes.byref(empty)) == want
        if want != MK_OK:
            assert f"activation {act} is not MK_ACT_*" in err(lib)
    dense = [gemm_args(activation=2), gemm_args(activation=1, batch=3, stride_a=0, stride_c=0, has_c=1),
             gemm_args(activation=3, trans_a=1, lda=3, trans_b=1, ldb=5)]
    for a in dense:
        assert lib.mk_mps_gemm_graph_check(ctypes.byref(a)) == MK_OK
    for kw in (dict(lda=6), dict(ldc=5, stride_out=15), dict(batch=2, stride_a=16), dict(batch=2, stride_out=13),
               dict(batch=2, has_c=1, stride_c=5)):
        assert lib.mk_mps_gemm_graph_check(ctypes.byref(gemm_args(activation=4, **kw))) == MK_ERR_UNSUPPORTED, kw
        assert "needs dense operands" in err(lib)
    w = World()
    st = ctypes.c_int(-1)
    out = w.buffer(np.zeros(12, np.float32))
    assert lib.mk_mps_gemm_host(ctypes.byref(w.dev), ctypes.byref(gemm_args(K=0, activation=1)), F32, None, None,
                                None, ctypes.byref(out), 0, 0, ctypes.byref(st)) == 1
    assert st.value == MK_ERR_UNSUPPORTED and "K == 0 with a fused activation" in err(lib)
    y = w.buffer(np.zeros(2 * 6 * 3 * 3, np.float32))
    assert lib.mk_mps_conv2d_host(ctypes.byref(w.dev), ctypes.byref(conv_args(C=0, groups=1, has_bias=0,
                                                                              activation=2)),
                                  F32, None, ctypes.byref(y), ctypes.byref(st)) == 1
    assert st.value == MK_ERR_UNSUPPORTED and "C == 0 with a fused activation" in err(lib)


def test_gemm_prefill_of_buffers_and_encodes(lib):
    w = World()
    C = np.arange(12, dtype=np.float32)
    out = np.full(12, 9, np.float32)
    bC, bO = w.buffer(C), w.buffer(out)
    a = gemm_args(has_c=1)
    lib.mk_mps_gemm_prefill_buffers(ctypes.byref(a), F32, ctypes.byref(bC), ctypes.byref(bO), C.ctypes.data,
                                    out.ctypes.data)
    np.testing.assert_array_equal(out, C)
    out[:] = 9
    lib.mk_mps_gemm_prefill_buffers(ctypes.byref(gemm_args()), F32, None, ctypes.byref(bO), None, out.ctypes.data)
    np.testing.assert_array_equal(out, 0)
    x = C.copy()                                        # C is out: left alone
    bx = w.buffer(x)
    lib.mk_mps_gemm_prefill_buffers(ctypes.byref(gemm_args(has_c=1)), F32, ctypes.byref(bx), ctypes.byref(bx),
                                    x.ctypes.data, x.ctypes.data)
    np.testing.assert_array_equal(x, C)
    plan, e, per = GemmPlan(), ctypes.c_int(), ctypes.c_int()
    for kw, want in ((dict(batch=4, stride_a=15, stride_b=20, stride_c=12, stride_out=12), (1, 4)),
                     (dict(batch=4, stride_a=0, stride_b=20, stride_out=12), (4, 1)),     # broadcast A
                     (dict(batch=1), (1, 1))):
        a = gemm_args(**kw)
        lib.mk_mps_gemm_plan_make(ctypes.byref(a), ctypes.byref(plan))
        lib.mk_mps_gemm_encodes(ctypes.byref(plan), ctypes.byref(a), ctypes.byref(e), ctypes.byref(per))
        assert (e.value, per.value) == want, kw


def attn_args(**kw):
    a = AttnArgs(B=2, Hq=4, Hk=2, Hv=2, L=3, S=5, E=8, Ev=8, q_sb=4 * 3 * 8, q_sh=3 * 8, k_sb=2 * 5 * 8, k_sh=5 * 8,
                 v_sb=2 * 5 * 8, v_sh=5 * 8, mask=0, m_sb=0, m_sh=0, m_sl=0, m_ss=0, causal=0, scale=0.5)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_attention_host_half(lib):
    w = World()
    empty = ctypes.c_int(-1)
    mask = w.buffer(np.zeros(15, np.float32))
    check = lambda a, m=None: lib.mk_mps_attention_check(ctypes.byref(a), m and ctypes.byref(m), ctypes.byref(empty))  # noqa: E731
    assert check(attn_args()) == MK_OK and empty.value == 0
    assert check(attn_args(Ev=0, v_sb=0, v_sh=0)) == MK_OK and empty.value == 1
    assert check(attn_args(Hk=3)) == MK_ERR_INVALID and "invalid sizes" in err(lib)
    assert check(attn_args(mask=9)) == MK_ERR_INVALID and "mask kind 9" in err(lib)
    assert check(attn_args(q_sh=7)) == 4 + 3 and "C-contiguous" in err(lib)      # MK_ERR_UNSUPPORTED
    assert check(attn_args(q_sb=0)) == MK_OK                                     # a broadcast batch
    assert check(attn_args(mask=2, m_sl=5, m_ss=1)) == MK_ERR_INVALID and "mask buffer is NULL" in err(lib)
    assert check(attn_args(mask=2, m_sl=5, m_ss=1), mask) == MK_OK
    sh = AttnShapes()
    lib.mk_mps_attention_shapes_of(ctypes.byref(attn_args(q_sb=0, mask=2, m_sb=15, m_sl=5, m_ss=1)), ctypes.byref(sh))
    assert (sh.bq, sh.bk, sh.bv, sh.gk, sh.gv, sh.mb, sh.mh, sh.ml, sh.ms, sh.batch, sh.bw, sh.bo) ==         (1, 2, 2, 2, 2, 2, 1, 3, 5, 2, 2, 2)
    lib.mk_mps_attention_shapes_of(ctypes.byref(attn_args(q_sb=0, k_sb=0, v_sb=0, mask=2, m_sb=15, m_sl=5, m_ss=1)),
                                   ctypes.byref(sh))
    assert (sh.batch, sh.bw, sh.bo) == (1, 2, 2)                                # the mask carries the batch
    assert lib.mk_mps_attention_fusable(ctypes.byref(attn_args(Hk=4, Hv=4, k_sh=5 * 8, v_sh=5 * 8))) == 1
    for kw in (dict(), dict(Hk=4, Hv=4, mask=1), dict(Hk=4, Hv=4, Ev=4), dict(Hk=4, Hv=4, q_sb=0),
               dict(Hk=4, Hv=4, E=0, Ev=0)):
        assert lib.mk_mps_attention_fusable(ctypes.byref(attn_args(**kw))) == 0, kw
    assert lib.mk_mps_attention_fusable(ctypes.byref(attn_args(Hk=4, Hv=4, B=1, q_sb=0))) == 1
    out = np.full(2 * 4 * 3 * 8, 7, np.float16)
    st = ctypes.c_int(-1)
    bo = w.buffer(out)
    assert lib.mk_mps_attention_host(ctypes.byref(w.dev), ctypes.byref(attn_args(S=0)), F16, ctypes.byref(bo),
                                     ctypes.byref(st)) == 1 and st.value == MK_OK
    np.testing.assert_array_equal(out, 0)
    short = w.buffer(out[:-1])
    assert lib.mk_mps_attention_host(ctypes.byref(w.dev), ctypes.byref(attn_args(S=0)), F16, ctypes.byref(short),
                                     ctypes.byref(st)) == 1 and st.value == MK_ERR_INVALID
    assert lib.mk_mps_attention_host(ctypes.byref(w.dev), ctypes.byref(attn_args()), F16, ctypes.byref(bo),
                                     ctypes.byref(st)) == 0


# ------------------------------------------------------------------------ handles, encoding, graph runs
def test_handles(lib):
    w = World()
    assert lib.mk_shim_out(None, b"mk_buffer_wrap") == MK_ERR_INVALID and err(lib) == "mk_buffer_wrap: out is NULL"
    slot = ctypes.c_void_p(1234)
    assert lib.mk_shim_out(ctypes.byref(slot), b"op") == MK_OK and slot.value is None
    dp = P(Device)()
    assert lib.mk_shim_device_new(w.dev.ops, ctypes.byref(dp)) == MK_OK
    assert dp.contents.impl is None and dp.contents.ops.contents.kind == METAL
    bp = P(Buffer)()
    host = np.zeros(4, np.float32)
    assert lib.mk_shim_buffer_new(ctypes.byref(w.dev), host.ctypes.data, 16, READ, 0, ctypes.byref(bp)) == MK_OK
    b = bp.contents
    assert (b.impl, b.host, b.nbytes, b.flags, b.zero_copy) == (None, host.ctypes.data, 16, READ, 0)
    lp = ctypes.c_void_p()
    assert lib.mk_shim_library_new(ctypes.byref(w.dev), ctypes.byref(lp)) == MK_OK
    lib_struct = ctypes.cast(lp, P(Library)).contents
    assert lib_struct.impl is None and ctypes.addressof(lib_struct.device.contents) == ctypes.addressof(w.dev)
    pp = P(Pipeline)()
    assert lib.mk_shim_pipeline_new(ctypes.byref(w.dev), 896, 32, b"gemm_simd_f32", ctypes.byref(pp)) == MK_OK
    assert (pp.contents.max_threads, pp.contents.exec_width, pp.contents.name) == (896, 32, b"gemm_simd_f32")
    assert list(pp.contents.min_bytes) == [0] * MAX_BINDINGS
    lib.mk_shim_pipeline_free(pp)
    libc = ctypes.CDLL(None)
    for h in (dp, bp, lp):
        libc.free(ctypes.cast(h, ctypes.c_void_p))
    assert lib.mk_shim_wrap_check(None, 4) == MK_ERR_INVALID and "host is NULL" in err(lib)
    assert lib.mk_shim_wrap_check(None, 0) == MK_OK
    assert lib.mk_shim_library_check(None) == MK_ERR_INVALID and "source is NULL" in err(lib)
    assert lib.mk_shim_library_check(b"kernel void k() {}") == MK_OK
    other = World()
    good = Library(ctypes.pointer(w.dev), None)
    assert lib.mk_shim_pipeline_check(ctypes.byref(w.dev), ctypes.byref(good), b"k") == MK_OK
    assert lib.mk_shim_pipeline_check(ctypes.byref(other.dev), ctypes.byref(good), b"k") == MK_ERR_INVALID
    assert lib.mk_shim_pipeline_check(ctypes.byref(w.dev), ctypes.byref(good), None) == MK_ERR_INVALID
    assert lib.mk_shim_pipeline_check(ctypes.byref(w.dev), None, b"k") == MK_ERR_INVALID
    info = DeviceInfo(architecture=b"applegpu_g14s")
    lib.mk_shim_fill_info(ctypes.byref(info), b"Apple M2 Pro", 8, 1024, 32768, 11 << 30, 1, 16384)
    assert (info.name, info.architecture, info.family, info.is_simulator, info.simd_width,
            info.max_threads_per_threadgroup, info.max_threadgroup_memory, info.recommended_working_set,
            info.unified_memory, info.page_size) == (b"Apple M2 Pro", b"applegpu_g14s", 8, 0, 32, 1024, 32768,
                                                     11 << 30, 1, 16384)
    lib.mk_shim_fill_info(ctypes.byref(info), b"x" * 300, 8, 1, 1, 1, 7, 1)          # truncated, terminated
    assert info.name == b"x" * 127 and info.unified_memory == 1


def test_page_span_for_wraps_and_alloc_lengths(lib):
    s = PageSpan(1, 2, 3)
    assert lib.mk_shim_page_span_of(None, 0, 16384, ctypes.byref(s)) == MK_OK and (s.base, s.offset, s.length) == (0, 0, 0)
    assert lib.mk_shim_page_span_of(16384 + 10, 100, 16384, ctypes.byref(s)) == MK_OK
    assert (s.base, s.offset, s.length) == (16384, 10, 16384)
    assert lib.mk_shim_page_span_of((1 << 64) - 10, 100, 16384, ctypes.byref(s)) == MK_ERR_INVALID
    assert "do not fit the address space in pages of 16384 bytes" in err(lib)
    assert [lib.mk_shim_alloc_length(n) for n in (0, 1, 16, 17)] == [16, 1, 16, 17]


def test_macro_lists(lib):
    got = []

    @MACRO_CB
    def add(ctx, m):
        got.append((m.contents.name, m.contents.value, m.contents.is_int))
        return -1 if m.contents.name == b"REFUSE" else 0
    lst = (ctypes.c_char_p * 5)(b"MK_BM=64", b"", b"FLAG", b"S=x", None)
    assert lib.mk_shim_each_macro(lst, add, None) == MK_OK
    assert got == [(b"MK_BM", b"64", 1), (b"FLAG", b"1", 1), (b"S", b"x", 0)]
    assert lib.mk_shim_each_macro(None, add, None) == MK_OK
    assert lib.mk_shim_each_macro((ctypes.c_char_p * 3)(b"A=1", b"=2", None), add, None) == MK_ERR_INVALID
    assert "malformed macro '=2'" in err(lib)
    assert lib.mk_shim_each_macro((ctypes.c_char_p * 2)(b"REFUSE=1", None), add, None) == MK_ERR_INVALID
    assert "malformed macro 'REFUSE=1' (NAME=VALUE, UTF-8)" in err(lib)


def test_encoding_a_dispatch_list(lib):
    """mk_shim_encode: what Metal's encoder is asked, in order, recorded by callbacks."""
    w = World()
    p1, p2 = w.pipeline(), w.pipeline()
    p2.name = b"second"
    arr = np.zeros(16, np.float32)
    buf = w.buffer(arr)
    x1 = w.dispatch(p1, grid=(4, 1, 1), tg=(32, 1, 1), tgmem=(100, 0, 0, 16),
                    bindings=[bind_buffer(buf, 8), bind_bytes(b"abcd"), Binding(), bind_bytes(b"x" * 5000)])
    skipped = w.dispatch(p2, grid=(0, 1, 1))
    x2 = w.dispatch(p2, grid=(2, 3, 1), tg=(8, 8, 1))
    x2.grid_units = 1
    lst = (Dispatch * 3)(x1, skipped, x2)
    calls = []
    temp_ok = [0]
    enc = Encoder(None,
                  Encoder._fields_[1][1](lambda c, p: calls.append(("pipeline", p.contents.name))),
                  Encoder._fields_[2][1](lambda c, j, b, off: calls.append(("buffer", j, b.contents.nbytes, off))),
                  Encoder._fields_[3][1](lambda c, j, by, n: calls.append(("bytes", j, ctypes.string_at(by, n)))),
                  Encoder._fields_[4][1](lambda c, j, by, n: calls.append(("temp", j, n)) or temp_ok[0]),
                  Encoder._fields_[5][1](lambda c, k, n: calls.append(("tg", k, n))),
                  Encoder._fields_[6][1](lambda c, g, t, u: calls.append(("dispatch", tuple(g[:3]), tuple(t[:3]), u))))
    assert lib.mk_shim_encode(lst, 3, ctypes.byref(enc)) == MK_OK
    assert calls == [("pipeline", b"k"), ("buffer", 0, 64, 8), ("bytes", 1, b"abcd"), ("temp", 3, 5000),
                     ("tg", 0, 112), ("tg", 3, 16), ("dispatch", (4, 1, 1), (32, 1, 1), 0),
                     ("pipeline", b"second"), ("dispatch", (2, 3, 1), (8, 8, 1), 1)]
    calls.clear()
    temp_ok[0] = -1
    assert lib.mk_shim_encode(lst, 3, ctypes.byref(enc)) == 5 and "constant buffer of 5000 bytes" in err(lib)
    assert calls[-1] == ("temp", 3, 5000)                      # stops there


def test_checking_a_dispatch_list_and_walking_buffers(lib):
    w = World()
    p = w.pipeline(max_threads=64)
    x_ok = w.dispatch(p, tg=(64, 1, 1))
    x_bad = w.dispatch(p, tg=(32, 1, 1), tgmem=(32000, 0, 0, 0))
    seen = []

    @STATIC_TG_CB
    def static(ctx, pipe):
        seen.append(pipe.contents.max_threads)
        return 1024
    assert lib.mk_shim_check_dispatches(ctypes.byref(w.dev), (Dispatch * 1)(x_ok), 1, static, None, 32768) == MK_OK
    lst = (Dispatch * 2)(x_ok, x_bad)
    assert lib.mk_shim_check_dispatches(ctypes.byref(w.dev), lst, 2, static, None, 32768) == MK_ERR_INVALID
    assert "dispatch 1 needs 33024 bytes of threadgroup memory" in err(lib) and seen == [64, 64, 64]
    a, b = w.buffer(np.zeros(1, np.float32)), w.buffer(np.zeros(2, np.float32))
    walked = []
    cb = BUFFER_CB(lambda buf: walked.append(buf.contents.nbytes))
    lst = (Dispatch * 2)(w.dispatch(p, bindings=[bind_buffer(a), bind_bytes(b"x")]),
                         w.dispatch(p, bindings=[bind_buffer(b), bind_buffer(a)]))
    lib.mk_shim_each_bound_buffer(lst, 2, cb)
    assert walked == [4, 8, 4]
    walked.clear()
    lib.mk_shim_each((P(Buffer) * 3)(ctypes.pointer(a), None, ctypes.pointer(b)), 3, cb)
    assert walked == [4, 8]
    t = Timing(1.0, 1.0)
    lib.mk_shim_set_wall(ctypes.byref(t), lib.mk_shim_now_ms() - 5.0)
    assert 5.0 <= t.wall_ms < 5000 and t.gpu_ms == 1.0
    lib.mk_shim_set_wall(None, 0.0)


def test_graph_prepare_and_copy_back(lib):
    w = World()
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    bx, by = w.buffer(x), w.buffer(y)
    ins = (GraphIO * 1)(GraphIO(ctypes.pointer(bx), 0, 1))
    outs = (GraphIO * 1)(GraphIO(ctypes.pointer(by), 64, 2))
    si, so = (ctypes.c_int * 1)(), (ctypes.c_int * 1)()

    def prep(in_bytes, out_bytes, nin=1, nout=1, d=w.dev):
        return lib.mk_shim_graph_prepare(ctypes.byref(d), ins, (ctypes.c_size_t * 1)(in_bytes), nin, outs,
                                         (ctypes.c_size_t * 1)(out_bytes), nout, si, so, b"mk_mps_softmax")
    assert prep(32, 32) == MK_OK and (si[0], so[0]) == (0, 1)
    assert prep(33, 32) == MK_ERR_INVALID and err(lib) == ("mk_mps_softmax: buffer input 0 holds 32 bytes, the "
                                                           "arguments need 33")
    assert prep(32, 40) == MK_ERR_INVALID and "buffer output 0 holds 32 bytes" in err(lib)
    assert prep(32, 32, nin=9) == MK_ERR_INVALID and "more than 8 graph inputs or outputs" in err(lib)
    assert prep(32, 32, d=World().dev) == MK_ERR_INVALID and "belongs to another device" in err(lib)
    dst = [np.zeros(4, np.float32) for _ in range(3)]
    src = [np.arange(4, dtype=np.float32) + 10 * i for i in range(3)]
    lib.mk_shim_graph_copy_back((ctypes.c_void_p * 3)(*[d.ctypes.data for d in dst]),
                                (ctypes.c_void_p * 3)(*[s_.ctypes.data for s_ in src]),
                                (ctypes.c_size_t * 3)(16, 16, 8), (ctypes.c_int * 3)(1, 0, 1), 3)
    np.testing.assert_array_equal(dst[0], src[0])
    np.testing.assert_array_equal(dst[1], 0)                       # not staged: its own memory
    np.testing.assert_array_equal(dst[2], [20, 21, 0, 0])          # its tensor's bytes only
    v = np.full(6, -1, np.int32)
    lib.mk_shim_iota(v.ctypes.data, 5)
    np.testing.assert_array_equal(v, [0, 1, 2, 3, 4, -1])


# ------------------------------------------------------------------------ the .m files themselves
def _exported(everything):
    from test_abi_drift import c_model      # mpskern.h's mk_mps_* (written by MK_KERNELS)
    names = {n for n in c_model().functions if n.startswith("mk_mps_")}
    for table in re.findall(r"metal_(?:ops|provider) = \{(.*?)\};", everything, re.S):
        names |= {n for n in re.findall(r"=\s*(\w+)", table) if n not in ("NULL", "MK_DEVICE_METAL")}
    return names


def _body(everything, name):
    m = re.search(r"^(?:static )?[\w ]+\*?\s*\b" + name + r"\s*\([^;{]*\)\s*\{\n", everything, re.M)
    assert m, name
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(everything[i], 0)
        i += 1
    return everything[m.end():i - 1]


def _is_guard(inner):
    return (re.match(r"@autoreleasepool \{\s*@try \{", inner) and
            re.search(r"@catch \(NSException \*\w+\) \{\s*(return mk_objc_exception|\(void\)mk_objc_exception"
                      r"|if \(why)", inner))


# the frames that hold the one guard (objc/mk_metal.h, objc/mk_mps.h): a body that is one
# `return mk_objc_guard(op, ^{...})` / `return mk_mps_op(...)` runs wholly inside it
GUARDED_CALL = re.compile(r'(?:const char \*op = "\w+";\s*)?return (?:mk_objc_guard|mk_mps_op)\(')


def test_no_objective_c_exception_crosses_the_c_abi():
    everything = "\n".join(p.read_text() for p in sorted(OBJC.glob("mk_*.m")))
    names = _exported(everything)
    assert len(names) > 7 + 12
    for frame in ("mk_objc_guard", "mk_objc_release"):
        assert _is_guard(_body(everything, frame).strip()), frame
    assert re.search(r"^mk_status mk_mps_op\([^;{]*\)\s*\{\s*return mk_objc_guard\(op, \^mk_status \{",
                     everything, re.M), "mk_mps_op is not inside mk_objc_guard"
    for name in sorted(names):
        body = _body(everything, name)
        if not re.search(r"\[\w", body):        # no message send (mk_library_load): nothing can raise
            continue
        inner = body.strip()
        if GUARDED_CALL.match(inner):
            assert inner.endswith("});"), f"{name}: code after the guarded block"
            continue
        assert inner.startswith("@autoreleasepool {"), name
        assert re.match(r"@autoreleasepool \{\s*@try \{", inner), f"{name}: the body is not inside @try"
        assert re.search(r"@catch \(NSException \*\w+\) \{\s*(return mk_objc_exception|\(void\)mk_objc_exception"
                         r"|if \(why)", inner), f"{name}: no @catch turning the exception into an error"
    # the architecture read (key-value coding on a proxy device can raise) is guarded itself
    arch = _body(everything, "architecture_name")
    assert arch.strip().startswith("@try") and "valueForKey:@\"architecture\"" in arch


OBJC_MARK = re.compile(r"\[\s*[\w.()\->]+\s+\w+|@|\bNS[A-Z]\w*|\bMTL\w*|\bMPS\w*|\bid<|__bridge|\^|\bMK[A-Z]\w*\b"
                       r"|\bmk_metal_(?:device|buffer)\(|\bdispatch_\w+")
# what makes a statement host logic: a decision, arithmetic, a store, a copy, a message
LOGIC = re.compile(r"==|!=|<=|>=|&&|\|\||(?<![-\w])!\w|\w\s*<\s*\w|\w\s*>\s*\w|\?|[\w\])]\s*[-+/%]\s*[\w(]"
                   r"|[\w)\]]\s*\*\s*[\w(]|->\w+\s*=[^=]|\*\w+\s*=[^=]|\b(?:for|while|switch|case)\b"
                   r"|\b(?:memcpy|memmove|memset|snprintf|calloc|malloc|free|strdup|mk_set_error)\s*\(")
# taken out first: status propagation, a failed Apple allocation's early return, the
# declarator of a declaration (`T *x`), a nil/NULL test of an Objective-C result
NOT_LOGIC = re.compile(r"\bst\s*[!=]=\s*MK_OK\b|\)\s*!=\s*MK_OK\b|^if \(!\w+\) return (?:nil|MK_ERR_\w+);$"
                       r"|^(?:const )?(?:unsigned |struct )?\w+\s+\*+\s*(?=\w)|^(?:const )?\w+ \*?\w+\[\d*\]"
                       r"|@\"[^\"]*\"")


def host_logic_lines(path):
    """Lines of an .m file that are host logic no Linux test can execute: comments removed,
    statements joined (a multi-line message send is one statement), function signatures
    skipped. A statement that uses Objective-C (a message send, an @-construct, an
    NS*/MTL*/MPS*/MK* name, id<...>, __bridge, a block, dispatch_*, or a variable declared
    with an Objective-C type) is glue. A plain-C statement is host logic
    when -- after status propagation (`st != MK_OK`), `if (!x) return nil/MK_ERR;` and
    declarators are taken out -- it decides or computes: a comparison, logical or
    arithmetic operator, a ternary, a loop or switch, a store through a pointer or into a
    struct field, a copy, an allocation or an error message. Calls that only pass values on
    (into the plain-C host layer) are glue. Every line of a host-logic statement counts."""
    src = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), path.read_text(), flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    objc_vars = set(re.findall(r"\b(?:MK[A-Z]\w*|NS\w+|MTL\w+|MPS\w+)(?:<[^;(]*?>)?\s*\*\s*(\w+)", src)) | \
        set(re.findall(r"\bid<\w+>\s*(\w+)", src)) | set(re.findall(r"\bBOOL\s+(\w+)", src))
    prop = re.compile(r"\b(?:" + "|".join(sorted(objc_vars)) + r")\b") if objc_vars else None
    count, stmt, signature = 0, [], False
    for ln in src.split("\n"):
        s = ln.strip()
        if not s or s.startswith("#"):
            continue
        if ln[:1] not in (" ", "\t"):               # a signature or a top-level declaration
            signature = not s.endswith(("{", ";", "}"))
            continue
        if signature:
            signature = not s.endswith("{")
            continue
        stmt.append(s)
        if not s.endswith((";", "{", "}")) and s != "else":
            continue                                # the statement goes on
        text = re.sub(r'(?<!@)"(?:[^"\\]|\\.)*"', '""', " ".join(stmt))
        glue = OBJC_MARK.search(text) or (prop and prop.search(text))
        if not glue and LOGIC.search(NOT_LOGIC.sub("", text)):
            count += len(stmt)
        stmt = []
    return count


def test_host_logic_left_in_the_objc_files_is_under_50_lines():
    counts = {p.name: host_logic_lines(p) for p in sorted(OBJC.glob("mk_*.m"))}
    total = sum(counts.values())
    print("host-logic lines in objc/*.m:", counts, "total", total)
    assert total < 50, counts
