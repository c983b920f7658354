"""The simulator's Python half: MSL -> C++ front-end (frontend.py), host compiler and
compile cache (compiler.py). The runtime that runs the built libraries is C++ in
objc/sim/ (inside mpskern._native). See docs/simulator.md.

    build_library(source, macros, check=False, origin=None) -> path of a shared object
"""
from mpskern.sim.compiler import available, build, cache_dir  # noqa: F401


def build_library(source, macros=None, check=False, origin=None, profile=False):
    """Compile MSL `source` (project headers already inlined, #line directives kept) with
    preprocessor `macros` into a kernel library for the simulator; returns its path.
    check=True instruments memory accesses for the checking mode, profile=True for the
    profiling mode (docs/profiling.md). `origin` names the .metal file for messages when the
    source has no #line directive. Cached on disk."""
    return build(source, macros or {}, check=check, origin=origin, profile=profile)

