"""gemm on the GPU backends (metal/gemm.metal): out[b] = alpha*op(A[b]) @ op(B[b]) + beta*C[b].

The configuration comes from mpskern.tuning.spaces.select (user database, family default,
generic rule) unless the caller pins one; its `variant` picks gemm_simd_* or gemm_tiled_*,
its tile parameters are the kernel's macros. One threadgroup per BM x BN output tile and
batch entry; with split_k > 1 each K chunk gets its own threadgroup writing float partial
sums to device scratch, and gemm_splitk_reduce_* finishes (alpha, beta, C) in the same
command buffer.
"""
from mpskern import _native
from mpskern.gpu_ops import cdiv, compile_config, configure, suffix
from mpskern.tuning import spaces

FILE = "gemm.metal"
OP = "gemm"
REDUCE_THREADS = 256
MAX_GRID_YZ = 65535        # threadgroups along a grid's y and z that every Metal GPU takes
INT32_LIMIT = 2 ** 31      # the kernels index in int32


def gemm(backend, args, dtype, A, B, C, out, config=None):
    """Backend method (see mpskern/backends/base.py); `config` pins a configuration."""
    if args["has_c"] and C is None:
        raise ValueError("gemm: args has_c=1 but no C array was given")
    batch, M, N, K = args["batch"], args["M"], args["N"], args["K"]
    cfg, level = configure(backend, OP, dtype, (batch, M, N, K), config)
    if batch == 0 or M == 0 or N == 0:
        backend._record(None, dict(cfg, kernel=spaces.SPACES[OP].kernel(cfg, dtype), level=level))
        return
    cfg, level, pipe = compile_config(backend, OP, FILE, cfg, level, dtype, (batch, M, N, K))
    split = spaces.split_k(cfg, batch, M, N, K)
    if split * batch * M * N >= INT32_LIMIT:
        split = 1
    record = dict(cfg, split_k=split, kernel=pipe.name, level=level)
    if cdiv(M, cfg["BM"]) > MAX_GRID_YZ or batch * split > MAX_GRID_YZ:
        raise ValueError(f"gemm: {batch} batch entries x {split} K splits and "
                         f"{cdiv(M, cfg['BM'])} row tiles: a grid dimension exceeds "
                         f"{MAX_GRID_YZ} threadgroups; split the batch into smaller calls")
    threads = spaces.threads(OP, cfg)

    packed = _native.pack_args(OP, dict(args, split_k=split))
    bO = backend.wrap(out, writable=True)
    # K == 0: A and B are empty and never read; bind something real (Metal has no
    # zero-length buffers)
    bA = backend.wrap(A) if A.size else bO
    bB = backend.wrap(B) if B.size else bO
    bC = bO if C is None or C is out else backend.wrap(C)
    partial = backend.device.alloc(4 * split * batch * M * N) if split > 1 else bO
    run = [dict(pipeline=pipe, grid=(cdiv(N, cfg["BN"]), cdiv(M, cfg["BM"]), batch * split),
                threadgroup=(threads, 1, 1), bindings=[bA, bB, bC, bO, packed, partial])]
    if split > 1:
        red = backend.pipeline(f"gemm_splitk_reduce_{suffix(dtype)}", file=FILE,
                               macros=spaces.macros(OP, cfg))
        run.append(dict(pipeline=red, grid=(cdiv(batch * M * N, REDUCE_THREADS), 1, 1),
                        threadgroup=(REDUCE_THREADS, 1, 1),
                        bindings=[partial, bC, bO, packed]))
    backend.run(run, config=record)
    bO.sync()
