"""Compile every shipped .metal file with Apple's offline compiler (xcrun -sdk macosx metal
-c), once per shipped tile configuration (mpskern.tuning.spaces.shipped), from the same
inlined source the run-time compiler gets (mpskern.paths.metal_source), and again with
MK_NO_SIMDGROUP_MATRIX=1 where a file uses it. Exit 1 if any fails.
The macOS workflow (.github/workflows/macos.yml) runs it; it needs Xcode's metal toolchain."""
import os
import subprocess
import sys
import tempfile

from mpskern.paths import METAL_DIR, metal_source
from mpskern.tuning import spaces


def configurations():
    seen = {}
    for op in spaces.SPACES:
        for cfg in spaces.shipped(op):
            macros = tuple(sorted(spaces.macros(op, cfg).items()))
            seen.setdefault((spaces.SPACES[op].file, macros), None)
    files = sorted(f for f in os.listdir(METAL_DIR) if f.endswith(".metal"))
    for f in files:                       # files without a tuning space: their defaults
        if not any(k[0] == f for k in seen):
            seen[(f, ())] = None
    # and as GPUs below Apple7 get them (the hosted runners' Apple5: docs/macos.md)
    no_simd = [(f, m + (("MK_NO_SIMDGROUP_MATRIX", 1),)) for f, m in seen
               if "MK_NO_SIMDGROUP_MATRIX" in metal_source(f)]
    return sorted(seen) + sorted(no_simd)


def main():
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        for fname, macros in configurations():
            src = os.path.join(d, fname)
            with open(src, "w") as f:
                f.write(metal_source(fname))
            cmd = ["xcrun", "-sdk", "macosx", "metal", "-c", src, "-o", os.path.join(d, "out.air")]
            cmd += [f"-D{k}={v}" for k, v in macros]
            r = subprocess.run(cmd, capture_output=True, text=True)
            label = f"{fname} {' '.join(f'{k}={v}' for k, v in macros) or '(defaults)'}"
            print(("ok     " if r.returncode == 0 else "FAILED ") + label, flush=True)
            if r.returncode != 0:
                failed += 1
                print(r.stderr, flush=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
