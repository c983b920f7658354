"""gemm on the GPU backends (metal/gemm.metal): out[b] = alpha*op(A[b]) @ op(B[b]) + beta*C[b].

The configuration comes from mpskern.tuning.spaces.select (user database, family default,
generic rule) unless the caller pins one; its `variant` picks gemm_simd_* or gemm_tiled_*,
its tile parameters are the kernel's macros. One threadgroup per BM x BN output tile and
batch entry; with split_k > 1 each K chunk gets its own threadgroup writing float partial
sums to device scratch, and gemm_splitk_reduce_* finishes (alpha, beta, C) in the same
command buffer; unpinned, split_k follows the GPU's core count (tiles.split_k).
"""
from mpskern import _native
from mpskern._errors import Unsupported
from mpskern.backends.gpu.context import (MAX_GRID_YZ, activation_macros, cdiv, configure,
                                          gpu_cores, helper_threads, nothing, pipelines)
from mpskern.tuning import spaces

SPACE = "gemm"
REDUCE_THREADS = 256       # the split-K reduction's threadgroup (fewer if its pipeline says so)
INT32_LIMIT = 2 ** 31      # the kernels index in int32


def gemm(ctx, args, dtype, A, B, C, out, config=None):
    """Encoder (see context.py); `config` pins a configuration of the "gemm" space."""
    if args["has_c"] and C is None:
        raise ValueError("gemm: args has_c=1 but no C array was given")
    batch, M, N, K = args["batch"], args["M"], args["N"], args["K"]
    shape = (batch, M, N, K)
    cfg, level = configure(ctx, SPACE, dtype, shape, config)
    if batch == 0 or M == 0 or N == 0:
        return nothing(dict(cfg, kernel=spaces.SPACES[SPACE].kernel(cfg, dtype), level=level))
    act = activation_macros(args)        # the fused activation, in the kernels' own stores
    cfg, level, (pipe,) = pipelines(ctx, SPACE, dtype, shape, cfg, level, lambda c: [
        (spaces.SPACES[SPACE].kernel(c, dtype), spaces.threads(SPACE, c))], act)
    split = spaces.split_k(cfg, batch, M, N, K, cores=gpu_cores(ctx.limits))
    if split * batch * M * N >= INT32_LIMIT:
        split = 1
    record = dict(cfg, split_k=split, kernel=pipe.name, level=level)
    if cdiv(M, cfg["BM"]) > MAX_GRID_YZ or batch * split > MAX_GRID_YZ:
        raise Unsupported(f"gemm: {batch} batch entries x {split} K splits and "
                          f"{cdiv(M, cfg['BM'])} row tiles: a grid dimension exceeds "
                          f"{MAX_GRID_YZ} threadgroups; split the batch into smaller calls")
    packed = _native.pack_args("gemm", dict(args, split_k=split))
    bO = ctx.buffer(out, writable=True)
    # K == 0: A and B are empty and never read; bind something real (Metal has no
    # zero-length buffers)
    bA = ctx.buffer(A) if A.size else bO
    bB = ctx.buffer(B) if B.size else bO
    bC = bO if C is None or C is out else ctx.buffer(C)
    partial = ctx.scratch(4 * split * batch * M * N) if split > 1 else bO
    run = [dict(pipeline=pipe, grid=(cdiv(N, cfg["BN"]), cdiv(M, cfg["BM"]), batch * split),
                threadgroup=(spaces.threads(SPACE, cfg), 1, 1),
                bindings=[bA, bB, bC, bO, packed, partial])]
    if split > 1:
        red = ctx.compiled(spaces.SPACES[SPACE].kernel(cfg, dtype, variant="splitk_reduce"),
                           spaces.SPACES[SPACE].file, dict(spaces.macros(SPACE, cfg), **act))
        t = helper_threads(red, REDUCE_THREADS)
        run.append(dict(pipeline=red, grid=(cdiv(batch * M * N, t), 1, 1), threadgroup=(t, 1, 1),
                        bindings=[partial, bC, bO, packed]))
    return ctx.submit(run, record, outputs=[bO])
