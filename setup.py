"""Build of mpskern: one Cython extension, mpskern._native, holding the C ABI.

objc/ sources are compiled per language with their own flags and linked into it:
  C       objc/*.c objc/cpu/*.c (+ objc/stub/*.c off macOS)   -std=gnu11
  C++     objc/sim/*.cc (the simulator runtime)                -std=c++17
  ObjC    objc/*.m (the Metal/MPS shim, macOS only)            -fobjc-arc
so no language's flags reach another's sources (-fobjc-arc never reaches the Cython C).
The .metal kernels and the simulator's MSL compatibility headers are shipped as package
data (mpskern/_data/) because both Metal and the simulator compile them at run time.
"""
import os
import runpy
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DARWIN = sys.platform == "darwin"
MACOS_MIN = "12.0"   # the shim's deployment target (MPSGraph castTensor, pooling ceilMode, ...)
if DARWIN:
    # One deployment target for every object in the extension (Python's own may be older),
    # so the ObjC shim's availability checks and the linker agree.
    _cur = os.environ.get("MACOSX_DEPLOYMENT_TARGET") or "0"
    if tuple(int(x) for x in _cur.split(".")[:2] if x.isdigit()) < (12, 0):
        os.environ["MACOSX_DEPLOYMENT_TARGET"] = MACOS_MIN

# Cython directives: the one place they are set.
CYTHON_DIRECTIVES = dict(language_level=3, boundscheck=False, wraparound=False,
                         cdivision=True, initializedcheck=False, embedsignature=True)

OPT = ["-O3"] if os.environ.get("MPSKERN_DEBUG") != "1" else ["-O0", "-g"]
# MPSKERN_SANITIZE=1: every native object (C kernels, simulator runtime, the Cython module)
# with AddressSanitizer + UndefinedBehaviorSanitizer, for the sanitizer run (.ci/sanitize)
SANITIZE = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
            "-fno-sanitize=vptr"] if os.environ.get("MPSKERN_SANITIZE") == "1" else []
OPT = OPT + SANITIZE
# -fno-trapping-math: lets the vectoriser turn the CPU kernels' branch-free selects (exp,
# NaN-propagating max) into blends; nothing here reads floating-point exception flags.
# -fno-wrapv undoes Python's -fwrapv (in its CFLAGS): with wrapping int arithmetic, x[q + 1]
# is not provably contiguous and loops stay scalar (the 3x3 depthwise kernel ran 10x slower)
C_FLAGS = OPT + ["-std=gnu11", "-Wall", "-Wno-unused-function", "-fvisibility=hidden",
                 "-fno-trapping-math", "-fno-wrapv"]
CXX_FLAGS = OPT + ["-std=c++17", "-Wall", "-fvisibility=hidden"]
OBJC_FLAGS = OPT + ["-fobjc-arc", "-Wall", "-Wno-unused-parameter", f"-mmacosx-version-min={MACOS_MIN}"]
INCLUDE = [str(ROOT / "objc"), str(ROOT / "metal"), str(ROOT / "objc" / "cpu")]


def rel(paths):
    return sorted(str(p.relative_to(ROOT)) for p in paths)


def native_sources():
    """(language flags, sources) groups compiled into mpskern._native besides the .pyx."""
    c = rel(ROOT.glob("objc/*.c")) + rel(ROOT.glob("objc/cpu/*.c"))
    if not DARWIN:
        c += rel(ROOT.glob("objc/stub/*.c"))
    groups = [(C_FLAGS, c), (CXX_FLAGS, rel(ROOT.glob("objc/sim/*.cc")))]
    if DARWIN:
        groups.append((OBJC_FLAGS, rel(ROOT.glob("objc/*.m"))))
    return groups


def blas():
    """BLAS for the CPU GEMM core: Accelerate on macOS, scipy-openblas32 elsewhere."""
    if DARWIN:
        return dict(define_macros=[("ACCELERATE_NEW_LAPACK", "1")],
                    extra_link_args=["-framework", "Accelerate"])
    import scipy_openblas32 as ob
    return dict(include_dirs=[ob.get_include_dir()], library_dirs=[ob.get_lib_dir()],
                libraries=[ob.get_library()],
                runtime_library_dirs=["$ORIGIN/../scipy_openblas32/lib", ob.get_lib_dir()])


class BuildExt(build_ext):
    def build_extensions(self):
        cc = self.compiler
        for e in (".cc", ".m"):
            if e not in cc.src_extensions:
                cc.src_extensions.append(e)
        jobs = []
        for ext in self.extensions:
            for flags, srcs in native_sources():
                for s in srcs:
                    jobs.append((ext, s, flags))

        def compile_one(job):
            ext, src, flags = job
            return ext, cc.compile([src], output_dir=self.build_temp,
                                   include_dirs=ext.include_dirs, macros=ext.define_macros,
                                   extra_postargs=flags, depends=ext.depends)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for ext, objs in pool.map(compile_one, jobs):
                ext.extra_objects.extend(objs)
        super().build_extensions()


class BuildPy(build_py):
    """Copy metal/ and the simulator's headers into the package as data."""
    def run(self):
        super().run()
        data = Path(self.build_lib) / "mpskern" / "_data"
        for src, dst in (("metal", "metal"), ("objc/sim/include", "sim_include")):
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, data / dst, dirs_exist_ok=True)


def kernel_tables():
    """mpskern/_kernels*.pxi, Cython's side of the kernel families, from metal/mk_args.h's
    MK_KERNELS list (objc/cython_kernels.py; rewritten only when their text changes)."""
    runpy.run_path(str(ROOT / "objc" / "cython_kernels.py"))["write"](ROOT)


def extensions():
    from Cython.Build import cythonize
    kernel_tables()
    b = blas()
    # (objc/mps_host/<op>.c: the host half an objc/mk_mps_<op>.m includes)
    headers = rel(ROOT.glob("objc/**/*.h")) + rel(ROOT.glob("metal/*.h")) + rel(ROOT.glob("objc/mps_host/*.c"))
    ext = Extension(
        "mpskern._native",
        sources=["mpskern/_native.pyx"],
        include_dirs=INCLUDE + b.get("include_dirs", []),
        define_macros=b.get("define_macros", []),
        library_dirs=b.get("library_dirs", []),
        libraries=b.get("libraries", []) + (["c++"] if DARWIN else ["stdc++", "dl", "pthread"]),
        runtime_library_dirs=b.get("runtime_library_dirs", []),
        extra_compile_args=OPT,
        extra_link_args=b.get("extra_link_args", []) + SANITIZE + (
            ["-framework", "Foundation", "-framework", "CoreFoundation", "-framework", "Metal",
             "-framework", "MetalPerformanceShaders", "-framework", "MetalPerformanceShadersGraph"]
            if DARWIN else []),
        # the objc/ sources are linked in as objects: list them so an edit relinks the .so
        depends=headers + [s for _, srcs in native_sources() for s in srcs],
    )
    return cythonize([ext], compiler_directives=CYTHON_DIRECTIVES,
                     include_path=["mpskern"])


setup(
    # cli/ is installed as mpskern.cli (a top-level "cli" package would collide in
    # site-packages); mpskern/cli is a link to it, so a checkout imports it the same way
    packages=find_packages(include=["mpskern", "mpskern.*"]),
    package_dir={"mpskern": "mpskern", "mpskern.cli": "cli"},
    package_data={"mpskern": ["*.pyx", "*.pxd", "*.pxi", "**/*.json"]},
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
