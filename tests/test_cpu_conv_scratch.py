"""cpu conv2d's im2col scratch is bounded (issue 15 item 12): x (1, 64, 32, 4127) float32
(32 MiB) with a 32x32 kernel peaked at 1.1 GB RSS (one im2col block of a whole output row:
65536 x 4096 floats per thread). mk_cpu_conv2d.c's blocks now stay within SCRATCH_FLOATS
(8 MiB) per buffer: huge kernels reduce in chunks (beta = 1 GEMMs), wide rows split into
column blocks. Those paths are checked against the float64 reference here too."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mpskern
import refs

RSS = r'''
import resource, sys
import numpy as np
import mpskern
dt = np.dtype(sys.argv[1])
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (1, 64, 32, 4127)).astype(dt)
w = (rng.uniform(-1, 1, (4, 64, 32, 32)) / 256).astype(dt)
out = np.empty((1, 4, 1, 4096), dt)
mpskern.conv2d(x[:, :, :, :64], w, backend="cpu")          # BLAS and the pool warmed up
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
mpskern.conv2d(x, w, backend="cpu", out=out)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) // 1024, bool(np.isfinite(out).all()))
'''


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_huge_kernel_on_a_wide_image_stays_within_bounded_scratch(dtype):
    env = dict(os.environ, MPSKERN_NUM_THREADS="2")
    if "libasan" in env.get("LD_PRELOAD", ""):
        # .ci/sanitize: AddressSanitizer keeps freed blocks resident (quarantine, 256 MiB by
        # default), which read as 144 (float32) / 263 MiB (float16) of growth; without it
        # the call grows RSS by 0 / 12 MiB, as unsanitized
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0"
    r = subprocess.run([sys.executable, "-c", RSS, dtype], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    grown_mib, finite = r.stdout.split()
    # 2 threads x (8 MiB im2col + output block) + float16's converted input rows (2x x)
    assert int(grown_mib) < 120, f"peak RSS grew by {grown_mib} MiB during the call"
    assert finite == "True"


# (x shape, w shape, stride, padding, groups): each takes a bounded-scratch plan
CASES = [
    ((1, 9, 16, 1015), (3, 9, 16, 16), 1, 0, 1),       # a row wider than a block: 4 column blocks
    ((1, 9, 17, 2030), (3, 9, 16, 16), (1, 2), (0, 1), 1),   # the same, strided and padded
    ((1, 16, 26, 536), (2, 16, 25, 25), 1, 0, 1),      # reduction of 10000 in 2 chunks
    ((2, 32, 26, 530), (4, 16, 25, 25), 1, (0, 2), 2),  # chunks per group, column blocks
    ((1, 10000, 8, 64), (4, 10000, 1, 1), 1, 0, 1),    # 1x1 read in place, in 2 chunks
]


@pytest.mark.parametrize("dtype", refs.DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("xs,ws,stride,padding,groups", CASES)
def test_chunked_and_column_blocks_match_the_reference(xs, ws, stride, padding, groups, dtype):
    rng = np.random.default_rng(16)
    x = rng.uniform(-1, 1, xs).astype(dtype)
    w = rng.uniform(-1, 1, ws).astype(dtype)
    b = rng.uniform(-1, 1, ws[0]).astype(np.float32)
    got = mpskern.conv2d(x, w, b, stride, padding, 1, groups, backend="cpu")
    ref = refs.conv2d(x, w, b, stride, padding, 1, groups)
    refs.assert_close(got, ref, dtype, terms=ws[1] * ws[2] * ws[3], what=f"{xs} * {ws}")
