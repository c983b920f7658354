"""The macOS build, checked from Linux: setup.py's darwin branch (ObjC compiled apart with
-fobjc-arc, frameworks linked), the shim defining every MPS entry point of the C ABI, and
objc/check_shim.py (compile with -Werror and link for arm64-apple-macos12 against a real
macOS SDK; docs/shim-check.md) when the SDK and clang are here."""
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_abi_drift import c_model

ROOT = Path(__file__).resolve().parent.parent


def load_setup(monkeypatch, platform_name):
    """Run setup.py as on `platform_name` without building: returns (module globals,
    the keyword arguments setup() got)."""
    import setuptools
    import setuptools.command.build_ext  # noqa: F401  (imported before faking the platform:
    import setuptools.command.build_py   # noqa: F401   they read sysconfig at import)
    import Cython.Build
    got = {}
    monkeypatch.setattr(sys, "platform", platform_name)
    monkeypatch.setattr(setuptools, "setup", lambda **kw: got.update(kw))
    monkeypatch.setattr(Cython.Build, "cythonize", lambda exts, **kw: exts)
    # an older target (as Python's own may be) must be raised to the shim's; setenv also
    # makes monkeypatch remove what setup.py sets when the test ends
    monkeypatch.setenv("MACOSX_DEPLOYMENT_TARGET", "10.9")
    monkeypatch.chdir(ROOT)
    g = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_under_test")
    return g, got


def test_darwin_build_compiles_objc_apart_and_links_frameworks(monkeypatch):
    g, got = load_setup(monkeypatch, "darwin")
    groups = g["native_sources"]()
    objc = [(flags, srcs) for flags, srcs in groups if any(s.endswith(".m") for s in srcs)]
    assert len(objc) == 1, "ObjC sources form exactly one group"
    flags, srcs = objc[0]
    assert sorted(srcs) == sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("objc/*.m"))
    assert "objc/mk_metal_device.m" in srcs and "objc/mk_mps_graph.m" in srcs
    assert "-fobjc-arc" in flags and "-mmacosx-version-min=12.0" in flags
    for other_flags, other in groups:
        if other_flags is not flags:
            assert "-fobjc-arc" not in other_flags
            assert not any(s.endswith(".m") for s in other)
            assert not any(s.startswith("objc/stub/") for s in other), "the MPS stub is for non-macOS only"
    (ext,) = got["ext_modules"]
    assert "-fobjc-arc" not in ext.extra_compile_args      # never reaches the Cython C
    link = " ".join(ext.extra_link_args)
    for fw in ("Foundation", "CoreFoundation", "Metal", "MetalPerformanceShaders",
               "MetalPerformanceShadersGraph", "Accelerate"):
        assert f"-framework {fw}" in link
    assert os.environ["MACOSX_DEPLOYMENT_TARGET"] == "12.0"


def test_linux_build_has_no_objc(monkeypatch):
    g, got = load_setup(monkeypatch, "linux")
    srcs = [s for _, group in g["native_sources"]() for s in group]
    assert not any(s.endswith(".m") for s in srcs)
    assert "objc/stub/mk_mps_stub.c" in srcs
    (ext,) = got["ext_modules"]
    assert "-framework" not in " ".join(ext.extra_link_args)


def _functions(text, prefix):
    return set(re.findall(r"^mk_status\s+(" + prefix + r"\w+)\s*\(", text, re.M))


def _mps_entry_points():
    """mpskern.h's mk_mps_* (written by metal/mk_args.h's MK_KERNELS list)."""
    return {n for n in c_model().functions if n.startswith("mk_mps_")}


def _expanded(path):
    """The mk_mps_* functions `path` defines once the preprocessor has expanded it (the stub
    writes them through MK_KERNELS)."""
    out = subprocess.run(["cc", "-E", "-P", "-I", str(ROOT / "objc"), "-I", str(ROOT / "metal"),
                          str(ROOT / path)], check=True, capture_output=True, text=True).stdout
    return set(re.findall(r"\bmk_status\s+(mk_mps_\w+)\s*\(", out))


def test_shim_defines_every_mps_entry_point():
    declared = _mps_entry_points()
    assert len(declared) == 8   # gemm conv2d pool2d softmax rownorm group_norm batch_norm attention
    defined = set()
    for p in ROOT.glob("objc/mk_mps*.m"):
        defined |= _functions(p.read_text(), "mk_mps_")
    assert declared <= defined, f"not defined by the shim: {sorted(declared - defined)}"
    stub = _expanded("objc/stub/mk_mps_stub.c")
    assert declared == stub


FRAME_CALL = re.compile(r'(?:const char \*op = "\w+";\s*)?(?:return )?(?:mk_objc_guard|mk_mps_op|mk_objc_release)\(')


def test_every_exported_objc_function_body_is_in_an_autoreleasepool():
    # exported: the ABI's mk_mps_* and every entry of the Metal device-ops table and provider
    sources = {p.name: p.read_text() for p in ROOT.glob("objc/mk_*.m")}
    everything = "\n".join(sources.values())
    names = _mps_entry_points()
    for table in re.findall(r"metal_(?:ops|provider) = \{(.*?)\};", everything, re.S):
        names |= {n for n in re.findall(r"=\s*(\w+)", table) if n not in ("NULL", "MK_DEVICE_METAL")}
    assert len(names) > 7 + 12
    for name in sorted(names):
        m = re.search(r"^(?:static )?[\w ]+\*?\s*\b" + name + r"\s*\([^;{]*\)\s*\{\n(.*\n.*)\n", everything, re.M)
        assert m, f"no definition of {name} in objc/mk_*.m"
        first = " ".join(m.group(1).split())   # its first two lines
        # or one call of a shared frame that holds the pool (objc/mk_metal.h, mk_mps.h; the
        # frames themselves are checked in test_shim_host.py)
        assert first.startswith("@autoreleasepool") or FRAME_CALL.match(first), f"{name} starts with {first!r}"


def _sdk():
    for cand in (os.environ.get("MPSKERN_MACOS_SDK"),
                 "/work/.mirror/hexops-graveyard+sdk-macos-12.0/repo"):
        if cand and os.path.exists(cand):
            return cand
    return None


CHECK_SHIM = ROOT / "objc" / "check_shim.py"
_ROOT_CACHE = []


def _sdk_root():
    """The unpacked SDK folder (check_shim.py --print-root unpacks a git SDK once)."""
    if not _ROOT_CACHE:
        r = subprocess.run([sys.executable, str(CHECK_SHIM), _sdk(), "--print-root"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        _ROOT_CACHE.append(r.stdout.strip())
    return _ROOT_CACHE[0]


def test_check_shim_without_an_sdk_says_what_to_give(tmp_path):
    for argv, env in (([], {"MPSKERN_MACOS_SDK": ""}), ([str(tmp_path / "nothing")], {})):
        r = subprocess.run([sys.executable, str(CHECK_SHIM)] + argv, cwd=tmp_path,
                           capture_output=True, text=True, env=dict(os.environ, **env))
        assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("check_shim: ") and "SDK" in lines[0], lines
    (tmp_path / "notsdk").mkdir()
    r = subprocess.run([sys.executable, str(CHECK_SHIM), str(tmp_path / "notsdk")], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Metal.framework" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(_sdk() is None or not shutil.which("clang-19"),
                    reason="needs a macOS SDK (MPSKERN_MACOS_SDK) and clang-19/lld-19")
def test_check_shim_compiles_and_links_against_the_macos_sdk(tmp_path):
    # from a scratch folder: the script finds objc/ beside itself
    r = subprocess.run([sys.executable, str(CHECK_SHIM), _sdk()], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check_shim: ok" in r.stdout and "arm64-apple-macos12" in r.stdout and "linked" in r.stdout


@pytest.mark.skipif(_sdk() is None or not shutil.which("clang-19"),
                    reason="needs a macOS SDK (MPSKERN_MACOS_SDK) and clang-19/lld-19")
def test_check_shim_fails_on_an_unknown_selector_and_on_a_missing_symbol(tmp_path):
    # a copy of the script beside one planted source each: the check must fail (exit 1)
    # with the compiler's or linker's message, not pass over it
    cases = {"bad.m": ("#import <Metal/Metal.h>\nvoid mk_bad(void) {\n"
                       "    id<MTLDevice> d = MTLCreateSystemDefaultDevice();\n"
                       "    [d newBufferWithNoSuchSelector:4];\n}\n", "newBufferWithNoSuchSelector"),
             "bad.c": ("extern void mk_not_in_any_framework(void);\n"
                       "void mk_bad(void) { mk_not_in_any_framework(); }\n", "mk_not_in_any_framework")}
    for name, (text, needle) in cases.items():
        (tmp_path / name).mkdir()
        objc = tmp_path / name / "objc"
        objc.mkdir()
        shutil.copy(CHECK_SHIM, objc)
        (objc / name).write_text(text)
        r = subprocess.run([sys.executable, str(objc / "check_shim.py"), _sdk()], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and needle in r.stderr and "check_shim: ok" not in r.stdout, \
            (name, r.returncode, r.stdout, r.stderr)


@pytest.mark.slow
@pytest.mark.skipif(_sdk() is None or not shutil.which("clang-19"),
                    reason="needs a macOS SDK (MPSKERN_MACOS_SDK) and clang-19")
def test_shim_also_compiles_for_intel_macs():
    # python.org's macOS Pythons are universal2: setuptools then compiles every source for
    # x86_64 as well, so the shim must (it reports "no Apple silicon GPU" there at run time).
    sdk = _sdk_root()
    fw = f"{sdk}/System/Library/Frameworks"
    srcs = [str(p.relative_to(ROOT)) for p in sorted(ROOT.glob("objc/*.m"))]
    r = subprocess.run(["clang-19", "-target", "x86_64-apple-macos12", "-isysroot", sdk, f"-F{fw}",
                        "-fobjc-arc", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                        "-Iobjc", "-Imetal", "-fsyntax-only"] + srcs,
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(_sdk() is None or not shutil.which("clang-19"),
                    reason="needs a macOS SDK (MPSKERN_MACOS_SDK) and clang-19")
def test_static_analyzer_finds_nothing_in_the_shim():
    # clang's analyzer (null dereferences, nullability, ARC/retain misuse, leaks) over code
    # nobody here can run: the closest thing to executing it.
    sdk = _sdk_root()
    srcs = [str(p) for p in sorted(ROOT.glob("objc/*.m")) + sorted(ROOT.glob("objc/*.c"))]
    r = subprocess.run(["clang-19", "--analyze", "-target", "arm64-apple-macos12", "-isysroot", sdk,
                        f"-F{sdk}/System/Library/Frameworks", "-fobjc-arc", f"-I{ROOT}/objc",
                        f"-I{ROOT}/metal", "-Xclang", "-analyzer-output=text"] + srcs,
                       cwd="/tmp", capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "warning:" not in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(_sdk() is None or not shutil.which("clang-19"),
                    reason="needs a macOS SDK (MPSKERN_MACOS_SDK) and clang-19")
@pytest.mark.parametrize("target", ["arm64-apple-macos12", "x86_64-apple-macos12"])
def test_cpu_kernels_compile_with_clang_for_macos(target):
    # The CPU kernels are built with Apple's clang on a Mac (no GCC target_clones, NEON or
    # SSE vector extensions); here only GCC builds them. mk_cpu_blas.c is left out: this
    # SDK has no Accelerate headers.
    sdk = _sdk_root()
    srcs = [str(p.relative_to(ROOT)) for p in sorted(ROOT.glob("objc/cpu/*.c"))
            if p.name != "mk_cpu_blas.c"]
    r = subprocess.run(["clang-19", "-target", target, "-isysroot", sdk, "-std=gnu11", "-O2",
                        "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-Iobjc",
                        "-Iobjc/cpu", "-Imetal", "-fsyntax-only"] + srcs,
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
