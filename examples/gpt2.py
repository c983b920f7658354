"""GPT-2 small (12 layers, width 768, 12 heads) at sequence 256 from numpy through
mpskern's ops (numpy for the glue), checked against the same network in
torch.nn.functional with the same weights.

    python examples/gpt2.py [--batch 1] [--seq 256] [--backend cpu] [--small]

Weights are random with a fixed seed (nothing is downloaded; names as Hugging Face's
GPT2LMHeadModel, linear weights as (out, in)). layer_norm, linear (GELU after the MLP's
up projection), causal scaled_dot_product_attention are mpskern's; the embedding gather,
head split/merge and residual adds are numpy's.
"""
import argparse
import time

import numpy as np

from mpskern import models
from mpskern.models import gpt2
from mpskern.reference import max_error, tolerance

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--backend", default="cpu", help="cpu, sim, metal, mps")
ap.add_argument("--small", action="store_true", help="2 layers of width 64 (fast)")
args = ap.parse_args()

net = models.GPT2
s = net.shape(**{**(net.small if args.small else {}), "batch": args.batch,
                 **({} if args.small else {"seq": args.seq})})
rng = np.random.default_rng(0)
P = gpt2.params(s, rng)
ids = gpt2.inputs(s, rng)["ids"]              # (B, T) token ids

kit = models.Kit(args.backend)
gpt2.forward(kit, P, ids, s)                  # warm-up
t0 = time.perf_counter()
logits = gpt2.forward(kit, P, ids, s)
dt = time.perf_counter() - t0
print(f"GPT-2 ({s['layers']} layers, width {s['width']}) batch {s['batch']} x {s['seq']} tokens "
      f"on {args.backend}: {dt * 1e3:.1f} ms, logits {logits.shape}, next token after the "
      f"prompt: {int(np.argmax(logits[0, -1]))}")

want = net.reference({"params": P, "ids": ids, "p": s})
err, tol = max_error(logits, want), tolerance("float32", gpt2.reduction(s))
print(f"max error vs the float64 reference (torch.nn.functional where torch is installed): {err:.2e} (tolerance {tol:.1e})")
if not err <= tol:
    raise SystemExit("MISMATCH: mpskern's result differs from the reference")
