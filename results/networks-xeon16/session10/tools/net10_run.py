"""net10's device run (session 10, issue 14), one process per thread count:

    python net10_run.py --threads 16 --before-root ROOT [--do profile,ab,networks] [--rounds 5]

profile:  GPT-2 small (seq 256) per layer kind, mpskern (mpskern/models' Kit timer) against
          torch (the same forward in torch.nn.functional, each op timed the same way), passes
          interleaved with an idle gap, medians per label over the passes; then the layers'
          ops alone (linears with and without bias, layer_norm, attention) at GPT-2's shapes.
ab:       the cpu attention query-block rule (MPSKERN_CPU_ATTENTION_ROWS=auto vs 128, 64)
          on GPT-2's attention alone and on the whole network, interleaved.
networks: torch / mpskern before (ROOT's mpskern/models, loaded beside this tree's under
          another name, same native build) / after (the installed mpskern.models), one
          process, interleaved rounds (benchmarks/cpu_vs_peers.py's bench), each checked
          against torch first.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import mpskern
from mpskern import models
from mpskern.reference import max_error, tolerance

ROWS_ENV = "MPSKERN_CPU_ATTENTION_ROWS"
GAP = 0.25


def load_before(root):
    """ROOT/mpskern/models as the package mk_before_models (its own names rewritten), so the
    networks as they were can run beside this tree's in one process."""
    src = Path(root) / "mpskern" / "models"
    dst = Path(tempfile.mkdtemp()) / "mk_before_models"
    dst.mkdir()
    for f in src.glob("*.py"):
        (dst / f.name).write_text(f.read_text().replace("mpskern.models", "mk_before_models"))
    sys.path.insert(0, str(dst.parent))
    import mk_before_models
    return mk_before_models


def med(xs):
    return statistics.median(xs)


# -- profile -------------------------------------------------------------------------------
def torch_gpt2_timed(P, ids, s, rec):
    """gpt2.torch_forward, every op timed under a label like the Kit's."""
    def tm(label, f, *a):
        t0 = time.perf_counter()
        y = f(*a)
        rec[label] = rec.get(label, 0.0) + (time.perf_counter() - t0) * 1e3
        return y

    H, T, C = s["heads"], ids.shape[1], s["width"]
    B, eps = ids.shape[0], 1e-5
    with torch.no_grad():
        h = tm("embedding", lambda: F.embedding(ids, P["wte.weight"]) + P["wpe.weight"][:T])
        M = B * T
        for i in range(s["layers"]):
            p = f"h.{i}."
            a = tm(f"layer_norm {M} x {C}", F.layer_norm, h, (C,), P[p + "ln_1.weight"],
                   P[p + "ln_1.bias"], eps)
            qkv = tm(f"linear {M} x {C}->{3 * C}", F.linear, a, P[p + "attn.c_attn.weight"],
                     P[p + "attn.c_attn.bias"])
            q, k, v = tm("glue: split heads (views)", lambda: [
                t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, 2)])
            o = tm(f"attention {B}x{H} heads {T}x{T} d{C // H} causal",
                   F.scaled_dot_product_attention, q, k, v, None, 0.0, True)
            o = tm("glue: merge heads (copy)", lambda: o.transpose(1, 2).reshape(B, T, C))
            y = tm(f"linear {M} x {C}->{C} (+= residual)", F.linear, o,
                   P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
            h = tm("residual add", lambda: h + y)
            a = tm(f"layer_norm {M} x {C}", F.layer_norm, h, (C,), P[p + "ln_2.weight"],
                   P[p + "ln_2.bias"], eps)
            m = tm(f"linear {M} x {C}->{4 * C} +gelu_tanh", F.linear, a,
                   P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"])
            m = tm("gelu_tanh (unfused)", lambda: F.gelu(m, approximate="tanh"))
            y = tm(f"linear {M} x {4 * C}->{C} (+= residual)", F.linear, m,
                   P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
            h = tm("residual add", lambda: h + y)
        h = tm(f"layer_norm {M} x {C}", F.layer_norm, h, (C,), P["ln_f.weight"],
               P["ln_f.bias"], eps)
        return tm(f"linear {M} x {C}->{s['vocab']}", F.linear, h, P["wte.weight"])


def kind(label):
    """GPT-2's layer kinds: the linears by shape (so the LM head is its own), the rest by op."""
    if label.startswith("linear"):
        return label
    if label.startswith("numpy: "):
        label = label[len("numpy: "):]
    return label.split(" ")[0] if not label.startswith("glue") else label


def profile_gpt2(passes):
    m = models.GPT2
    s = m.shape(batch=1, seq=256)
    inp = m.inputs(s, "float32", np.random.default_rng(0))
    P = {k: torch.from_numpy(v) for k, v in inp["params"].items()}
    ids = torch.from_numpy(inp["ids"])
    got, want = m.call(inp, "cpu"), m.torch_call(F, {"params": P, "ids": ids, "p": s})
    err = max_error(got, want.numpy())
    print(f"gpt2 check vs torch: max error {err:.3g} (tol {tolerance('float32', m.reduction(inp)):.3g})")
    for _ in range(2):                       # warm both
        m.call(inp, "cpu")
        torch_gpt2_timed(P, ids, s, {})
    mine, theirs, tot = {}, {}, {"mpskern": [], "torch": []}
    for _ in range(passes):
        time.sleep(GAP)
        d = {}
        t0 = time.perf_counter()
        m.run(models.Kit("cpu", d), inp)
        tot["mpskern"].append((time.perf_counter() - t0) * 1e3)
        per = {}
        for lab, (sec, _n) in d.items():
            per[kind(lab)] = per.get(kind(lab), 0.0) + sec * 1e3
        per["untimed (python, between ops)"] = tot["mpskern"][-1] - sum(per.values())
        for k, v in per.items():
            mine.setdefault(k, []).append(v)
        time.sleep(GAP)
        r = {}
        t0 = time.perf_counter()
        torch_gpt2_timed(P, ids, s, r)
        tot["torch"].append((time.perf_counter() - t0) * 1e3)
        per = {}
        for lab, ms in r.items():
            per[kind(lab)] = per.get(kind(lab), 0.0) + ms
        per["untimed (python, between ops)"] = tot["torch"][-1] - sum(per.values())
        for k, v in per.items():
            theirs.setdefault(k, []).append(v)
    print(f"\nGPT-2 small 1x256, per layer kind, ms per forward pass: medians of {passes} "
          f"passes each, interleaved, {GAP} s idle before each")
    print(f"  {'kind (summed over the 12 layers)':48s} {'mpskern':>9s} {'torch':>9s} {'mk-torch':>9s}")
    keys = sorted(set(mine) | set(theirs), key=lambda k: -max(med(mine.get(k, [0])),
                                                                med(theirs.get(k, [0]))))
    for k in keys:
        a, b = med(mine.get(k, [0.0])), med(theirs.get(k, [0.0]))
        print(f"  {k:48s} {a:9.2f} {b:9.2f} {a - b:+9.2f}")
    a, b = med(tot["mpskern"]), med(tot["torch"])
    print(f"  {'whole pass (timed)':48s} {a:9.2f} {b:9.2f} {a - b:+9.2f}   ratio {b / a:.3f}")
    print(f"  passes mpskern min/max {min(tot['mpskern']):.2f}/{max(tot['mpskern']):.2f}, "
          f"torch {min(tot['torch']):.2f}/{max(tot['torch']):.2f}")


def time_ops(impls, reps, inner=None):
    """{name: median ms per call}: rounds of `reps`, each impl called enough times per sample
    for ~20 ms (or `inner` times), interleaved with a short idle gap."""
    loops = {}
    for k, f in impls.items():
        f()
        t0 = time.perf_counter()
        f()
        loops[k] = inner or max(1, int(0.02 / max(time.perf_counter() - t0, 1e-6)))
    out = {k: [] for k in impls}
    for _ in range(reps):
        for k, f in impls.items():
            time.sleep(0.03)
            t0 = time.perf_counter()
            for _ in range(loops[k]):
                f()
            out[k].append((time.perf_counter() - t0) * 1e3 / loops[k])
    return {k: med(v) for k, v in out.items()}


def ops_gpt2(reps):
    rng = np.random.default_rng(1)
    T, C = 256, 768
    print(f"\nGPT-2's ops alone (medians of {reps}, ms per call; mk = mpskern out= as the network, "
          "t = torch)")
    for N, K, b, act in ((3 * C, C, True, None), (C, C, True, None), (4 * C, C, True, "gelu_tanh"),
                         (C, 4 * C, True, None), (50257, C, False, None)):
        x = rng.standard_normal((1, T, K), np.float32)
        w = (rng.standard_normal((N, K)) * 0.02).astype(np.float32)
        bb = rng.standard_normal(N).astype(np.float32) * 0.02
        y = np.empty((1, T, N), np.float32)
        z = rng.standard_normal((1, T, N), np.float32)
        tx, tw, tb, tz = map(torch.from_numpy, (x, w, bb, z))
        impls = {
            "mk linear+bias": lambda: mpskern.linear(x, w, bb if b else None, activation=act, out=y),
            "mk gemm only": lambda: mpskern.linear(x, w, None, out=y),
            "t linear+bias": lambda: F.linear(tx, tw, tb if b else None),
            "t mm only": lambda: torch.matmul(tx, tw.t()),
        }
        if act:
            impls["t linear+bias+gelu"] = lambda: F.gelu(F.linear(tx, tw, tb), approximate="tanh")
        if N == C:     # the residual linears: mpskern's linear_add vs torch's z + linear
            kit = models.Kit("cpu")
            impls["mk linear_add"] = lambda: kit.linear_add(z, x, w, bb)
            impls["t z + linear"] = lambda: tz + F.linear(tx, tw, tb)
        with torch.no_grad():
            r = time_ops(impls, reps)
        print(f"  linear {T} x {K}->{N}{' +' + act if act else ''}: " +
              ", ".join(f"{k} {v:.3f}" for k, v in r.items()))
    x = rng.standard_normal((1, T, C), np.float32)
    g, bb = rng.standard_normal(C, np.float32), rng.standard_normal(C, np.float32)
    y = np.empty_like(x)
    tx, tg, tb = map(torch.from_numpy, (x, g, bb))
    with torch.no_grad():
        r = time_ops({"mk": lambda: mpskern.layer_norm(x, (C,), g, bb, 1e-5, out=y),
                      "t": lambda: F.layer_norm(tx, (C,), tg, tb, 1e-5)}, reps)
    print(f"  layer_norm {T} x {C}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()))


# -- query-block A/B -------------------------------------------------------------------------
def with_rows(rows, f):
    def g():
        os.environ[ROWS_ENV] = rows
        try:
            return f()
        finally:
            os.environ.pop(ROWS_ENV, None)
    return g


def ab_rows(rounds, reps):
    rng = np.random.default_rng(2)
    B, T, H, D = 1, 256, 12, 64
    qkv = rng.standard_normal((B, T, 3 * H * D), np.float32)
    q, k, v = models.kit.head_views(qkv, 3, H)
    o, heads = models.kit.merged(B, T, H, D, np.float32)
    att = lambda: mpskern.scaled_dot_product_attention(q, k, v, is_causal=True, out=heads)  # noqa
    want = with_rows("auto", att)().copy()
    for r in ("128", "64", "32"):
        got = with_rows(r, att)()
        assert np.array_equal(got, want) or max_error(got, want) < 1e-5, r
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(t)) for t in (q, k, v))
    with torch.no_grad():
        res = time_ops({"rows auto": with_rows("auto", att), "rows 128": with_rows("128", att),
                        "rows 64": with_rows("64", att), "rows 32": with_rows("32", att),
                        "torch sdpa": lambda: F.scaled_dot_product_attention(tq, tk, tv,
                                                                            is_causal=True)},
                       reps)
    print(f"\nattention 1x12 heads 256x256 d64 causal, GPT-2's strided views, alone (medians of "
          f"{reps}, ms): " + ", ".join(f"{k} {v:.3f}" for k, v in res.items()))
    m = models.GPT2
    s = m.shape(batch=1, seq=256)
    inp = m.inputs(s, "float32", np.random.default_rng(0))
    net = lambda: m.call(inp, "cpu")  # noqa: E731
    tm = bench({"gpt2 rows auto": with_rows("auto", net), "gpt2 rows 128": with_rows("128", net),
                "gpt2 rows 64": with_rows("64", net)}, rounds)
    print(f"GPT-2 whole network (medians of {rounds} interleaved rounds): " +
          ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in tm.items()) +
          f"; auto/128 time {tm['gpt2 rows auto'] / tm['gpt2 rows 128']:.3f}")


# -- networks before / after ----------------------------------------------------------------
def bench(impls, rounds, target=0.2):
    """cpu_vs_peers.bench's protocol: calls per sample calibrated to `target` s, interleaved
    rounds, GAP idle before every sample; {name: median s per call}."""
    loops = {}
    for k, f in impls.items():
        f()
        t0 = time.perf_counter()
        f()
        dt = time.perf_counter() - t0
        loops[k] = max(1, int(target / max(dt, 1e-6)))
    samples = {k: [] for k in impls}
    for _ in range(rounds):
        for k, f in impls.items():
            time.sleep(GAP)
            t0 = time.perf_counter()
            for _ in range(loops[k]):
                f()
            samples[k].append((time.perf_counter() - t0) / loops[k])
    return {k: med(v) for k, v in samples.items()}


CASES = {"resnet50-b1": ("RESNET50", dict(batch=1)), "resnet50-b8": ("RESNET50", dict(batch=8)),
         "gpt2": ("GPT2", dict(batch=1, seq=256)), "unet-block": ("UNET_BLOCK", dict(batch=1))}


def numpy_fill(f):
    """f with linear's bias fill on one numpy thread instead of the pool's rank-1 GEMM."""
    from mpskern import _args

    def g():
        keep = _args._FILL_ON_POOL
        _args._FILL_ON_POOL = 1 << 62
        try:
            return f()
        finally:
            _args._FILL_ON_POOL = keep
    return g


def networks(before, only, rounds, target, threads):
    print(f"\nnetworks: torch / mpskern arms (before: main's models; after: this tree's), "
          f"medians of {rounds} interleaved rounds, {GAP} s idle before each sample; "
          "ratio = torch / arm")
    for name in only:
        attr, fields = CASES[name]
        arms, ref = {}, None
        for tag, pkg in (("before", before), ("after", models)):
            if pkg is None or (tag == "before" and name == "gpt2"):   # (same code: see below)
                continue
            m = getattr(pkg, attr)
            s = m.shape(**fields)
            inp = m.inputs(s, "float32", np.random.default_rng(0))
            if ref is None:
                t = {"params": {k: torch.from_numpy(v) for k, v in inp["params"].items()},
                     "p": inp["p"], **{k: torch.from_numpy(inp[k]) for k in m._names(inp)}}
                ref = (m, t, m.torch_call(F, t).numpy())
            got = m.call(inp, "cpu")
            err, tol = max_error(got, ref[2]), tolerance("float32", m.reduction(inp))
            if not err <= tol:
                raise SystemExit(f"{name} {tag}: disagrees with torch ({err:.3g} > {tol:.3g})")
            arms[tag] = lambda m=m, inp=inp: m.call(inp, "cpu")
        if name == "gpt2":     # main's GPT-2 is this tree's: candidate switches instead
            f = arms["after"]
            if threads > 8:
                arms["after rows128"] = with_rows("128", f)
            arms["after numpy bias fill"] = numpy_fill(f)
        tm0, t0 = ref[0], ref[1]
        tm = bench({"torch": lambda: tm0.torch_call(F, t0), **arms}, rounds, target)
        print(f"{name:12s} torch {tm['torch'] * 1e3:8.2f} ms | " + " | ".join(
            f"{k} {v * 1e3:8.2f} ms {tm['torch'] / v:6.3f}" for k, v in tm.items() if k != "torch"),
            flush=True)


def main():
    global GAP
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--before-root", help="a tree whose mpskern/models is 'before'")
    ap.add_argument("--do", default="profile,ab,networks")
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=9)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--target", type=float, default=0.2)
    ap.add_argument("--gap", type=float, default=GAP)
    ap.add_argument("--small", action="store_true", help="smoke: tiny counts")
    a = ap.parse_args()
    GAP = a.gap
    torch.set_num_threads(a.threads)
    mpskern.set_num_threads(a.threads)
    print(f"torch {torch.__version__} ({torch.get_num_threads()} thr), mpskern "
          f"({mpskern.get_num_threads()} thr), cores {os.cpu_count()}, affinity "
          f"{len(os.sched_getaffinity(0))}; {time.strftime('%H:%M:%S')}", flush=True)
    do = a.do.split(",")
    t0 = time.time()
    if "profile" in do:
        profile_gpt2(a.passes)
        ops_gpt2(a.reps)
        print(f"[profile {time.time() - t0:.0f} s]", flush=True)
    if "ab" in do:
        ab_rows(a.rounds, a.reps)
        print(f"[ab {time.time() - t0:.0f} s]", flush=True)
    if "networks" in do:
        before = load_before(a.before_root) if a.before_root else None
        networks(before, a.only.split(","), a.rounds, a.target, a.threads)
        print(f"[networks {time.time() - t0:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
