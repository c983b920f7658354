"""What the benchmark knows about each public op: its shape fields (the `--shape` grammar),
how to build inputs, how mpskern and the peers are called, the float64 reference, the
op's struct fields (for mpskern.costs) and the reduction length (for the tolerance).

A shape is a dict of ints over the op's fields. `--shape` text is comma-separated tokens,
`key=value` or positional in field order; missing fields take their defaults (shown in
`mpskern bench --help`), e.g. for conv2d "1,64,56,56,64,3,pad=1" or "C=64,H=56,W=56,K=64,R=3,pad=1".
"""
from dataclasses import dataclass

import numpy as np

from mpskern import reference as ref

EPS = 1e-5


@dataclass(frozen=True)
class Field:
    name: str
    default: object = None          # None: required; a str: copy that field's value
    help: str = ""


class OpSpec:
    name = "?"
    fields = ()
    example = ""

    # -- shapes ---------------------------------------------------------------------------
    def parse(self, text):
        """A shape dict from `--shape` text; ValueError saying what is wrong and the grammar."""
        names = [f.name for f in self.fields]
        lower = {n.lower(): n for n in names}
        vals, pos = {}, 0
        tokens = [t.strip() for t in str(text).replace(" ", ",").split(",") if t.strip()]
        if not tokens:
            raise ValueError(f"{self.name}: empty --shape; {self.grammar()}")
        for tok in tokens:
            if "=" in tok:
                k, v = tok.split("=", 1)
                key = lower.get(k.strip().lower())
                if key is None:
                    raise ValueError(f"{self.name}: unknown shape field {k.strip()!r} in "
                                     f"--shape {text!r}; {self.grammar()}")
            else:
                if pos >= len(names):
                    raise ValueError(f"{self.name}: too many values in --shape {text!r}; "
                                     f"{self.grammar()}")
                key, v = names[pos], tok
                pos += 1
            if key in vals:
                raise ValueError(f"{self.name}: field {key} given twice in --shape {text!r}")
            try:
                vals[key] = int(v)
            except ValueError:
                raise ValueError(f"{self.name}: {key}={v!r} in --shape {text!r} is not an "
                                 f"integer; {self.grammar()}") from None
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
        for k, v in s.items():
            if v < 0 or (v == 0 and k not in self.zero_ok):
                raise ValueError(f"{self.name}: shape field {k}={v} must be "
                                 f"{'>= 0' if k in self.zero_ok else '> 0'}")

    zero_ok = frozenset()

    def grammar(self):
        parts = [f.name if f.default is None else f"{f.name}={f.default}" for f in self.fields]
        return f"fields: {','.join(parts)} (e.g. --shape {self.example!r})"

    def key(self, s):
        return ",".join(f"{k}={v}" for k, v in s.items())

    def label(self, s):
        return self.key(s)

    # -- inputs and calls -----------------------------------------------------------------
    def inputs(self, s, dtype, rng):
        raise NotImplementedError

    def call(self, mod, inp, backend, out):
        """Call the public op of module `mod` (mpskern) with backend= and out=."""
        raise NotImplementedError

    def torch_call(self, F, t):
        """torch.nn.functional call on tensors `t` (same keys as the inputs)."""
        raise NotImplementedError

    def reference(self, inp):
        raise NotImplementedError

    def struct_args(self, s, out_shape):
        """The fields of the op's struct in metal/mk_args.h (for mpskern.costs)."""
        raise NotImplementedError

    def reduction(self, s):
        """Terms summed per output element (the check's tolerance grows with it)."""
        return 1


def _normal(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _vec(rng, n, lo=0.5, hi=1.5):
    return rng.uniform(lo, hi, n).astype(np.float32)


class Conv2d(OpSpec):
    name = "conv2d"
    fields = (Field("N", 1, "batch"), Field("C", None, "input channels"),
              Field("H", None, "height"), Field("W", "H", "width (default H)"),
              Field("K", None, "output channels"), Field("R", None, "kernel height"),
              Field("S", "R", "kernel width (default R)"), Field("stride", 1),
              Field("pad", 0), Field("dil", 1), Field("groups", 1), Field("bias", 1, "0/1"))
    example = "1,64,56,56,64,3,pad=1"
    zero_ok = frozenset({"pad", "bias"})

    def validate(self, s):
        super().validate(s)
        if s["C"] % s["groups"] or s["K"] % s["groups"]:
            raise ValueError(f"conv2d: groups={s['groups']} must divide C={s['C']} and K={s['K']}")
        for d, k in (("H", "R"), ("W", "S")):
            if s[d] + 2 * s["pad"] < s["dil"] * (s[k] - 1) + 1:
                raise ValueError(f"conv2d: kernel {k}={s[k]} (dil={s['dil']}) is larger than the "
                                 f"padded input {d}+2*pad={s[d] + 2 * s['pad']}")

    def label(self, s):
        g = f" g{s['groups']}" if s["groups"] > 1 else ""
        d = f" d{s['dil']}" if s["dil"] > 1 else ""
        return (f"{s['N']}x{s['C']}x{s['H']}x{s['W']} {s['R']}x{s['S']}->{s['K']} "
                f"s{s['stride']}p{s['pad']}{d}{g}")

    def inputs(self, s, dtype, rng):
        fan = s["C"] // s["groups"] * s["R"] * s["S"]
        return dict(x=_normal(rng, (s["N"], s["C"], s["H"], s["W"]), dtype),
                    w=_normal(rng, (s["K"], s["C"] // s["groups"], s["R"], s["S"]), dtype,
                              fan ** -0.5),
                    b=_normal(rng, s["K"], dtype) if s["bias"] else None,
                    p=dict(stride=s["stride"], padding=s["pad"], dilation=s["dil"],
                           groups=s["groups"]))

    def call(self, mod, i, backend, out):
        return mod.conv2d(i["x"], i["w"], i["b"], backend=backend, out=out, **i["p"])

    def torch_call(self, F, t):
        return F.conv2d(t["x"], t["w"], t["b"], **t["p"])

    def reference(self, i):
        p = i["p"]
        return ref.conv2d(i["x"], i["w"], i["b"], **p)

    def struct_args(self, s, out_shape):
        return dict(N=s["N"], C=s["C"], H=s["H"], W=s["W"], K=s["K"], R=s["R"], S=s["S"],
                    P=out_shape[2], Q=out_shape[3], groups=s["groups"], has_bias=s["bias"])

    def reduction(self, s):
        return s["C"] // s["groups"] * s["R"] * s["S"]


class Matmul(OpSpec):
    name = "matmul"
    fields = (Field("M", None, "rows of a"), Field("N", "M", "columns of b (default M)"),
              Field("K", "M", "inner dimension (default M)"), Field("batch", 1))
    example = "1024"

    def label(self, s):
        b = f"{s['batch']}x" if s["batch"] > 1 else ""
        return f"{b}{s['M']}x{s['N']}x{s['K']}"

    def inputs(self, s, dtype, rng):
        lead = (s["batch"],) if s["batch"] > 1 else ()
        return dict(a=_normal(rng, lead + (s["M"], s["K"]), dtype, s["K"] ** -0.25),
                    b=_normal(rng, lead + (s["K"], s["N"]), dtype, s["K"] ** -0.25))

    def call(self, mod, i, backend, out):
        return mod.matmul(i["a"], i["b"], backend=backend, out=out)

    def torch_call(self, F, t):
        import torch
        return torch.matmul(t["a"], t["b"])

    def reference(self, i):
        return ref.matmul(i["a"], i["b"])

    def struct_args(self, s, out_shape):
        return dict(batch=s["batch"], M=s["M"], N=s["N"], K=s["K"])

    def reduction(self, s):
        return s["K"]


class Gemm(OpSpec):
    name = "gemm"
    fields = (Field("M", None), Field("N", "M", "(default M)"), Field("K", "M", "(default M)"),
              Field("ta", 0, "A transposed 0/1"), Field("tb", 0, "B transposed 0/1"),
              Field("c", 1, "add beta*C 0/1"))
    example = "512,256,1024,tb=1"
    zero_ok = frozenset({"ta", "tb", "c"})

    def label(self, s):
        t = "".join(("T" if s["ta"] else "N", "T" if s["tb"] else "N"))
        return f"{s['M']}x{s['N']}x{s['K']} {t}{' +C' if s['c'] else ''}"

    def inputs(self, s, dtype, rng):
        M, N, K = s["M"], s["N"], s["K"]
        sc = K ** -0.25
        return dict(a=_normal(rng, (K, M) if s["ta"] else (M, K), dtype, sc),
                    b=_normal(rng, (N, K) if s["tb"] else (K, N), dtype, sc),
                    c=_normal(rng, (M, N), dtype) if s["c"] else None,
                    p=dict(alpha=1.0, beta=0.5 if s["c"] else 0.0, trans_a=bool(s["ta"]),
                           trans_b=bool(s["tb"])))

    def call(self, mod, i, backend, out):
        return mod.gemm(i["a"], i["b"], i["c"], backend=backend, out=out, **i["p"])

    def torch_call(self, F, t):
        import torch
        p = t["p"]
        a = t["a"].T if p["trans_a"] else t["a"]
        b = t["b"].T if p["trans_b"] else t["b"]
        if t["c"] is None:
            return torch.mm(a, b) * p["alpha"]
        return torch.addmm(t["c"], a, b, beta=p["beta"], alpha=p["alpha"])

    def reference(self, i):
        p = i["p"]
        return ref.gemm(i["a"], i["b"], i["c"], **p)

    def struct_args(self, s, out_shape):
        return dict(batch=1, M=s["M"], N=s["N"], K=s["K"], has_c=s["c"])

    def reduction(self, s):
        return s["K"]


class Pool2d(OpSpec):
    mode = "max"
    fields = (Field("N", 1), Field("C", None), Field("H", None), Field("W", "H", "(default H)"),
              Field("k", None, "square window"), Field("stride", "k", "(default k)"),
              Field("pad", 0), Field("dil", 1, "dilation"),
              Field("ceil", 0, "ceil_mode 0/1"))
    example = "1,64,112,112,3,2,1"
    zero_ok = frozenset({"pad", "ceil"})
    _LATER = {"dil": 1, "ceil": 0}     # fields added later: left out of keys at their default

    @property
    def name(self):
        return f"{self.mode}_pool2d"

    def validate(self, s):
        super().validate(s)
        if s["ceil"] not in (0, 1):
            raise ValueError(f"{self.name}: ceil={s['ceil']} must be 0 or 1")
        dil = s.get("dil", 1)
        span = dil * (s["k"] - 1) + 1            # the window's extent on the input
        if 2 * s["pad"] > span:
            raise ValueError(f"{self.name}: pad={s['pad']} must be at most half the window "
                             f"k={s['k']}" + (f" (dil={dil}: extent {span})" if dil > 1 else ""))
        if min(s["H"], s["W"]) + 2 * s["pad"] < span:
            raise ValueError(f"{self.name}: window k={s['k']} is larger than the padded input")

    def key(self, s):
        return ",".join(f"{k}={v}" for k, v in s.items() if self._LATER.get(k, v + 1) != v)

    def label(self, s):
        d = f" d{s['dil']}" if s.get("dil", 1) > 1 else ""
        c = " ceil" if s["ceil"] else ""
        return f"{s['N']}x{s['C']}x{s['H']}x{s['W']} k{s['k']}s{s['stride']}p{s['pad']}{d}{c}"

    def inputs(self, s, dtype, rng):
        p = dict(kernel_size=s["k"], stride=s["stride"], padding=s["pad"], ceil_mode=bool(s["ceil"]))
        if self.mode == "max":
            p["dilation"] = s["dil"]
        return dict(x=_normal(rng, (s["N"], s["C"], s["H"], s["W"]), dtype), p=p)

    def call(self, mod, i, backend, out):
        return getattr(mod, self.name)(i["x"], backend=backend, out=out, **i["p"])

    def torch_call(self, F, t):
        return getattr(F, self.name)(t["x"], **t["p"])

    def reference(self, i):
        return getattr(ref, self.name)(i["x"], **i["p"])

    def struct_args(self, s, out_shape):
        return dict(N=s["N"], C=s["C"], H=s["H"], W=s["W"], P=out_shape[2], Q=out_shape[3],
                    kh=s["k"], kw=s["k"])

    def reduction(self, s):
        return s["k"] * s["k"] if self.mode == "avg" else 1


class MaxPool2d(Pool2d):
    mode = "max"


class AvgPool2d(Pool2d):
    mode = "avg"
    fields = tuple(f for f in Pool2d.fields if f.name != "dil")   # torch's has no dilation


class Rows(OpSpec):
    """Ops over the last axis of a (rows, n) array."""
    fields = (Field("rows", None), Field("n", None, "length of the reduced (last) axis"))
    example = "4096,1024"

    def label(self, s):
        return f"{s['rows']}x{s['n']}"

    def reduction(self, s):
        return s["n"]


class Softmax(Rows):
    name = "softmax"
    log = False

    def inputs(self, s, dtype, rng):
        return dict(x=_normal(rng, (s["rows"], s["n"]), dtype, 3.0))

    def call(self, mod, i, backend, out):
        return getattr(mod, self.name)(i["x"], axis=-1, backend=backend, out=out)

    def torch_call(self, F, t):
        return getattr(F, self.name)(t["x"], dim=-1)

    def reference(self, i):
        return getattr(ref, self.name)(i["x"], axis=-1)

    def struct_args(self, s, out_shape):
        return dict(outer=s["rows"], n=s["n"], inner=1, log=int(self.log))


class LogSoftmax(Softmax):
    name = "log_softmax"
    log = True


class LayerNorm(Rows):
    name = "layer_norm"

    def inputs(self, s, dtype, rng):
        return dict(x=_normal(rng, (s["rows"], s["n"]), dtype), w=_vec(rng, s["n"]),
                    b=_vec(rng, s["n"], -0.5, 0.5))

    def call(self, mod, i, backend, out):
        return mod.layer_norm(i["x"], (i["x"].shape[-1],), i["w"], i["b"], eps=EPS,
                              backend=backend, out=out)

    def torch_call(self, F, t):
        return F.layer_norm(t["x"], (t["x"].shape[-1],), t["w"].to(t["x"].dtype),
                            t["b"].to(t["x"].dtype), eps=EPS)

    def reference(self, i):
        return ref.layer_norm(i["x"], (i["x"].shape[-1],), i["w"], i["b"], EPS)

    def struct_args(self, s, out_shape):
        return dict(rows=s["rows"], n=s["n"], kind=0, has_weight=1, has_bias=1)


class RmsNorm(Rows):
    name = "rms_norm"

    def inputs(self, s, dtype, rng):
        return dict(x=_normal(rng, (s["rows"], s["n"]), dtype), w=_vec(rng, s["n"]))

    def call(self, mod, i, backend, out):
        return mod.rms_norm(i["x"], (i["x"].shape[-1],), i["w"], eps=EPS, backend=backend, out=out)

    def torch_call(self, F, t):
        return F.rms_norm(t["x"], (t["x"].shape[-1],), t["w"].to(t["x"].dtype), eps=EPS)

    def reference(self, i):
        return ref.rms_norm(i["x"], (i["x"].shape[-1],), i["w"], EPS)

    def struct_args(self, s, out_shape):
        return dict(rows=s["rows"], n=s["n"], kind=1, has_weight=1, has_bias=0)


class BatchNorm(OpSpec):
    name = "batch_norm"
    fields = (Field("N", 1), Field("C", None), Field("H", None), Field("W", "H", "(default H)"))
    example = "8,256,14,14"

    def label(self, s):
        return f"{s['N']}x{s['C']}x{s['H']}x{s['W']}"

    def inputs(self, s, dtype, rng):
        C = s["C"]
        return dict(x=_normal(rng, (s["N"], C, s["H"], s["W"]), dtype),
                    m=_vec(rng, C, -0.5, 0.5), v=_vec(rng, C), w=_vec(rng, C),
                    b=_vec(rng, C, -0.5, 0.5))

    def call(self, mod, i, backend, out):
        return mod.batch_norm(i["x"], i["m"], i["v"], i["w"], i["b"], training=False, eps=EPS,
                              backend=backend, out=out)

    def torch_call(self, F, t):
        return F.batch_norm(t["x"], t["m"], t["v"], t["w"], t["b"], training=False, eps=EPS)

    def reference(self, i):
        return ref.batch_norm(i["x"], i["m"], i["v"], i["w"], i["b"], training=False, eps=EPS)[0]

    def struct_args(self, s, out_shape):
        return dict(N=s["N"], C=s["C"], HW=s["H"] * s["W"], training=0, has_running=1,
                    has_weight=1, has_bias=1)


class GroupNorm(OpSpec):
    name = "group_norm"
    fields = (Field("N", 1), Field("C", None), Field("H", None), Field("W", "H", "(default H)"),
              Field("G", 32, "groups"))
    example = "8,256,28,28,G=32"

    def validate(self, s):
        super().validate(s)
        if s["C"] % s["G"]:
            raise ValueError(f"group_norm: G={s['G']} must divide C={s['C']}")

    def label(self, s):
        return f"{s['N']}x{s['C']}x{s['H']}x{s['W']} G{s['G']}"

    def inputs(self, s, dtype, rng):
        C = s["C"]
        return dict(x=_normal(rng, (s["N"], C, s["H"], s["W"]), dtype), G=s["G"],
                    w=_vec(rng, C), b=_vec(rng, C, -0.5, 0.5))

    def call(self, mod, i, backend, out):
        return mod.group_norm(i["x"], i["G"], i["w"], i["b"], eps=EPS, backend=backend, out=out)

    def torch_call(self, F, t):
        return F.group_norm(t["x"], t["G"], t["w"].to(t["x"].dtype), t["b"].to(t["x"].dtype),
                            eps=EPS)

    def reference(self, i):
        return ref.group_norm(i["x"], i["G"], i["w"], i["b"], EPS)

    def struct_args(self, s, out_shape):
        return dict(N=s["N"], C=s["C"], HW=s["H"] * s["W"], groups=s["G"], has_weight=1,
                    has_bias=1)

    def reduction(self, s):
        return s["C"] // s["G"] * s["H"] * s["W"]


SPECS = {s.name: s for s in (Conv2d(), Matmul(), Gemm(), MaxPool2d(), AvgPool2d(), Softmax(),
                             LogSoftmax(), LayerNorm(), RmsNorm(), BatchNorm(), GroupNorm())}


def spec(op):
    try:
        return SPECS[op]
    except KeyError:
        raise ValueError(f"unknown op {op!r}; use one of {', '.join(SPECS)}") from None
