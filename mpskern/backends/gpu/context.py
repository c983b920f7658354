"""What an encoder gets from its GPU backend, and the one rule for configurations.

An encoder (one module per kernel family: gemm.py, conv2d.py, pool.py, ...) receives a
Context, the device layer, never the backend: the device's `limits`, `compiled`
pipelines of metal/ files, `buffer`s around numpy arrays, device `scratch` memory, and
`submit` to run a dispatch list. It returns
(timing, record): the (gpu_ms, wall_ms) of its command buffer (None when there was
nothing to run) and what ran (configuration, kernel, lookup level); the backend keeps
both for bench (Backend.last_timing / last_config).

The one rule for threadgroup sizes (configure + pipelines): a dispatch uses the caller's
pinned configuration (checked against the device) or what mpskern/tuning/spaces.select
picks for the op's shape. Metal may then give a compiled pipeline fewer threads per
threadgroup (maxTotalThreadsPerThreadgroup, e.g. a register-heavy kernel) than the device
maximum the choice assumed. Then, for any pipeline limit >= 32:
  - a configured kernel steps down to the generic configuration that fits the smallest
    such limit (level "generic"), compiled and checked again;
  - a pinned configuration is refused (ValueError naming the kernel and the limit);
  - a helper kernel of no configuration (gemm's split-K reduction, batch_norm's finish)
    runs min(its size, the limit) threads per threadgroup (helper_threads).
"""
import collections
import hashlib
import threading
import time

from mpskern import _native
from mpskern.backends.gpu import compile_budget
from mpskern.backends.base import device_info
from mpskern.paths import metal_source
from mpskern.tuning import spaces

MAX_GRID_YZ = 65535     # threadgroups along a grid's y and z that every Metal GPU takes
MIN_THREADS = 32        # one SIMD-group: the smallest threadgroup any configuration has
# compiled libraries kept loaded per device, least recently used dropped first (a program
# compiling many distinct kernels, or tune's candidates, would otherwise keep every one
# loaded; a dropped sim library is reloaded from the compile cache, not recompiled)
MAX_LIBRARIES = 128


def cdiv(a, b):
    return -(-a // b)


class Context:
    """The Metal (or simulated) device as the encoders use it: created on first use, kernels
    compiled once (Metal: at run time from source; sim: mpskern.sim's front-end and host
    compiler) into a pipeline cache keyed by (source, kernel, macros, check, profile) holding
    at most MAX_LIBRARIES libraries, buffers around numpy memory, dispatch lists run in one
    command buffer. GpuBackend owns one; its pipeline/wrap/run for users' own kernels
    (mpskern.kernel) come here too."""

    def __init__(self, kind):
        self.kind = kind                # "metal" or "sim"
        self._native = None
        # (source hash, macros, check) -> (library, {kernel: pipeline}), oldest use first
        self._libraries = collections.OrderedDict()
        self._lock = threading.RLock()
        self._check = False
        self.profile = False            # mpskern.profiling.profiling(): profiling libraries

    @property
    def native(self):
        """The _native.Device (created on first use)."""
        if self._native is None:
            with self._lock:
                if self._native is None:
                    self._native = _native.Device(self.kind)
        return self._native

    @property
    def limits(self):
        """The device's names and limits (Backend.info; a new dict each time:
        set_sim_options may change the simulated family and limits)."""
        return device_info(self.native)

    def set_sim_options(self, **options):
        """Simulator options (see _native.Device.set_sim_options: check_mode, order, seed,
        workers, family, limits, time_limit). check_mode=True also makes later pipelines
        compile with the checking instrumentation, so every op runs checked until it is
        turned off."""
        self.native.set_sim_options(**options)
        self._check = bool(options.get("check_mode", False)) and self.kind == "sim"

    def compiled(self, kernel, file=None, macros=None, *, source=None, check=None, profile=None):
        """The compiled pipeline of `kernel` in metal/`file` (or in MSL `source` text) with
        preprocessor `macros`; cached. check=None follows set_sim_options(check_mode=...);
        profile=None follows self.profile (set inside mpskern.profiling.profiling(); sim)."""
        if check is None:
            check = self._check
        if profile is None:
            profile = self.profile
        profile = bool(profile) and self.kind == "sim"
        if (file is None) == (source is None):
            raise ValueError("give exactly one of file= or source=")
        if file is not None:
            source = metal_source(file)
        macros = {k: macros[k] for k in sorted(macros or {})}
        # one library per (source, macros, check, profile): a file's kernels share it
        check = bool(check) and self.kind == "sim"
        lkey = (hashlib.sha1(source.encode()).hexdigest(), tuple(macros.items()), check, profile)
        with self._lock:
            entry = self._libraries.get(lkey)
            if entry is None:
                lib = self._build(source, macros, check, profile, file)
                entry = self._libraries[lkey] = (lib, {})
                while len(self._libraries) > MAX_LIBRARIES:
                    # unloaded once the pipelines callers still hold are gone
                    self._libraries.popitem(last=False)
            else:
                self._libraries.move_to_end(lkey)
            p = entry[1].get(kernel)
            if p is None:
                p = entry[1][kernel] = entry[0].pipeline(kernel)
        return p

    def _build(self, source, macros, check, profile, file):
        """The library of `source`; a compile is timed for compile_budget (a tune's
        deadline may refuse it: CompileOverBudget)."""
        fresh = True
        if self.kind == "sim":
            from mpskern import sim
            fresh = not sim.compiler.is_built(source, macros, check, file, profile)
        if fresh:
            compile_budget.admit(self.kind, profile)
        t0 = time.perf_counter()
        if self.kind == "sim":
            lib = self.native.library_load(
                sim.build_library(source, macros, check=check, origin=file, profile=profile))
        else:
            lib = self.native.library_from_source(source, macros)
        if fresh:
            compile_budget.built(self.kind, profile, time.perf_counter() - t0)
        return lib

    def buffer(self, array, writable=False):
        """A device buffer over a C-contiguous numpy array (zero-copy where possible)."""
        return self.native.wrap(array, writable)

    def scratch(self, nbytes):
        """Device scratch memory."""
        return self.native.alloc(nbytes)

    def submit(self, dispatches, record=None, outputs=(), time_limit=None):
        """Run the dispatch list in one command buffer, make the `outputs` buffers' device
        writes visible in their arrays, and return (timing, record + zero_copy).
        time_limit: seconds (sim)."""
        t = self.native.run(dispatches, time_limit)
        for b in outputs:
            b.sync()
        return t, None if record is None else dict(record, zero_copy=_zero_copy(dispatches))


def nothing(record=None):
    """What an encoder returns when a count is 0: no buffers, no dispatch (Metal cannot wrap
    empty arrays or run empty grids)."""
    return None, ({"empty": True} if record is None else record)


def configure(ctx, space, dtype, shape, config=None):
    """(config, lookup level) of a dispatch of `space` at the op's `shape` key: the caller's
    `config` checked against the device and the problem (level "forced"), else the Choice
    of spaces.select (forced by lookup.forced, tuned, family default or generic)."""
    info = ctx.limits
    if config is not None:
        cfg = dict(config)
        spaces.require(space, cfg, info, shape=shape)
        return cfg, "forced"
    choice = spaces.select(space, dtype, shape, info)
    return dict(choice.config), choice.level


def pipelines(ctx, space, dtype, shape, cfg, level, kernels, extra=None):
    """(cfg, level, pipelines): the pipelines `kernels(cfg)` names, [(kernel, threads per
    threadgroup)], compiled from the space's metal file with the configuration's macros
    (plus `extra` macros that are part of the problem, not of the configuration: gemm and
    conv2d's fused activation), each fitting its own pipeline's thread limit (the module
    docstring's rule)."""
    file = spaces.space(space).file
    info = ctx.limits
    while True:
        wanted = kernels(cfg)
        macros = dict(spaces.macros(space, cfg), **(extra or {}))
        pipes = [ctx.compiled(k, file, macros) for k, _ in wanted]
        over = [(k, t, p.max_threads) for (k, t), p in zip(wanted, pipes)
                if p.max_threads and t > p.max_threads]
        if not over:
            spaces.require(space, cfg, info, shape=shape)
            return cfg, level, pipes
        limit = min(m for _, _, m in over)
        if level != "forced" and limit >= MIN_THREADS:
            fit = dict(info, max_threads_per_threadgroup=min(
                limit, info.get("max_threads_per_threadgroup") or limit))
            smaller = spaces.generic(space, dtype, shape, fit)
            if smaller != cfg and not spaces.problems(space, smaller, fit, shape=shape):
                cfg, level, info = dict(smaller), "generic", fit
                continue
        k, t, m = over[0]
        raise ValueError(f"{space} configuration {cfg} is invalid on "
                         f"{ctx.limits.get('name', 'this device')}: {k} runs {t} threads per "
                         f"threadgroup > the pipeline's {m}" + (
                             "; pin a smaller configuration (or let the lookup choose one)"
                             if level == "forced" else
                             f"; no configuration of {space} fits {limit} threads"))


def activation_macros(args):
    """The macros that compile the fused activation of an args dict (gemm / conv2d) into
    the kernels' stores: {} without one, so those pipelines stay the ones without."""
    act = args.get("activation", 0)
    return {"MK_ACT": act} if act else {}


def gpu_cores(info):
    """GPU cores of a device (its name in peaks.CHIPS, else its family's base chip; 8 when
    neither is known): how many threadgroups a grid needs to fill the GPU."""
    from mpskern import peaks
    for key in (info.get("name"), info.get("family")):
        try:
            return peaks.chip(key).cores
        except (ValueError, TypeError):
            continue
    return 8


def helper_threads(pipe, threads):
    """Threads per threadgroup of a helper kernel that takes any size (its grid is counted
    in threads or it guards its index): `threads`, halved until the pipeline allows it."""
    limit = pipe.max_threads or threads
    while threads > limit and threads > MIN_THREADS:
        threads //= 2
    if threads > limit:
        raise ValueError(f"{pipe.name}: the pipeline allows {limit} threads per threadgroup; "
                         f"mpskern's kernels need at least {MIN_THREADS}")
    return threads


def _zero_copy(dispatches):
    """Whether every numpy array the dispatches bind was used in place (no staging copy);
    device scratch buffers and constant bytes do not count."""
    bufs = [b[0] if isinstance(b, tuple) else b for d in dispatches for b in d["bindings"]]
    host = [b for b in bufs if isinstance(b, _native.Buffer) and b.array is not None]
    return all(b.zero_copy for b in host)
