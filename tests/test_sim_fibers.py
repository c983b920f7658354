"""objc/sim/fiber.cc on its own: the hand-written context switch and the ucontext
fallback (what Linux-arm/macOS-without-asm builds use) run the same ping-pong program:
many fibers, values carried across switches in callee-saved registers and on the stack,
floating point state intact."""
import os
import subprocess

import pytest

from mpskern.sim import compiler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = r'''
#include "fiber.h"
#include <stdio.h>
using namespace mksim;
static Fiber sched, f[64];
static long sums[64];
static int cur;
static void body(void *arg) {
    long id = (long)arg; double acc = 0.5 * id; long s = 0;
    for (int r = 0; r < 1000; r++) { s += id * r; acc *= 1.0000001; fiber_switch(&f[cur], &sched); }
    sums[id] = s + (long)(acc > 0.5 * id ? 1 : 0);
    fiber_switch(&f[cur], &sched);
}
int main() {
    fiber_alloc_stack(&sched, 65536);
    for (long i = 0; i < 64; i++) { fiber_alloc_stack(&f[i], 65536); fiber_init(&f[i], body, (void *)i, &sched); }
    for (int r = 0; r <= 1000; r++)
        for (cur = 63; cur >= 0; cur--) fiber_switch(&sched, &f[cur]);
    for (long i = 0; i < 64; i++) if (sums[i] != i * 499500 + (i ? 1 : 0)) { printf("bad %ld %ld\n", i, sums[i]); return 1; }
    printf("ok\n");
    return 0;
}
'''


@pytest.mark.parametrize("mode", ["asm", "ucontext"])
def test_fiber_switch(tmp_path, mode):
    cxx, _ = compiler.compiler()
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "driver.cc"
    src.write_text(DRIVER)
    exe = tmp_path / "driver"
    flags = ["-DMK_SIM_UCONTEXT=1"] if mode == "ucontext" else []
    subprocess.run([cxx, "-std=c++17", "-O2", *flags, "-I", os.path.join(ROOT, "objc", "sim"),
                    str(src), os.path.join(ROOT, "objc", "sim", "fiber.cc"), "-o", str(exe)],
                   check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
