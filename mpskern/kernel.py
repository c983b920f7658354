"""Users' own MSL kernels: `mpskern.metal_kernel(source, name, macros=None)`.

    k = mpskern.metal_kernel(src, "saxpy")
    k(x, y, np.float32(2.0), grid=(n, 1, 1), threadgroup=(256, 1, 1))
    out, = k(x, output_shapes=[x.shape], output_dtypes=[np.float32], grid=..., threadgroup=...)

Arguments bind in order to [[buffer(0)]], [[buffer(1)]], ...: numpy arrays as device
buffers (written back in place), numpy scalars (not float64: MSL has no double) and
structured scalars (and `bytes`) as `constant T&` values. They are checked against the
kernel's signature first (mpskern/kernel_args.py): the count, each element type, arrays for
device pointers, writable arrays for parameters the kernel may write (`device T*` without
const); a mismatch is a TypeError naming the [[buffer(i)]], the parameter and the fix.
`output_shapes` / `output_dtypes` allocate outputs (zeros, or `init_value`), bound after
the arguments, and the call returns them (a list); otherwise it returns None.
`threadgroup_memory` gives the bytes of [[threadgroup(i)]] parameters: an int for
[[threadgroup(0)]], a list by index or a dict {index: bytes}.

`grid` counts threads (dispatchThreads: edge threadgroups may be partial), `threadgroup` is
threads per threadgroup. backend="auto" runs on Metal where available, else in the
simulator ("sim"); the CPU backend cannot run MSL. On the simulator check=True turns on the
checking mode (races, missing barriers, barrier divergence, out-of-bounds, uninitialised
threadgroup reads), which raises mpskern.KernelCheckError on a finding (its fields: kind,
kernel, file, line, lines, threads, buffer, offset). `macros` values are int, float, str
or bool (True/False become 1/0).

A kernel that runs away is stopped as a GPU stops a command buffer: in the simulator
time_limit=SECONDS (or the device-wide set_sim_options(time_limit=...)) raises
mpskern.KernelError once the run takes longer, and Ctrl-C raises KeyboardInterrupt within
a fraction of a second (main thread, Python's default SIGINT handler); the process stays
usable either way. On Metal the GPU's own watchdog does this (no time_limit there).
profile=True (simulator) runs the profiling mode and returns an mpskern.profiling.Profile
of the dispatch (memory coalescing, bank conflicts, FLOPs, ...; docs/profiling.md); a dict
passes options to mpskern.profiling.profiling (e.g. {"max_groups": 0}).
After a call, `k.last_timing` is (device ms, wall ms) of its run (mpskern.benchmark uses it).
"""
import numpy as np

from mpskern import _native, backends, kernel_args

_MAX_GRID = 2 ** 32 - 1     # threads per grid dimension: positions are 32-bit uints in MSL


def _dims(v, what):
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    try:
        t = tuple(int(x) for x in v)
    except (TypeError, ValueError):  # ValueError: int("a")
        raise TypeError(f"{what} must be a tuple of 1 to 3 ints, got {v!r}") from None
    if not 1 <= len(t) <= 3 or any(x != y for x, y in zip(t, v)):
        raise ValueError(f"{what} must be 1 to 3 ints, got {v!r}")
    if any(x < 0 for x in t):
        raise ValueError(f"{what} must be non-negative, got {v!r}")
    return t + (1,) * (3 - len(t))


def _check_launch(grid, tg, threadgroup, limit, who):
    """Metal's limits on a dispatchThreads launch, refused with the numbers: at most
    `limit` threads per threadgroup (the device's), at most 2**32 - 1 threads along each
    grid dimension."""
    if any(x == 0 for x in tg):
        raise ValueError(f"threadgroup must be positive in every dimension, got {threadgroup!r}")
    n = tg[0] * tg[1] * tg[2]
    if n > limit:
        raise ValueError(f"threadgroup {threadgroup!r} has {n} threads; {who} allows {limit}")
    for d, (g, t) in enumerate(zip(grid, tg)):
        if g > _MAX_GRID:
            raise ValueError(f"grid {tuple(grid)} has {g} threads along {'xyz'[d]} "
                             f"({-(-g // t)} threadgroups of {t}); thread positions are 32-bit "
                             f"uints in MSL: at most {_MAX_GRID} threads per grid dimension")


def _macro_value(name, v):
    """A macro's value as the preprocessor gets it: bools are 1/0 (C has no True)."""
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, float, str, np.integer, np.floating)):
        return v
    raise TypeError(f"macros[{name!r}] must be an int, float, str or bool, got "
                    f"{type(v).__name__} {v!r}")


def _outputs(output_shapes, output_dtypes, init_value):
    """Arrays for output_shapes/output_dtypes (None without them)."""
    if output_shapes is None and output_dtypes is None:
        return None
    if output_shapes is None or output_dtypes is None:
        raise TypeError("output_shapes and output_dtypes go together (one shape and one dtype "
                        "per output)")
    shapes, dtypes = list(output_shapes), list(output_dtypes)
    if len(shapes) != len(dtypes):
        raise ValueError(f"{len(shapes)} output_shapes but {len(dtypes)} output_dtypes; give one "
                         f"of each per output")
    out = []
    for j, (shape, dt) in enumerate(zip(shapes, dtypes)):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
            raise ValueError(f"output_shapes[{j}] must be non-negative ints, got {shape!r}")
        dt = np.dtype(dt)
        if dt == np.float64:
            raise TypeError(f"output_dtypes[{j}]: float64 cannot be used by Metal kernels (MSL has "
                            f"no double); use np.float32")
        out.append(np.full(shape, init_value, dtype=dt))
    return out


class Kernel:
    """A user's MSL kernel, made by mpskern.metal_kernel(source, name, macros=None); call
    it to run (Kernel.__call__)."""

    def __init__(self, source, name, macros=None):
        if not isinstance(source, str):
            raise TypeError(f"source must be MSL text (str), got {type(source).__name__}")
        if not isinstance(name, str) or not name:
            raise TypeError("name must be the kernel's (host) name, a non-empty str")
        if macros is not None and not isinstance(macros, dict):
            raise TypeError(f"macros must be a dict NAME -> value, got {type(macros).__name__}")
        self.source = source if source.lstrip().startswith("#line") else \
            f'#line 1 "<metal_kernel {name}>"\n' + source
        self.name = name
        self.macros = {k: _macro_value(k, v) for k, v in (macros or {}).items()}
        self.last_timing = None
        self._backend_used = None

    def __repr__(self):
        return f"<mpskern.Kernel {self.name!r}>"

    @property
    def params(self):
        """The kernel's [[buffer(i)]] / [[threadgroup(i)]] parameters as parsed here
        (mpskern.kernel_args.Param), or None where no preprocessor is available."""
        macros = tuple(sorted((str(k), str(v)) for k, v in self.macros.items()))
        return kernel_args.signature(self.source, macros, self.name)

    def _backend(self, backend):
        if backend == "auto":
            ok, _ = backends.availability("metal")
            backend = "metal" if ok else "sim"
        if backend not in ("metal", "sim"):
            raise ValueError(f"backend={backend!r} cannot run an MSL kernel; use 'auto', "
                             f"'metal' or 'sim'")
        return backends.get(backend)

    def __call__(self, *args, grid, threadgroup, threadgroup_memory=None, output_shapes=None,
                 output_dtypes=None, init_value=0, backend="auto", check=False, time_limit=None,
                 profile=False):
        """Run the kernel once over `grid` threads and wait for it; written arrays are
        updated in place.

        Parameters
        ----------
        args : numpy arrays, numpy scalars, bytes
            Bound in order to [[buffer(0)]], [[buffer(1)]], ...: arrays as device buffers,
            numpy scalars (not float64: MSL has no double), structured scalars and bytes
            as `constant T&` values. Checked against the kernel's signature first: the
            count, element types, arrays for device pointers, writable arrays for
            parameters the kernel may write (`device T*` without const).
        grid : int or tuple of 1 to 3 ints
            Threads in the grid (dispatchThreads: edge threadgroups may be partial).
        threadgroup : int or tuple of 1 to 3 ints
            Threads per threadgroup (at most the device's limit, 1024 on Apple GPUs).
        threadgroup_memory : int, list or dict, optional
            Bytes of each [[threadgroup(i)]] parameter: an int for [[threadgroup(0)]],
            a list by index or a dict {index: bytes}. Needed for every one declared.
        output_shapes, output_dtypes : sequences, optional
            Outputs to allocate (filled with init_value), bound after args, returned.
        init_value : number
            The outputs' initial value (default 0).
        backend : str
            "auto" (default: "metal" where available, else "sim"), "metal" or "sim".
        check : bool
            On "sim": the checking mode; a finding raises KernelCheckError.
        time_limit : float, optional
            On "sim": seconds after which the run stops with KernelError (a GPU's
            watchdog does this on Metal). Ctrl-C raises KeyboardInterrupt.
        profile : bool or dict
            On "sim" (auto picks it): run the profiling mode and return an
            mpskern.profiling.Profile (a dict: profiling options).

        Returns
        -------
        None, a list of arrays, or a Profile
            A Profile with profile=True; the outputs with output_shapes; otherwise None.
            k.last_timing is then (device ms, wall ms) of the run.

        Raises
        ------
        TypeError
            An argument that cannot be bound (float64, Python numbers, other objects) or
            does not fit its parameter (the message names [[buffer(i)]] and the fix).
        ValueError
            A bad grid or threadgroup, too many arguments, check/time_limit off "sim".
        KernelCompileError
            The source does not compile (or Apple's compiler would refuse it).
        KernelCheckError
            check=True found a race, missing barrier, divergence, out-of-bounds access
            or uninitialised read (fields: kind, kernel, file, line, lines, threads,
            buffer, offset).
        KernelError
            The kernel faulted or ran past time_limit.

        Example
        -------
            k = mk.metal_kernel('''
            #include <metal_stdlib>
            using namespace metal;
            kernel void add1(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]])
            { y[i] += 1.0f; }''', "add1")
            y = np.zeros(100, np.float32)
            k(y, grid=(100,), threadgroup=(32,), backend="sim", check=True)
        """
        be = self._backend("sim" if profile and backend == "auto" else backend)
        if check and be.name != "sim":
            raise ValueError("check=True needs backend='sim' (the checking mode is the simulator's)")
        if time_limit is not None and be.name != "sim":
            raise ValueError("time_limit needs backend='sim'; on Metal the GPU's own watchdog "
                             "ends a command buffer that runs too long")
        if profile and be.name != "sim":
            raise ValueError("profile=True needs backend='sim' (the profiling mode is the simulator's)")
        if profile and check:
            raise ValueError("profile=True and check=True each need their own build of the kernel; "
                             "run them one after the other")
        if profile is not False and not isinstance(profile, (bool, dict)):
            raise TypeError(f"profile must be True/False or a dict of profiling options, got {profile!r}")
        grid = _dims(grid, "grid")
        tg = _dims(threadgroup, "threadgroup")
        _check_launch(grid, tg, threadgroup, be.info["max_threads_per_threadgroup"],
                      be.info["name"])
        outputs = _outputs(output_shapes, output_dtypes, init_value)
        args = args + tuple(outputs or ())
        if len(args) > _native.MAX_BINDINGS:
            raise ValueError(f"{len(args)} arguments; a kernel has at most "
                             f"{_native.MAX_BINDINGS} buffers ([[buffer(0)]] .. "
                             f"[[buffer({_native.MAX_BINDINGS - 1})]])")
        # compiled first: a source Apple's compiler refuses is that error, not an argument's
        # (the pipeline's own limit, [[max_total_threads_per_threadgroup(N)]], is mk_run's;
        # profile=None: a profiling build inside mpskern.profiling.profiling() too)
        pipe = be.pipeline(self.name, source=self.source, macros=self.macros, check=check,
                           profile=True if profile else None)
        params = self.params
        if params is not None:
            kernel_args.check(params, args, self.name)
        tg_lengths = kernel_args.threadgroup_lengths(params, threadgroup_memory, self.name)
        bindings, writeback, keep = [], [], []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                if a.dtype == np.float64:
                    raise TypeError(f"argument {i}: float64 arrays cannot be used by Metal kernels "
                                    f"(MSL has no double); cast with .astype(np.float32)")
                if a.dtype.hasobject:
                    raise TypeError(f"argument {i}: arrays of Python objects cannot be bound")
                writable = a.flags.writeable
                # a read-only array is bound as a private copy: its memory may be immutable
                # (a bytes object, a mode="r" memmap) and the kernel may write any buffer
                arr = a if a.flags.c_contiguous and writable else np.array(a, order="C")
                buf = be.wrap(arr, writable)
                keep.append(arr)
                bindings.append(buf)
                if writable:
                    writeback.append((buf, arr, a))
            elif isinstance(a, np.generic):
                if isinstance(a, (np.float64, np.longdouble)):
                    raise TypeError(f"argument {i}: a {type(a).__name__} scalar cannot be a "
                                    f"Metal `constant` (MSL has no double); pass "
                                    f"np.float32({a!r})")
                bindings.append(a.tobytes())
            elif isinstance(a, (bytes, bytearray)):
                bindings.append(bytes(a))
            elif isinstance(a, (bool, int, float)):
                example = {bool: f"np.bool_({a!r})", float: f"np.float32({a!r})"}.get(
                    type(a), f"np.int32({a!r}) or np.uint32({a!r})")
                raise TypeError(f"argument {i}: pass a numpy scalar of the parameter's type (e.g. "
                                f"{example}) so the kernel's `constant T&` type is explicit")
            else:
                raise TypeError(f"argument {i}: expected a numpy array, numpy scalar or bytes, "
                                f"got {type(a).__name__}")
        dispatch = dict(pipeline=pipe, grid=grid, threadgroup=tg, grid_units="threads",
                        bindings=bindings, threadgroup_memory=tg_lengths)
        prof = None
        if profile:
            from mpskern.profiling import profiling
            with profiling(**(profile if isinstance(profile, dict) else {})) as prof:
                self.last_timing = be.run([dispatch], time_limit=time_limit)
        else:   # check=True libraries always run checked
            self.last_timing = be.run([dispatch], time_limit=time_limit)
        self._backend_used = be.name
        for buf, arr, orig in writeback:
            buf.sync()
            if arr is not orig:
                np.copyto(orig, arr)
        return prof if profile else outputs


def metal_kernel(source, name, *, macros=None):
    """Your own Metal Shading Language kernel, callable on numpy arrays: on the GPU
    (backend "metal") or, on any machine, in the simulator ("sim"), whose checking mode
    reports races, barrier divergence, out-of-bounds accesses and uninitialised
    threadgroup reads with the .metal line (docs/simulator.md). On the simulator the
    source is first checked as Apple's compiler would (KernelCompileError with the line).
    Compilation happens at the first call (cached per backend, source and macros).

    Parameters
    ----------
    source : str
        MSL text (with `#include <metal_stdlib>`).
    name : str
        The kernel function's (host) name in source.
    macros : dict, optional
        Preprocessor macros NAME -> value (int, float, str or bool: True/False
        become 1/0), as -D NAME=value.

    Returns
    -------
    Kernel
        Call it with the buffers in [[buffer(i)]] order: see Kernel.__call__.

    Example
    -------
        src = '''
        #include <metal_stdlib>
        using namespace metal;
        kernel void scale(device float* y [[buffer(0)]], constant float& a [[buffer(1)]],
                          uint i [[thread_position_in_grid]]) { y[i] *= a; }
        '''
        k = mk.metal_kernel(src, "scale")
        y = np.ones(256, np.float32)
        k(y, np.float32(3), grid=(256,), threadgroup=(64,), backend="sim")   # y is 3.0 now
    """
    return Kernel(source, name, macros)
