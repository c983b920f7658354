"""Setup calls into the device release the GIL (the one rule in mpskern/_native.pyx): a
library load runs the library's initialisers (and Metal's compile and pipeline creation wait
for Apple's compiler), so another Python thread must keep running meanwhile."""
import os
import subprocess
import time

import pytest

from mpskern import _native
from mpskern._errors import MpskernError
from mpskern.bench.ticker import ticking
from mpskern.sim import compiler

SLOW_INIT = r"""
#include <time.h>
// a library whose initialiser takes 0.6 s (a large kernel library's static constructors)
__attribute__((constructor)) static void slow(void) {
    struct timespec t = {0, 600000000L};
    nanosleep(&t, 0);
}
extern "C" const void *mk_sim_module_init(const void *) { return 0; }   // not a kernel library
"""


@pytest.mark.skipif(not compiler.available(), reason="no C++ compiler for the simulator")
def test_another_thread_runs_during_a_slow_library_load(tmp_path):
    src, lib = tmp_path / "slow.cc", tmp_path / "slow.so"
    src.write_text(SLOW_INIT)
    cxx, _ = compiler.compiler()
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    dev = _native.Device("sim")
    with ticking(0.005) as ticks:
        t0 = time.perf_counter()
        with pytest.raises(MpskernError, match="not a kernel library"):
            dev.library_load(str(lib))
        t1 = time.perf_counter()
    assert t1 - t0 >= 0.5, "the initialiser did not run"
    during = [t for t in ticks if t0 < t < t1]
    # GIL held through the load: the watcher cannot tick at all (at most once at the edges)
    assert len(during) >= 10, (len(during), t1 - t0)
    assert os.path.exists(lib)
