"""mpskern.scaled_dot_product_attention on the cpu backend against torch's CPU
F.scaled_dot_product_attention (issue 13's targets), with cpu_vs_peers.py's protocol.

    python benchmarks/attention.py [--threads 2] [--rounds 7] [--gap 0.25] [--only attention,models,memory]
                                   [--strict]

Groups:
  attention  (1, 12, 1024, 64) and (8, 8, 512, 64), causal and not: float32 ratio = torch time /
             mpskern time (target >= 1.0); float16: mpskern's float32 time / float16 time
             (target >= 1/1.5, i.e. float16 at most 1.5x the float32 time), torch's float16 beside
  models     shapes of real models: GPT-2 small (12 heads of 64, causal), a Llama-style GQA
             layer (32 query heads, 8 key/value heads of 128, causal), a Stable Diffusion UNet
             attention block (self-attention over 64x64 latents, cross-attention to 77 tokens)
  memory     peak RSS added by one (1, 1, 8192, 64) self-attention, in a fresh process each
             (target < 64 MiB; the 8192^2 float32 score matrix alone is 256 MiB)
Timing: medians of interleaved rounds, an idle gap before every sample (see cpu_vs_peers.py);
every case is checked against torch before it is timed. Read the ratios, not the times, on a
shared machine.
Exit status: 0 when every case ran and agreed with torch, whatever the ratios (a benchmark
reports: a missed target is a MISS row and the last line counts them); non-zero when a case
crashed or disagreed with torch; --strict also exits 1 when a target was missed.
"""
import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cpu_vs_peers as P  # noqa: E402  (the timing protocol; puts a checkout's in-place build first)
import mpskern  # noqa: E402
from mpskern.bench import peak_rss  # noqa: E402
import torch  # noqa: E402  (cpu_vs_peers exits with a hint when torch is missing)
import torch.nn.functional as F  # noqa: E402

RNG = np.random.default_rng(0)


def qkv(q_shape, kv_shape, dtype, ev=None):
    q = RNG.standard_normal(q_shape).astype(dtype)
    k = RNG.standard_normal(kv_shape).astype(dtype)
    v_shape = kv_shape if ev is None else kv_shape[:-1] + (ev,)
    v = RNG.standard_normal(v_shape).astype(dtype)
    return q, k, v


def timed(rows, name, q, k, v, rounds, target, goal, **kw):
    """torch and mpskern on the same inputs: checked, then timed in interleaved rounds."""
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    ref = F.scaled_dot_product_attention(tq, tk, tv, **kw).float().numpy()
    mine = lambda: mpskern.scaled_dot_product_attention(q, k, v, backend="cpu", **kw)  # noqa: E731
    P.check(mine(), ref, name, 2e-3 if q.dtype == np.float16 else 2e-5)
    t = P.bench({"torch": lambda: F.scaled_dot_product_attention(tq, tk, tv, **kw),
                 "mpskern": mine}, rounds, target)
    rows.append((name, "torch", t["torch"], t["mpskern"], goal))
    return t


TARGET_SHAPES = ((1, 12, 1024, 64), (8, 8, 512, 64))   # issue 13's (B, H, L, E)


def run_attention(rows, rounds, target):
    for shape in TARGET_SHAPES:
        for causal in (False, True):
            label = f"{shape} {'causal' if causal else 'full'}"
            q, k, v = qkv(shape, shape, np.float32)
            t32 = timed(rows, f"sdpa {label} float32", q, k, v, rounds, target, 1.0, is_causal=causal)
            h = [x.astype(np.float16) for x in (q, k, v)]
            t16 = timed(rows, f"sdpa {label} float16 (vs torch f16)", *h, rounds, target, None,
                        is_causal=causal)
            rows.append((f"  float16 vs float32: {label}", "mk f32", t32["mpskern"],
                         t16["mpskern"], 1 / 1.5))


MODELS = [
    # name, q shape, k/v shape, Ev, kwargs
    ("GPT-2 small: 12 heads x 64, L=1024, causal", (1, 12, 1024, 64), (1, 12, 1024, 64), None,
     dict(is_causal=True)),
    ("Llama-style GQA: 32 q / 8 kv heads x 128, L=512, causal", (1, 32, 512, 128),
     (1, 8, 512, 128), None, dict(is_causal=True, enable_gqa=True)),
    ("SD UNet self-attn: 8 heads x 40, 64x64 latents", (1, 8, 4096, 40), (1, 8, 4096, 40),
     None, {}),
    ("SD UNet cross-attn: 8 heads x 40, 4096 x 77 tokens", (2, 8, 4096, 40), (2, 8, 77, 40),
     None, {}),
]


def run_models(rows, rounds, target):
    for name, qs, ks, ev, kw in MODELS:
        q, k, v = qkv(qs, ks, np.float32, ev)
        timed(rows, f"{name} f32", q, k, v, rounds, target, None, **kw)


MEMORY_SETUP = """
import numpy as np, sys
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 1, 8192, 64)).astype(np.float32) for _ in range(3))
small = [np.ascontiguousarray(x[:, :, :64]) for x in (q, k, v)]
if WHICH == "mpskern":
    import mpskern
    f = lambda a, b, c: mpskern.scaled_dot_product_attention(a, b, c, backend="cpu")
else:
    import torch, torch.nn.functional as F
    torch.set_num_threads(THREADS)
    f = lambda a, b, c: F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (a, b, c)))
f(*small)                                       # libraries, pools and BLAS loaded first
"""
MEMORY_TARGET_MIB = 64


def run_memory(threads):
    got = {which: peak_rss.added_mib(f"WHICH = {which!r}; THREADS = {threads}\n" + MEMORY_SETUP,
                                     "out = f(q, k, v)", env={"MPSKERN_NUM_THREADS": str(threads)})
           for which in ("torch", "mpskern")}
    ok = "ok" if got["mpskern"] < MEMORY_TARGET_MIB else "MISS"
    print(f"peak RSS added by (1, 1, 8192, 64) self-attention (peak during the call - resident "
          f"before): mpskern {got['mpskern']:.1f} MiB (target < {MEMORY_TARGET_MIB}: {ok}), "
          f"torch {got['torch']:.1f} MiB\n")
    return ok == "MISS"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    P.timing_options(ap)
    ap.add_argument("--only", default="attention,models,memory")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = P.timing_parse(ap, argv)
    torch.set_num_threads(args.threads)
    mpskern.set_num_threads(args.threads)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores; torch {torch.__version__} and "
          f"mpskern {mpskern.__version__} at {args.threads} threads; medians of {args.rounds} "
          f"interleaved rounds, {P.GAP:g} s idle before each sample; ratio = torch time / "
          f"mpskern time (float16 vs float32 rows: mpskern's float32 time / float16 time)\n")
    groups = args.only.split(",")
    miss = int(run_memory(args.threads)) if "memory" in groups else 0
    rows = []
    if "attention" in groups:
        run_attention(rows, args.rounds, args.target)
    if "models" in groups:
        run_models(rows, args.rounds, args.target)
    print(f"{'case':62s} {'peer':>7s} {'peer time':>12s} {'mpskern':>12s} {'ratio':>6s}  target")
    for name, peer, tp, tm, goal in rows:
        ratio = tp / tm
        ok = "" if goal is None else ("ok" if ratio >= goal else f"MISS (>= {goal:.2f})")
        miss += ok.startswith("MISS")
        print(f"{name:62s} {peer:>7s} {P.fmt_t(tp)} {P.fmt_t(tm)} {ratio:6.2f}  {ok}")
    print(f"\n{len(rows)} rows{' + memory' if 'memory' in groups else ''}, {miss} below target")
    return 1 if miss and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
