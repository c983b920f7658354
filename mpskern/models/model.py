"""A whole network as `mpskern bench --model` and the tests see it: the op table's interface
(mpskern/ops/op.py: shape fields and their grammar, seeded inputs, a float64 reference, the
torch peer, the cost), so the bench runner, its statistics, results schema and report treat
a network exactly as one op (the results' op name is the model's name).

One network module (resnet.py, gpt2.py, unet.py) holds: params(s, rng, dtype) (random
weights, torch/HF/diffusers names), inputs(s, rng, dtype) (a dict), prepare(P) (the
weights forward() takes: folded, split), forward(kit, W, *inputs, s) (mpskern + numpy, on a
mpskern/models/kit.py Kit), torch_forward(F, P, *inputs, s) (torch.nn.functional),
flops(s), activations(s) (elements of the largest tensors a layer holds at once) and
attention_scores(s) (elements of one head's largest score matrix)."""
import numpy as np

from mpskern.models.kit import Kit
from mpskern.ops.op import Op, _ShapeRng
from mpskern.structs import Cost

# bytes per score element mpskern/reference.py's attention holds at once: the scores, their
# exponentials, the quotient and the weights in float64 and two bool masks (peak RSS of one
# 4096 x 4096 head: 4.02-4.15 x its float64 scores, causal or not)
REFERENCE_SCORE_BYTES = 4 * 8 + 2


def torch_installed():
    """Whether the float64 reference can be torch's (fused attention: no score matrix)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


class Model(Op):
    metric = "gflops"
    kernel = "model"

    def __init__(self, name, module, fields, example, small, about):
        self.name = name
        self.module = module
        self.fields = tuple(fields)
        self.example = example
        self.small = small                  # fields of a reduced variant (tests, smoke runs)
        self.about = about
        self.presets = {"default": [(name, {})], "small": [(f"{name} small", small)]}
        self._weights = {}                  # shape key -> parameter count (for the cost)

    def label(self, s):
        diff = [f"{k}={v}" for k, v in s.items() if k != "batch" and v != self.defaults()[k]]
        return f"{self.name} b{s['batch']}" + (f" ({','.join(diff)})" if diff else "")

    def validate(self, s):
        super().validate(s)
        self.module.check(s)

    def defaults(self):
        return {f.name: f.default for f in self.fields}

    def shape(self, **fields):
        """The shape dict: the defaults (the real network) with `fields` changed."""
        return self.complete(fields)

    # -- instances --------------------------------------------------------------------------
    def inputs(self, s, dtype, rng):
        """{"params": P (torch names), "weights": prepare(P) (forward's), the network's
        inputs by name, "p": s}: weights first, then inputs, from one seeded generator."""
        P = self.module.params(s, rng, dtype)
        self._weights[self.key(s)] = sum(v.size for v in P.values())
        inp = self.module.inputs(s, rng, dtype)
        return {"params": P, "weights": self.module.prepare(P), **inp, "p": dict(s)}

    def footprint(self, s, dtype):
        """Bytes a bench case at shape `s` holds at once, from the shapes alone (nothing is
        allocated; Op.check_memory refuses what does not fit): the weights as drawn, as
        forward() takes them and in float64 (the reference), the inputs and their float64
        copy, the largest activations a layer holds (module.activations(s) elements) in the
        dtype and in float64, and without torch the reference's attention scores of one
        head (module.attention_scores(s) elements; torch's float64 attention is fused)."""
        dt = np.dtype(dtype)
        w = sum(a.size for a in self.module.params(s, _ShapeRng(), dt).values())
        x = sum(a.size for a in self.module.inputs(s, _ShapeRng(), dt).values())
        act = self.module.activations(s)
        scores = 0 if torch_installed() else self.module.attention_scores(s)
        return ((2 * w + x) * dt.itemsize + (w + x) * 8 + act * (dt.itemsize + 8) +
                scores * REFERENCE_SCORE_BYTES)

    def _names(self, inp):
        return [k for k in inp if k not in ("params", "weights", "p")]

    def run(self, kit, inp):
        """forward() on `kit` (mpskern/models/kit.py)."""
        return self.module.forward(kit, inp["weights"], *[inp[k] for k in self._names(inp)],
                                   inp["p"])

    def call(self, inp, backend, out=None):
        """The network through mpskern's ops on `backend` (out= is not used: a network's
        result is its last op's)."""
        return self.run(Kit(backend), inp)

    def reference(self, inp, torch=None):
        """The network in float64: torch_forward() in float64 where torch is installed (an
        independent implementation, and fast), else the same forward() on
        mpskern/reference.py's float64 ops (minutes for the full-size networks).
        torch=False forces the latter, True the former."""
        P = {k: v.astype(np.float64) for k, v in inp["params"].items()}
        i64 = {k: (inp[k].astype(np.float64) if inp[k].dtype.kind == "f" else inp[k])
               for k in self._names(inp)}
        if torch is None:
            torch = torch_installed()
        if not torch:
            return self.run(Kit("reference"), {"weights": self.module.prepare(P), **i64,
                                               "p": inp["p"]})
        import torch as T
        import torch.nn.functional as F
        t = {"params": {k: T.from_numpy(v) for k, v in P.items()}, "p": inp["p"],
             **{k: T.from_numpy(v) for k, v in i64.items()}}
        return self.torch_call(F, t).numpy()

    def torch_call(self, F, t):
        """torch_forward() in eval mode without autograd (inference as users run it)."""
        import torch
        with torch.no_grad():
            return self.module.torch_forward(F, t["params"], *[t[k] for k in self._names(t)],
                                             t["p"])

    def reduction(self, inp):
        return self.module.reduction(inp["p"])

    def costs(self, s, out_shape, itemsize):
        n = self._weights.get(self.key(s), 0) + int(np.prod(out_shape))
        return Cost(flops=float(self.module.flops(s)), bytes=float(n * itemsize))
