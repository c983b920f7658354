"""A Stable Diffusion 1.x UNet down block (CrossAttnDownBlock2D: 320 channels on 64x64
latents, two ResNet + transformer layers, then a stride-2 conv) from numpy through
mpskern's ops, checked against the same block in torch.nn.functional with the same weights.

    python examples/unet_block.py [--batch 1] [--backend cpu] [--small]

Weights are random with a fixed seed (nothing is downloaded; names as diffusers'
down_blocks.0). group_norm (+ SiLU), conv2d, layer_norm, linear (GELU on GEGLU's gate),
scaled_dot_product_attention (self- and cross-attention to a 77-token text context) are
mpskern's; the token/image reshapes, GEGLU's product and residual adds are numpy's.
"""
import numpy as np

from mpskern import models
from mpskern.models import example, unet

args = example.parser(__doc__, "64 channels on 8x8 (fast)").parse_args()
net = models.UNET_BLOCK
s = example.shape(net, args)
rng = np.random.default_rng(0)
P = unet.params(s, rng)
x = unet.inputs(s, rng)                       # latents x, time embedding temb, text context
W = unet.prepare(P)                           # GEGLU's projection cut into value and gate

kit = models.Kit(args.backend)
y, dt = example.timed(lambda: unet.forward(kit, W, x["x"], x["temb"], x["context"], s))
print(f"UNet down block ({s['channels']} ch @{s['size']}x{s['size']}) batch {s['batch']} on "
      f"{args.backend}: {dt * 1e3:.1f} ms, output {y.shape}")

example.check(net, {"params": P, **x, "p": s}, y)
