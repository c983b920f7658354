"""ResNet-50 inference from numpy through mpskern's ops (numpy for the glue), checked
against the same network in torch.nn.functional with the same weights.

    python examples/resnet50.py [--batch 1] [--backend cpu] [--small]

Weights are random with a fixed seed (nothing is downloaded); their names and layout are
torchvision's resnet50 state_dict. batch_norm is folded into the convs once (inference),
each conv's ReLU fused into it (activation=), and each block's residual add and ReLU are the
output pass of its last 1x1 conv, run as a GEMM with the skip path as C (resnet.prepare).
"""
import argparse
import time

import numpy as np

from mpskern import models
from mpskern.models import resnet
from mpskern.reference import max_error, tolerance

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--backend", default="cpu", help="cpu, sim, metal, mps")
ap.add_argument("--small", action="store_true", help="a reduced ResNet-14 (fast)")
args = ap.parse_args()

net = models.RESNET50
s = net.shape(batch=args.batch, **(net.small if args.small else {}))
rng = np.random.default_rng(0)
P = resnet.params(s, rng)                     # torchvision's names: "layer1.0.conv1.weight", ...
x = resnet.inputs(s, rng)["x"]                # (N, 3, 224, 224) images
W = resnet.prepare(P)                         # batch_norm folded into the convs, once

kit = models.Kit(args.backend)
resnet.forward(kit, W, x, s)                  # warm-up (thread pool, pipelines)
t0 = time.perf_counter()
logits = resnet.forward(kit, W, x, s)
dt = time.perf_counter() - t0
print(f"ResNet-{s['depth']} batch {s['batch']} on {args.backend}: {dt * 1e3:.1f} ms, "
      f"logits {logits.shape}, top-5 of image 0: {np.argsort(logits[0])[::-1][:5].tolist()}")

# the same network in torch.nn.functional (eval, F.batch_norm unfolded) in float64
want = net.reference({"params": P, "x": x, "p": s})
err, tol = max_error(logits, want), tolerance("float32", resnet.reduction(s))
print(f"max error vs the float64 reference (torch.nn.functional where torch is installed): {err:.2e} (tolerance {tol:.1e})")
if not err <= tol:
    raise SystemExit("MISMATCH: mpskern's result differs from the reference")
