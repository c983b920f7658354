"""What a benchmark runs on: mpskern's backends and, when installed, the peers (PyTorch on
CPU and MPS, MLX) under the same protocol. A Target binds an op's inputs to a callable
that runs the op once and returns a numpy result (outputs preallocated where the API
allows, so the timed loop measures the op, not numpy's allocator).
"""
import numpy as np

from mpskern import peaks
from mpskern.bench import schema

PEERS = ("torch-cpu", "torch-mps", "mlx")


class Target:
    name = "?"
    kind = "mpskern"            # or "peer"
    timer = "wall"              # "wall", "gpu" (device timestamps), "sim" (simulator, CPU)
    simulated = False

    def availability(self):
        return True, ""

    def bind(self, spec, inputs, out_shape, dtype):
        """A callable running the op once on `inputs`, returning the result (numpy)."""
        raise NotImplementedError

    def _unknown(self):
        return None

    # what a target may not know, None by default: its device name, GPU family, peak
    # (peaks.Peak), the device time (ms) of the last call (targets with a device clock),
    # the kernel configuration and zero-copy state it used, its library's version
    device = gpu_family = peak = device_ms = config = zero_copy = version = _unknown


class MpskernTarget(Target):
    def __init__(self, name):
        self.name = name
        self.timer = {"cpu": "wall", "sim": "sim"}.get(name, "gpu")
        self.simulated = name == "sim"
        self._be = None

    @property
    def backend(self):
        if self._be is None:
            from mpskern import backends
            self._be = backends.get(self.name)
        return self._be

    def availability(self):
        from mpskern import backends
        return backends.availability(self.name)

    def device(self):
        return self.backend.info.get("name")

    def gpu_family(self):
        fam = self.backend.info.get("family")
        return f"apple{fam}" if fam else None

    def peak(self):
        if self.name == "cpu":
            return peaks.cpu_peak()
        if self.simulated:
            return None             # the simulator's speed says nothing about a GPU
        return peaks.lookup(self.device())

    def bind(self, spec, inputs, out_shape, dtype):
        """Inputs and output live in page-aligned memory (mpskern.empty), so a Metal device
        wraps them without a copy: the benchmark times the kernel, and the zero_copy column
        says whether that held."""
        import mpskern

        def aligned(v):
            if not isinstance(v, np.ndarray):
                return v
            a = mpskern.empty(v.shape, v.dtype)
            a[...] = v
            return a
        inp = {k: aligned(v) for k, v in inputs.items()}
        out = mpskern.empty(out_shape, dtype)
        return lambda: spec.call(inp, self.name, out)

    def device_ms(self):
        t = self.backend.last_timing
        return None if t is None else t[0]

    def config(self):
        return self.backend.last_config

    def zero_copy(self):
        c = self.backend.last_config
        return c.get("zero_copy") if isinstance(c, dict) else None


class ModelTarget(Target):
    """model-apple7 .. model-apple10 (or model-"Apple M1 Max"): no timing at all. The op runs
    once in the simulator's profiling mode (big grids sampled) and mpskern/profiling/model.py
    turns its counters into a modelled GPU time on the family's base chip. Its rows say
    timer "model", backend_kind "model": reports never mix them with measured rows."""
    kind = "model"
    timer = "model"
    simulated = True            # not a measurement of a GPU

    def __init__(self, name):
        from mpskern import peaks
        self.name = name
        self.chip = peaks.chip(name[len("model-"):])   # ValueError names what it knows

    def availability(self):
        from mpskern import backends
        from mpskern.sim import profile_build
        ok, why = backends.availability("sim")
        if not ok:
            return False, why
        cc, why = profile_build.clang()
        return (cc is not None), (why if cc is None else "")

    def device(self):
        return f"{self.chip.name} (model)"

    def gpu_family(self):
        return f"apple{self.chip.family}"

    def peak(self):
        return peaks.lookup(self.chip.name)

    def model_row(self, r, sp, shape, dtype, inputs, cost):
        """Fill benchmark row `r` with the model's estimate of this case (see the class)."""
        from mpskern.profiling import run
        prof, info = run.profile_op(sp.name, dict(shape), dtype, family=self.chip.family,
                                    inputs=inputs)
        m = run.model_of(prof, info, self.chip)
        sec = m.estimate_ms / 1e3
        r.update(status="ok", config=info["config"], median_ms=m.estimate_ms,
                 gflops=cost.flops / sec / 1e9, gbps=cost.bytes / sec / 1e9,
                 model=dict(m.as_dict(), sampled=any(d["sampled"] for d in prof.dispatches)))
        pk = self.peak()
        if pk is not None:
            schema.set_peak(r, pk, dtype)
        return r


class TorchTarget(Target):
    kind = "peer"

    def __init__(self, dev):
        self.dev = dev
        self.name = f"torch-{dev}"

    def availability(self):
        try:
            import torch
        except ImportError:
            return False, "PyTorch is not installed (pip install torch)"
        if self.dev == "mps" and not (torch.backends.mps.is_available()):
            return False, "torch.backends.mps.is_available() is False (needs macOS on Apple silicon)"
        return True, f"torch {torch.__version__}"

    def version(self):
        import torch
        return torch.__version__

    def device(self):
        if self.dev == "cpu":
            return peaks.cpu_device_name()
        return _metal_device_name()

    def peak(self):
        return peaks.cpu_peak() if self.dev == "cpu" else peaks.lookup(self.device())

    def bind(self, spec, inputs, out_shape, dtype):
        import torch
        import torch.nn.functional as F

        def conv(v):
            if isinstance(v, np.ndarray):
                return torch.from_numpy(np.ascontiguousarray(v)).to(self.dev)
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            return v
        t = conv(inputs)
        if self.dev == "mps":
            def run():
                y = spec.torch_call(F, t)
                torch.mps.synchronize()
                return y
        else:
            def run():
                return spec.torch_call(F, t)
        return _NumpyResult(run, lambda y: y.detach().cpu().numpy())


class MlxTarget(Target):
    """MLX on the Apple GPU; ops through mlx.core / mlx.nn equivalents. Untested off macOS."""
    name = "mlx"
    kind = "peer"

    def availability(self):
        try:
            import mlx.core as mx
        except ImportError:
            return False, "MLX is not installed (macOS on Apple silicon: pip install mlx)"
        return True, f"mlx {getattr(mx, '__version__', '?')}"

    def version(self):
        import mlx.core as mx
        return getattr(mx, "__version__", None)

    def device(self):
        return _metal_device_name()

    def peak(self):
        return peaks.lookup(self.device())

    def bind(self, spec, inputs, out_shape, dtype):
        import mlx.core as mx
        f = spec.mlx_call
        if f is None:
            raise NotImplementedError(f"mlx: no mapping for {spec.name} in the benchmark")
        t = {k: (mx.array(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}

        def run():
            y = f(mx, t)
            mx.eval(y)
            return y
        return _NumpyResult(run, lambda y: np.array(y))


def _metal_device_name():
    """The Metal device's name (as the metal backend reports it), so GPU peers share its
    peak and roofline."""
    from mpskern.bench.provenance import gpu_name
    return gpu_name() or "Apple GPU"


class _NumpyResult:
    """A callable that runs `run` (timed as is: the peer's own tensor type) and converts
    to numpy only for the check (as_numpy)."""

    def __init__(self, run, to_numpy):
        self.run = run
        self.to_numpy = to_numpy

    def __call__(self):
        return self.run()


def as_numpy(fn, y):
    """The numpy form of what a bound callable returned."""
    return fn.to_numpy(y) if isinstance(fn, _NumpyResult) else y


def make(name):
    if name == "torch-cpu":
        return TorchTarget("cpu")
    if name == "torch-mps":
        return TorchTarget("mps")
    if name == "mlx":
        return MlxTarget()
    if str(name).startswith("model-"):
        return ModelTarget(name)
    from mpskern import backends
    if name not in backends.NAMES:
        raise ValueError(f"unknown backend {name!r}; use one of "
                         f"{', '.join(backends.NAMES + PEERS)}")
    return MpskernTarget(name)


def default_names():
    """Every available mpskern backend except sim (CPU emulation: run it by asking for
    it), then every installed peer."""
    from mpskern import backends
    names = [n for n in backends.NAMES if n != "sim" and backends.availability(n)[0]]
    return names + [p for p in PEERS if make(p).availability()[0]]
