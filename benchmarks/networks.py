"""Whole networks (mpskern/models) on mpskern's cpu backend against the same networks in
torch.nn.functional on PyTorch's CPU (eval, no_grad), issue 14's end-to-end targets, with
cpu_vs_peers.py's protocol (interleaved rounds, an idle gap before every sample, medians).

    python benchmarks/networks.py [--threads 2] [--rounds 5] [--gap 0.25]
                                  [--only resnet50-b1,resnet50-b8,gpt2,unet-block]
                                  [--profile] [--small] [--json FILE]

ratio = torch time / mpskern time (target >= 1.0). Each case is checked against torch's
result first. --profile adds a per-layer breakdown of one forward pass of each library
(mpskern: the Kit's per-layer timer, mpskern/models/kit.py; torch: torch.profiler's
self CPU time per op and input shapes), grouped by kind and by layer.
--small runs the reduced variants (a smoke run). Read the ratios, not the times, on a
shared machine.
"""
import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cpu_vs_peers as P  # noqa: E402  (threads, protocol: bench, fmt_t, GAP; torch check)
import numpy as np  # noqa: E402
import mpskern  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from mpskern import models  # noqa: E402
from mpskern.reference import max_error, tolerance  # noqa: E402

CASES = {"resnet50-b1": (models.RESNET50, dict(batch=1)),
         "resnet50-b8": (models.RESNET50, dict(batch=8)),
         "gpt2": (models.GPT2, dict(batch=1, seq=256)),
         "unet-block": (models.UNET_BLOCK, dict(batch=1))}


def torch_inputs(m, inp):
    t = {"params": {k: torch.from_numpy(v) for k, v in inp["params"].items()}, "p": inp["p"]}
    t.update({k: torch.from_numpy(inp[k]) for k in m._names(inp)})
    return t


def kind(label):
    """The layer kind of one of mpskern's profile labels (mpskern/models/kit.py)."""
    if not label.startswith("numpy: "):
        return label.split(" ")[0]                # conv2d, linear, attention, ..._norm, ...
    if label.endswith("(unfused)"):
        return "activation"
    return "residual add" if "residual add" in label else "copies, gathers (glue)"


TORCH_KINDS = {
    "conv2d": ("mkldnn_convolution", "convolution", "_convolution", "_slow_conv2d_forward",
               "thnn_conv2d"),
    "linear": ("addmm", "mm", "bmm", "linear", "matmul"),
    "attention": ("_scaled_dot_product_flash_attention_for_cpu", "scaled_dot_product_attention"),
    "layer_norm": ("native_layer_norm",), "group_norm": ("native_group_norm",),
    "batch_norm": ("native_batch_norm", "_native_batch_norm_legit_no_training", "batch_norm"),
    "max_pool2d": ("max_pool2d_with_indices",), "avg_pool2d": ("adaptive_avg_pool2d", "mean"),
    "activation": ("relu", "relu_", "gelu", "silu", "clamp_min", "clamp_min_"),
    "residual add": ("add", "add_"),
    "copies, gathers (glue)": ("copy_", "clone", "contiguous", "embedding", "index_select",
                               "cat", "empty_like"),
}
TORCH_KIND = {f"aten::{op}": k for k, ops in TORCH_KINDS.items() for op in ops}


def profile(m, inp, t):
    """({label: ms} of mpskern, {label: ms} of torch, {kind: (mpskern ms, torch ms)}),
    one forward pass each (after the warm-up of the timed runs)."""
    mine = {}
    m.run(models.Kit("cpu", mine), inp)
    mine = {k: v[0] * 1e3 for k, v in mine.items()}
    from torch.profiler import ProfilerActivity, profile as tprofile
    with tprofile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        m.torch_call(F, t)
    theirs = {}
    for e in prof.key_averages(group_by_input_shape=True):
        if e.self_cpu_time_total > 0:
            shapes = ",".join("x".join(map(str, s)) for s in e.input_shapes if s)
            label = f"{e.key} {shapes}"
            theirs[label] = theirs.get(label, 0.0) + e.self_cpu_time_total / 1e3
    kinds = {}
    for lab, ms in mine.items():
        k = kind(lab)
        kinds.setdefault(k, [0.0, 0.0])[0] += ms
    for lab, ms in theirs.items():
        op = lab.split(" ")[0]
        k = TORCH_KIND.get(op, "other: " + op.replace("aten::", ""))
        kinds.setdefault(k, [0.0, 0.0])[1] += ms
    return mine, theirs, kinds


def print_profile(name, mine, theirs, kinds, top=12):
    print(f"\nper-layer breakdown, {name} (one forward pass, ms):")
    print(f"  {'kind':44s} {'mpskern':>10s} {'torch':>10s}")
    for k, (a, b) in sorted(kinds.items(), key=lambda kv: -max(kv[1])):
        if max(a, b) >= 0.01 * sum(x for x, _ in kinds.values()):
            print(f"  {k:44s} {a:10.2f} {b:10.2f}")
    print(f"  {'total':44s} {sum(a for a, _ in kinds.values()):10.2f} "
          f"{sum(b for _, b in kinds.values()):10.2f}")
    print(f"  mpskern's {top} slowest layers (summed over equal layers):")
    for lab, ms in sorted(mine.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {ms:9.2f}  {lab}")
    print(f"  torch's {top} slowest ops (self time, by input shapes):")
    for lab, ms in sorted(theirs.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {ms:9.2f}  {lab[:100]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for both libraries (0 = each library's default)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.2, help="seconds per timing sample")
    ap.add_argument("--gap", type=float, default=P.GAP,
                    help="idle seconds before each timing sample (spinning threads park)")
    ap.add_argument("--only", default=",".join(CASES), help="comma list of " + ",".join(CASES))
    ap.add_argument("--profile", action="store_true", help="per-layer breakdown of each case")
    ap.add_argument("--small", action="store_true", help="the reduced variants (smoke run)")
    ap.add_argument("--json", help="also write the results (and profiles) to this file")
    args = ap.parse_args(argv)
    P.GAP = args.gap
    if args.threads:
        torch.set_num_threads(args.threads)
        mpskern.set_num_threads(args.threads)
    print(f"machine: {P.cpu_name()}, {os.cpu_count()} cores; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), mpskern {mpskern.__version__} "
          f"({mpskern.get_num_threads()} threads)")
    print(f"medians of {args.rounds} interleaved rounds, {P.GAP:g} s idle before each sample; "
          "ratio = torch time / mpskern time (target >= 1.0)\n")
    rows, out = [], {"threads": args.threads, "cpu": P.cpu_name(), "cases": {}}
    for name in args.only.split(","):
        m, fields = CASES[name.strip()]
        s = m.shape(**{**(m.small if args.small else {}), **fields})
        inp = m.inputs(s, "float32", np.random.default_rng(0))
        t = torch_inputs(m, inp)
        want = m.torch_call(F, t).numpy()
        got = m.call(inp, "cpu")
        err, tol = max_error(got, want), tolerance("float32", m.reduction(inp))
        if not err <= tol:
            raise SystemExit(f"{name}: mpskern disagrees with torch (max error {err:.3g} > "
                             f"{tol:.3g})")
        tm = P.bench({"torch": lambda: m.torch_call(F, t), "mpskern": lambda: m.call(inp, "cpu")},
                     args.rounds, args.target)
        ratio = tm["torch"] / tm["mpskern"]
        rows.append((m.label(s), tm["torch"], tm["mpskern"], ratio))
        rec = {"shape": s, "torch_s": tm["torch"], "mpskern_s": tm["mpskern"], "ratio": ratio,
               "max_err_vs_torch": err, "gflop": m.module.flops(s) / 1e9}
        if args.profile:
            mine, theirs, kinds = profile(m, inp, t)
            rec["profile"] = {"mpskern_ms": mine, "torch_ms": theirs, "kinds_ms": kinds}
            print_profile(name, mine, theirs, kinds)
        out["cases"][name] = rec
    print(f"\n{'network':44s} {'torch':>12s} {'mpskern':>12s} {'ratio':>7s}  target")
    for name, tt, tk, r in rows:
        print(f"{name:44s} {P.fmt_t(tt)} {P.fmt_t(tk)} {r:7.2f}  "
              f"{'ok' if r >= 1.0 else 'MISS (>= 1.00)'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
