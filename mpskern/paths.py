"""Where the packaged data lives: the .metal kernels and the simulator's MSL compatibility
headers. Installed: mpskern/_data/{metal,sim_include}; in a source checkout: ../metal and
../objc/sim/include."""
import os
import re
from functools import lru_cache

_PKG = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_PKG)


def _first(*cands):
    for c in cands:
        if os.path.isdir(c):
            return c
    return cands[0]


METAL_DIR = _first(os.path.join(_PKG, "_data", "metal"), os.path.join(_ROOT, "metal"))
SIM_INCLUDE_DIR = _first(os.path.join(_PKG, "_data", "sim_include"),
                         os.path.join(_ROOT, "objc", "sim", "include"))

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)


_SUFFIX = {"float32": "f32", "float16": "f16"}


def kernel_name(family, variant, dtype):
    """The name of a kernel of metal/: <family>_<variant>_<f32|f16>, e.g. ("gemm", "simd",
    float32) -> "gemm_simd_f32". metal/mk_common.h's MK_PER_DTYPE instantiates the template
    kernel <family>_<variant> under these names; the tuning spaces (Space.kernel) and the
    GPU encoders build every name here. dtype: _native.F32/F16, a numpy dtype or its name;
    any other is a TypeError."""
    from mpskern.tuning.lookup import dtype_name
    sfx = _SUFFIX.get(dtype_name(dtype))
    if sfx is None:
        raise TypeError(f"GPU kernels take float32 or float16 (dtype {dtype!r})")
    return f"{family}_{variant}_{sfx}"


@lru_cache(maxsize=None)
def metal_source(name):
    """The MSL source of metal/`name` with project headers ("...") inlined once each:
    Metal's run-time compiler (newLibraryWithSource) cannot open files, and the simulator
    gets the very same text. #line directives keep errors pointing at the real file."""
    return inline_includes(METAL_DIR, name)


def inline_includes(directory, name, label=None):
    """The text of directory/name with its "..." includes (found in `directory`) inlined
    once each, #line directives naming `label(fname)` (default: the bare file name)."""
    seen = set()
    label = label or (lambda fname: fname)

    def expand(fname):
        if fname in seen:
            return ""
        seen.add(fname)
        path = os.path.join(directory, fname)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        out, pos = [], 0
        for m in _INCLUDE.finditer(text):
            if not os.path.isfile(os.path.join(directory, m.group(1))):
                continue          # left for the compiler to refuse, at its line
            out.append(text[pos:m.start()])
            line = text.count("\n", 0, m.end()) + 2
            out.append(expand(m.group(1)) + f'\n#line {line} "{label(fname)}"\n')
            pos = m.end() + 1
        out.append(text[pos:])
        return f'#line 1 "{label(fname)}"\n' + "".join(out)

    return expand(name)
