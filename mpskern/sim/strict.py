"""The strict MSL check: what Apple's Metal compiler refuses, refused here with the .metal
line before the simulator compiles a kernel as C++ (which would accept much of it).

    check_source(source, macros) -> [Finding]     (str(f): "file:line: message")

  1. includes and MSL's language rules (mpskern/sim/msl_rules.py, the front-end's parser);
  2. address spaces, type-checked by clang as C++ for OpenCL (mpskern/sim/msl_clang.py);
     without clang this stage is skipped and that is said once (StrictCheckWarning).
The simulator's compiler runs check_preprocessed before every build (so users'
metal_kernel sources get the same checks), `mpskern check-msl` runs check_source on files.
"""
from functools import lru_cache

from mpskern.sim import parse as P
from mpskern.sim.msl_clang import StrictCheckWarning, typecheck, typecheck_available  # noqa: F401
from mpskern.sim.msl_rules import Finding, check_rules, guard_includes  # noqa: F401


@lru_cache(maxsize=64)          # a checked build of the same source checks it once
def check_preprocessed(pre):
    """Findings of stages 2 and 3 for preprocessed MSL (stage 3 when clang is available;
    one finding per line, the front-end's first), sorted by place."""
    prog = P.parse(pre)
    found = check_rules(prog)
    taken = {(f.file, f.line) for f in found}
    found += [f for f in typecheck(pre, prog) or [] if (f.file, f.line) not in taken]
    return tuple(sorted(set(found), key=lambda f: (f.file, f.line, f.message)))


def check_source(source, macros=None, origin="<source>"):
    """Every finding for MSL `source` with preprocessor `macros`."""
    from mpskern.sim import compiler
    if not source.lstrip().startswith(("#line", "# ")):
        source = f'#line 1 "{origin}"\n' + source
    pre = compiler.preprocess(guard_includes(source),
                              {str(k): str(v) for k, v in (macros or {}).items()})
    return list(check_preprocessed(pre))


def format_findings(found):
    return "\n".join(str(f) for f in found)
