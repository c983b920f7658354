"""Whole networks on the A/B build (grid_ab2.patch): mpskern with the grid refit (default),
88d37bf's model (MK_GRID_OLD=2) and its parent's (=1), and torch, interleaved per round by
cpu_vs_peers' protocol (benchmarks/networks.py's cases and inputs).

    python net_ab.py BENCHMARKS_DIR --threads 16 --rounds 5 --only gpt2,resnet50-b1,resnet50-b8
"""
import argparse
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("bench_dir")
ap.add_argument("--threads", type=int, default=16)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--target", type=float, default=0.2)
ap.add_argument("--only", default="gpt2,resnet50-b1,resnet50-b8")
ap.add_argument("--gap", type=float, default=0.15)
a = ap.parse_args()
sys.path.insert(0, a.bench_dir)
import networks as NW  # noqa: E402
import numpy as np  # noqa: E402

P, torch, F, mpskern = NW.P, NW.torch, NW.F, NW.mpskern
P.GAP = a.gap
torch.set_num_threads(a.threads)
mpskern.set_num_threads(a.threads)


def arm(v, fn):
    def run():
        os.environ["MK_GRID_OLD"] = v
        return fn()
    return run


for name in a.only.split(","):
    m, fields = NW.CASES[name]
    s = m.shape(**fields)
    inp = m.inputs(s, "float32", np.random.default_rng(0))
    t = NW.torch_inputs(m, inp)
    call = lambda: m.call(inp, "cpu")  # noqa: E731
    tm = P.bench({"torch": lambda: m.torch_call(F, t), "refit": arm("", call),
                  "s6": arm("2", call), "old": arm("1", call)}, a.rounds, a.target)
    os.environ["MK_GRID_OLD"] = ""
    print(f"T{a.threads} {m.label(s)}: " + "  ".join(
        f"{k} {v * 1e3:.2f} ms ({tm['torch'] / v:.3f})" for k, v in tm.items()), flush=True)
