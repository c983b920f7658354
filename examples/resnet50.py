"""ResNet-50 inference from numpy through mpskern's ops (numpy for the glue), checked
against the same network in torch.nn.functional with the same weights.

    python examples/resnet50.py [--batch 1] [--backend cpu] [--small]

Weights are random with a fixed seed (nothing is downloaded); their names and layout are
torchvision's resnet50 state_dict. batch_norm is folded into the convs once (inference),
each conv's ReLU fused into it (activation=), and each block's residual add and ReLU are the
output pass of its last 1x1 conv, run as a GEMM with the skip path as C (resnet.prepare).
"""
import numpy as np

from mpskern import models
from mpskern.models import example, resnet

args = example.parser(__doc__, "a reduced ResNet-14 (fast)").parse_args()
net = models.RESNET50
s = example.shape(net, args)
rng = np.random.default_rng(0)
P = resnet.params(s, rng)                     # torchvision's names: "layer1.0.conv1.weight", ...
x = resnet.inputs(s, rng)["x"]                # (N, 3, 224, 224) images
W = resnet.prepare(P)                         # batch_norm folded into the convs, once

kit = models.Kit(args.backend)
logits, dt = example.timed(lambda: resnet.forward(kit, W, x, s))
print(f"ResNet-{s['depth']} batch {s['batch']} on {args.backend}: {dt * 1e3:.1f} ms, "
      f"logits {logits.shape}, top-5 of image 0: {np.argsort(logits[0])[::-1][:5].tolist()}")

# the same network in torch.nn.functional (eval, F.batch_norm unfolded) in float64
example.check(net, {"params": P, "x": x, "p": s}, logits)
