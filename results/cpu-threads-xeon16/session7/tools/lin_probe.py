"""GPT-2's linears as the network calls them at 16 threads: 12 layers' weights cycled (cold,
as in a forward pass: 12 x 9.4 MB > L3) or one weight 12 times (hot), mpskern vs torch,
and the residual form (mpskern: rank-1 bias GEMM + GEMM into z, as models/kit.linear_add;
torch: h + F.linear). Interleaved rounds, 0.1 s idle before each sample, 3 rounds; ms per call."""
import random
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import mpskern as mk
from ab_timing import sample

T = int(sys.argv[1]) if len(sys.argv) > 1 else 16
mk.set_num_threads(T)
torch.set_num_threads(T)
rng = np.random.default_rng(0)
L = 12


for M, K, N, form in ((256, 768, 3072, "gelu"), (256, 3072, 768, "add"), (256, 768, 768, "add")):
    x = rng.standard_normal((M, K), dtype=np.float32)
    ws = [rng.standard_normal((N, K), dtype=np.float32) * 0.02 for _ in range(L)]
    bs = [rng.standard_normal(N, dtype=np.float32) for _ in range(L)]
    z = rng.standard_normal((M, N), dtype=np.float32)
    tx, tws, tbs, tz = torch.from_numpy(x), [torch.from_numpy(w) for w in ws], [torch.from_numpy(b) for b in bs], torch.from_numpy(z)
    ones = np.ones((M, 1), np.float32)

    def mk_call(i):
        if form == "add":
            mk.gemm(ones, bs[i].reshape(1, -1), z, out=z)
            mk.gemm(x, ws[i], z, trans_b=True, out=z)
        else:
            mk.linear(x, ws[i], bs[i], activation="gelu_tanh" if form == "gelu" else None)

    def t_call(i):
        with torch.no_grad():
            if form == "add":
                return tz + F.linear(tx, tws[i], tbs[i])
            y = F.linear(tx, tws[i], tbs[i])
            return F.gelu(y, approximate="tanh") if form == "gelu" else y

    arms = {"mk cold": lambda: [mk_call(i) for i in range(L)],
            "mk hot": lambda: [mk_call(0) for i in range(L)],
            "torch cold": lambda: [t_call(i) for i in range(L)],
            "torch hot": lambda: [t_call(0) for i in range(L)]}
    if form == "add":
        arms["mk bias rank-1 only"] = lambda: [mk.gemm(ones, bs[i].reshape(1, -1), z, out=z) for i in range(L)]
        arms["mk gemm += only"] = lambda: [mk.gemm(x, ws[i], z, trans_b=True, out=z) for i in range(L)]
    ts = {k: [] for k in arms}
    for r in range(3):
        order = list(arms)
        random.Random(r).shuffle(order)
        for k in order:
            time.sleep(0.1)
            ts[k].append(sample(arms[k]) / L)
    print(f"T{T} linear {M}x{K}->{N} {form}: " + "  ".join(
        f"{k} {statistics.median(v) * 1e3:.3f}" for k, v in ts.items()), flush=True)
