"""A Stable Diffusion 1.x UNet down block (CrossAttnDownBlock2D: 320 channels on 64x64
latents, two ResNet + transformer layers, then a stride-2 conv) from numpy through
mpskern's ops, checked against the same block in torch.nn.functional with the same weights.

    python examples/unet_block.py [--batch 1] [--backend cpu] [--small]

Weights are random with a fixed seed (nothing is downloaded; names as diffusers'
down_blocks.0). group_norm (+ SiLU), conv2d, layer_norm, linear (GELU on GEGLU's gate),
scaled_dot_product_attention (self- and cross-attention to a 77-token text context) are
mpskern's; the token/image reshapes, GEGLU's product and residual adds are numpy's.
"""
import argparse
import time

import numpy as np

from mpskern import models
from mpskern.models import unet
from mpskern.reference import max_error, tolerance

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--backend", default="cpu", help="cpu, sim, metal, mps")
ap.add_argument("--small", action="store_true", help="64 channels on 8x8 (fast)")
args = ap.parse_args()

net = models.UNET_BLOCK
s = net.shape(batch=args.batch, **(net.small if args.small else {}))
rng = np.random.default_rng(0)
P = unet.params(s, rng)
x = unet.inputs(s, rng)                       # latents x, time embedding temb, text context
W = unet.prepare(P)                           # GEGLU's projection cut into value and gate

kit = models.Kit(args.backend)
unet.forward(kit, W, x["x"], x["temb"], x["context"], s)    # warm-up
t0 = time.perf_counter()
y = unet.forward(kit, W, x["x"], x["temb"], x["context"], s)
dt = time.perf_counter() - t0
print(f"UNet down block ({s['channels']} ch @{s['size']}x{s['size']}) batch {s['batch']} on "
      f"{args.backend}: {dt * 1e3:.1f} ms, output {y.shape}")

want = net.reference({"params": P, **x, "p": s})
err, tol = max_error(y, want), tolerance("float32", unet.reduction(s))
print(f"max error vs the float64 reference (torch.nn.functional where torch is installed): {err:.2e} (tolerance {tol:.1e})")
if not err <= tol:
    raise SystemExit("MISMATCH: mpskern's result differs from the reference")
