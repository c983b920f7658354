"""GPT-2 small (12 layers, width 768, 12 heads) at sequence 256 from numpy through
mpskern's ops (numpy for the glue), checked against the same network in
torch.nn.functional with the same weights.

    python examples/gpt2.py [--batch 1] [--seq 256] [--backend cpu] [--small]

Weights are random with a fixed seed (nothing is downloaded; names as Hugging Face's
GPT2LMHeadModel, linear weights as (out, in)). layer_norm, linear (GELU after the MLP's
up projection), causal scaled_dot_product_attention are mpskern's; the embedding gather,
head split/merge and residual adds are numpy's.
"""
import numpy as np

from mpskern import models
from mpskern.models import example, gpt2

ap = example.parser(__doc__, "2 layers of width 64 (fast)")
ap.add_argument("--seq", type=int, default=256)
args = ap.parse_args()
net = models.GPT2
s = example.shape(net, args, seq=args.seq)
rng = np.random.default_rng(0)
P = gpt2.params(s, rng)
ids = gpt2.inputs(s, rng)["ids"]              # (B, T) token ids

kit = models.Kit(args.backend)
logits, dt = example.timed(lambda: gpt2.forward(kit, P, ids, s))
print(f"GPT-2 ({s['layers']} layers, width {s['width']}) batch {s['batch']} x {s['seq']} tokens "
      f"on {args.backend}: {dt * 1e3:.1f} ms, logits {logits.shape}, next token after the "
      f"prompt: {int(np.argmax(logits[0, -1]))}")

example.check(net, {"params": P, "ids": ids, "p": s}, logits)
