"""What the op table (mpskern/ops/__init__.py: TABLE) knows about each public op besides
its function: one Op subclass per op, declared in the op's own module (mpskern/ops/<op>.py)
and used by `mpskern bench`, `mpskern tune`, `mpskern selftest` and the tests:

    fields, example     its shape: the --shape grammar below, and the defaults
    kernel, cost        the native kernel it runs (a row of _native.OPS, the name public
                        ops pass to Backend.execute) and that struct's FLOP/byte count
                        (mpskern/structs.py); metric: "gflops" or "gbps"; work_done: its
                        FLOPs are what every implementation executes (may raise a peak)
    inputs              seeded inputs for a shape: arrays and "p", the keyword options
    of, arrays,         its function in mpskern and in mpskern.reference (the float64 twin
    keywords            takes the same arguments), and how the inputs are passed to them:
                        call() runs the public op, reference() the float64 one
    reduction           the terms summed per output (the tolerance grows with it)
    torch_call,         the same op in PyTorch / MLX, for `mpskern bench`'s peers
    mlx_call
    presets             named shape sets of `mpskern bench --preset`
    tune                default shapes of `mpskern tune` (metal, sim)
    checks              the cases of `mpskern selftest`: odd sizes, options, empties
    footprint,          the memory a case holds (estimated from the shapes: inputs(), run
    check_memory        on a generator of shapes, and out_elements()), refused with the
                        bytes when it does not fit (bench, tune and profile, before they
                        allocate)

THE SHAPE GRAMMAR (`mpskern bench --shape`, `mpskern tune --shape`): the op's shape fields
as integers (ASCII digits), positional in the op's field order or NAME=VALUE (any case),
separated by one comma, spaces or one x: "1,64,56,56,64,3,pad=1", "8x64x56x56x64x3x3",
"C=64 H=56 K=64 R=3"; an empty value ("8,,64", a trailing comma, "8x") is an error.
Fields left out take their defaults; a default naming another field copies its value (W=H:
square). `mpskern bench --help` lists every op's fields; a malformed shape says the
grammar and the op's fields.
"""
import math
import re
from dataclasses import dataclass

import numpy as np

import mpskern
from mpskern import memory, structs
from mpskern import reference as ref

GRAMMAR = ("positional in this order or NAME=VALUE, separated by one comma, spaces or one x; "
           "fields left out take the default shown")


@dataclass(frozen=True)
class Field:
    name: str
    default: object = None          # None: required; a str: copy that field's value
    help: str = ""


@dataclass(frozen=True)
class Check:
    """A `mpskern selftest` case: a label and inputs(rng, dtype) -> the op's inputs dict."""
    label: str
    inputs: object


def normal(rng, shape, dtype, scale=1.0):
    """The inputs' distribution: standard normal times `scale`, in `dtype`."""
    return (rng.standard_normal(shape) * scale).astype(dtype)


# the fused activations' shape-field codes (`act=`): structs.ACTIVATIONS by number
ACT_NAMES = {code: name for name, code in structs.ACTIVATIONS.items()}
ACT_FIELD = Field("act", 0, "fused activation: 0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu")


def act_label(code):
    return f" +{ACT_NAMES[code]}" if code else ""


def torch_activation(F, y, name):
    """torch's function for a fused activation name (the peers of gemm / conv2d)."""
    if name is None:
        return y
    if name == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    return {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[name](y)


NORM_EPS = 1e-5                     # the norms' eps in the table's inputs and checks (torch's default)


def torch_call_weights_as_x(op, F, t):
    """Op.torch_call of an op whose per-feature weights (op.keywords) torch wants in x's dtype."""
    dt = t["x"].dtype
    return op.of(F)(t["x"], **{p: t[k].to(dt) for k, p in op.keywords.items()}, **t["p"])


def vector(rng, n, lo=0.5, hi=1.5):
    """A per-channel float32 parameter (weights, biases, running statistics)."""
    return rng.uniform(lo, hi, n).astype(np.float32)


class _Shaped:
    """An input as Op.footprint sees it: its shape and dtype (what inputs() builds from the
    generator's arrays: scaled, cast, compared), no data."""
    def __init__(self, shape, dtype=np.float64):
        self.shape = tuple(shape) if np.ndim(shape) else (int(shape),)
        self.dtype = np.dtype(dtype)
        self.size = math.prod(self.shape)

    def astype(self, dtype):
        return _Shaped(self.shape, dtype)

    def __mul__(self, other):
        return self
    __rmul__ = __truediv__ = __add__ = __radd__ = __sub__ = __mul__

    def __gt__(self, other):
        return _Shaped(self.shape, bool)
    __lt__ = __ge__ = __le__ = __gt__


class _ShapeRng:
    """The generator inputs() draws from in Op.footprint: arrays of shapes only."""
    def standard_normal(self, size):
        return _Shaped(size)

    def random(self, size):
        return _Shaped(size)

    def uniform(self, low=0.0, high=1.0, size=None):
        return _Shaped(size)

    def integers(self, low, high=None, size=None, dtype=np.int64):
        return _Shaped(size, dtype)


_INTEGER = re.compile(r"-?[0-9]+")      # re's \d takes every script's digits: spelled out


def _shape_tokens(op, text):
    """The pieces of --shape text: separated by one comma (spaces around it allowed), by
    spaces, or, outside NAME=VALUE, by one x/X/*. An empty piece (',,', a leading or
    trailing comma, 'xx', '8x') is an error naming it, never skipped."""
    def bad(what):
        return ValueError(f"{op.name}: --shape {text!r} {what}; {op.grammar()}")
    if not text.strip():
        raise bad("is empty")
    out = []
    parts = re.split(r"\s*,\s*", text.strip())
    for i, part in enumerate(parts):
        if not part:
            where = ("starts with a comma" if i == 0 else "ends with a comma"
                     if i == len(parts) - 1 else f"has an empty value between two commas "
                     f"(after {','.join(parts[:i])!r})")
            raise bad(where)
        for word in part.split():
            if "=" in word:
                out.append(word)
                continue
            pieces = re.split(r"[xX*]", word)
            if "" in pieces:
                raise bad(f"has an empty value around an x or * in {word!r}")
            out += pieces
    return out


def _gib(n):
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


class Op:
    name = "?"
    kernel = "?"                    # the native kernel (_native.OPS row) it runs
    cost = None                     # mpskern.structs.<kernel>_cost
    metric = "gbps"
    work_done = False
    fields = ()
    example = ""
    zero_ok = frozenset()           # fields that may be 0
    later = {}                      # fields added after results were saved: name -> default,
                                    # left out of the key at that default (old keys still match)
    presets = {}                    # name -> [(label, fields)]
    tune = {}                       # backend ("metal", "sim") -> fields of the default shape
    checks = ()                     # selftest: [Check]

    # -- the shape grammar ------------------------------------------------------------------
    def parse(self, text):
        """A shape dict from --shape text; ValueError naming --shape, the bad piece and the
        grammar with an example."""
        names = [f.name for f in self.fields]
        lower = {n.lower(): n for n in names}
        vals, pos = {}, 0
        for tok in _shape_tokens(self, str(text)):
            if "=" in tok:
                k, v = tok.split("=", 1)
                key = lower.get(k.lower())
                if key is None:
                    raise ValueError(f"{self.name}: unknown shape field {k!r} in "
                                     f"--shape {text!r}; {self.grammar()}")
            else:
                if pos >= len(names):
                    raise ValueError(f"{self.name}: too many values in --shape {text!r} (the "
                                     f"{len(names)} fields are {','.join(names)}, then {tok!r}); "
                                     f"{self.grammar()}")
                key, v = names[pos], tok
                pos += 1
            if key in vals:
                raise ValueError(f"{self.name}: field {key} given twice in --shape {text!r}; "
                                 f"{self.grammar()}")
            if not _INTEGER.fullmatch(v):     # int() would take '８', '1_000', ' 8', '+8'
                raise ValueError(f"{self.name}: {key}={v!r} in --shape {text!r} is not an "
                                 f"integer (ASCII digits 0-9); {self.grammar()}")
            vals[key] = int(v)
        return self.complete(vals, text)

    def complete(self, vals, text=None):
        """Fill defaults, check values; returns the shape dict in field order."""
        out = {}
        for f in self.fields:
            if f.name in vals:
                out[f.name] = int(vals[f.name])
            elif f.default is None:
                raise ValueError(f"{self.name}: --shape {text or vals!r} lacks {f.name}; "
                                 f"{self.grammar()}")
            elif isinstance(f.default, str):
                out[f.name] = out[f.default]
            else:
                out[f.name] = f.default
        bad = [k for k in vals if k not in out]
        if bad:
            raise ValueError(f"{self.name}: unknown shape field(s) {bad}; {self.grammar()}")
        self.validate(out)
        return out

    def validate(self, s):
        if "act" in s and s["act"] not in ACT_NAMES:
            raise ValueError(f"{self.name}: act={s['act']} is not one of {sorted(ACT_NAMES)} "
                             f"({', '.join(f'{k} {v}' for k, v in ACT_NAMES.items())})")
        for k, v in s.items():
            if v < 0 or (v == 0 and k not in self.zero_ok):
                raise ValueError(f"{self.name}: shape field {k}={v} must be "
                                 f"{'>= 0' if k in self.zero_ok else '> 0'}; {self.grammar()}")

    def grammar(self):
        parts = [f.name if f.default is None else f"{f.name}={f.default}" for f in self.fields]
        return (f"{self.name} shape: {','.join(parts)} ({GRAMMAR}; e.g. --shape "
                f"{self.example!r})")

    def key(self, s):
        """The canonical text of a shape (results files match rows on it)."""
        return ",".join(f"{k}={v}" for k, v in s.items() if self.later.get(k, v + 1) != v)

    def label(self, s):
        return self.key(s)

    def preset(self, name):
        """[(label, shape)] of a named preset, each label the preset's name for the case and
        the full shape ("res4 3x3 256 (8x256x14x14 3x3->256 s1p1)"); ValueError listing the
        names."""
        if name not in self.presets:
            raise ValueError(f"{self.name} has no preset {name!r}; use one of "
                             f"{', '.join(self.presets)}")
        out = []
        for label, fields in self.presets[name]:
            s = self.complete(fields)
            full = self.label(s)
            out.append((label if full in label else f"{label} ({full})", s))
        return out

    def tune_shape(self, backend):
        """The shape `mpskern tune` uses when none is given (small on the simulator)."""
        return self.complete(self.tune["sim" if backend == "sim" else "metal"])

    # -- instances --------------------------------------------------------------------------
    arrays = ("x",)                 # input keys passed positionally, in the function's order
    keywords = {}                   # input key -> keyword parameter, for arrays after options

    def inputs(self, s, dtype, rng):
        """Seeded inputs of shape `s`: a dict of arrays (and "p": keyword options)."""
        raise NotImplementedError

    @staticmethod
    def of(ns):
        """The op's function in `ns`: mpskern (the public op) or mpskern.reference."""
        raise NotImplementedError

    def _arguments(self, i):
        kw = {param: i[k] for k, param in self.keywords.items()}
        kw.update(i.get("p", ()))
        return [i[k] for k in self.arrays], kw

    # -- memory -----------------------------------------------------------------------------
    def out_elements(self, s, inp):
        """Elements of the op's result at shape `s` (inp: inputs() with shapes only, see
        footprint); the default: those of its first array (row ops keep x's shape)."""
        return inp[self.arrays[0]].size

    def scratch_elements(self, s, inp):
        """float64 elements the reference holds besides its inputs' copies and its result:
        by default one temporary of the result's size."""
        return self.out_elements(s, inp)

    def footprint(self, s, dtype):
        """Bytes a bench, tune or profile case at shape `s` holds at once, from the shapes
        alone (nothing is allocated): the inputs, two float64 copies of them in the
        reference (converted, padded or repeated), its result and scratch, and the op's
        own result."""
        dt = np.dtype(dtype)
        inp = {k: a for k, a in self.inputs(s, dt, _ShapeRng()).items() if isinstance(a, _Shaped)}
        ins = sum(a.size * (a.dtype.itemsize + 16) for a in inp.values())
        out = self.out_elements(s, inp)
        return ins + out * (dt.itemsize + 8) + 8 * self.scratch_elements(s, inp)

    def check_memory(self, s, dtype):
        """ValueError, one line naming the shape and the bytes, when a case at shape `s`
        cannot fit in the memory available now (memory.available_bytes); before anything is
        allocated, so that a huge --shape is an error, not a MemoryError or an OOM kill."""
        need, have = self.footprint(s, dtype), memory.available_bytes()
        if need is not None and have is not None and need > have:
            raise ValueError(f"{self.name} --shape {self.key(s)} ({np.dtype(dtype).name}) needs "
                             f"about {_gib(need)} ({need:,} bytes) of memory (its inputs, their float64 "
                             f"reference and the results) but {_gib(have)} is available "
                             "here; give a smaller --shape")

    def call(self, inp, backend, out=None):
        """The public op (as users call it: mpskern.<op>) on the inputs, through backend=
        and out=."""
        args, kw = self._arguments(inp)
        return self.of(mpskern)(*args, backend=backend, out=out, **kw)

    def reference(self, inp):
        """The float64 result (mpskern/reference.py)."""
        args, kw = self._arguments(inp)
        return self.of(ref)(*args, **kw)

    def torch_call(self, F, t):
        """torch.nn.functional's op on tensors `t` (the inputs' keys)."""
        raise NotImplementedError

    mlx_call = None                 # (mx, t) -> MLX's op, where the benchmark has one

    def reduction(self, inp):
        """Terms summed per output element (the check's tolerance grows with it)."""
        return 1

    def struct(self, s, out_shape):
        """The kernel's struct fields for shape `s` (mpskern/structs.py), for its cost."""
        raise NotImplementedError

    def costs(self, s, out_shape, itemsize):
        """FLOPs and compulsory bytes of one call at shape `s` (structs.Cost)."""
        return self.cost(**self.struct(s, out_shape), itemsize=itemsize)
