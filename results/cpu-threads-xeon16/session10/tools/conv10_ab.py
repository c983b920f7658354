"""conv10's device A/B (session 10): mpskern auto (this build) against MPSKERN_CPU_CONV=session9
(the same build with session 9's rules: no few-pixels kernel, 32-channel Winograd blocks, the
blocked path's output pass after a whole block's GEMM) and torch, in one process, arms
interleaved per round, 0.1 s idle before each sample, medians.
usage (from outside the checkout): python3 conv10_ab.py --only 16,8 --rounds 7, and the 2-thread
part in its own process: taskset -c 0,1 python3 conv10_ab.py --only 2 --rounds 5. (Pinning the
threads of a process that had run at 16 threads to two cores, as this script first did, left
both libraries' 16-thread pools spinning on them: 2-4x slower, the first run's 2-thread part.)"""
import argparse, os, time
import numpy as np
import torch
import mpskern

RNG = np.random.default_rng(0)


def conv_inputs(N, C, H, K, R, dtype=np.float32):
    x = RNG.standard_normal((N, C, H, H), dtype=np.float32).astype(dtype)
    w = (RNG.standard_normal((K, C, R, R)) / np.sqrt(C * R * R)).astype(dtype)
    b = RNG.standard_normal(K).astype(np.float32).astype(dtype)
    return x, w, b


def mk(x, w, b, st, pad, act, algo):
    def f():
        os.environ["MPSKERN_CPU_CONV"] = algo
        return mpskern.conv2d(x, w, b, st, pad, activation=act, backend="cpu")
    return f


def tc(x, w, b, st, pad):
    tx, tw, tb = (torch.from_numpy(v) for v in (x, w, b))
    return lambda: torch.nn.functional.conv2d(tx, tw, tb, st, pad)


def sample(f):
    f()
    n, t0 = 0, time.perf_counter()
    while True:
        f(); n += 1
        t = time.perf_counter() - t0
        if t > 0.004 or n >= 50:
            return t / n


def bench(arms, rounds):
    ts = {k: [] for k in arms}
    for _ in range(rounds):
        for k, f in arms.items():
            time.sleep(0.1)
            ts[k].append(sample(f))
    return {k: float(np.median(v)) for k, v in ts.items()}


def case(label, N, C, H, K, R, st, pad, rounds, acts=(None,), dtype=np.float32, peer=True):
    x, w, b = conv_inputs(N, C, H, K, R, dtype)
    arms = {}
    if peer and dtype == np.float32:
        arms["torch"] = tc(x, w, b, st, pad)
    for act in acts:
        for algo in ("auto", "session9"):
            arms[f"{algo}/{act}"] = mk(x, w, b, st, pad, act, algo)
    if "torch" in arms:   # the build agrees with torch
        ref = arms["torch"]().numpy()
        got = arms["auto/None"]()
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        assert err < 1e-4, (label, err)
    t = bench(arms, rounds)
    for act in acts:
        a, s = t[f"auto/{act}"], t[f"session9/{act}"]
        line = f"{label:44s} act={str(act):9s} auto {a*1e3:8.3f} ms  session9 {s*1e3:8.3f} ms  s9/auto {s/a:5.2f}"
        if "torch" in t and act is None:
            line += f"  torch {t['torch']*1e3:8.3f} ms  torch/auto {t['torch']/a:5.2f}  torch/s9 {t['torch']/s:5.2f}"
        if act is not None:
            line += (f"  fused/unfused auto {a/t['auto/None']:5.2f}"
                     f"  session9 {s/t['session9/None']:5.2f}")
        print(line, flush=True)


def threads(n):
    mpskern.set_num_threads(n)
    torch.set_num_threads(n)
    print(f"\n== {n} threads (affinity {sorted(os.sched_getaffinity(0))[:4]}...)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="16,8,2")
    args = ap.parse_args()
    r, only = args.rounds, args.only.split(",")
    print(f"torch {torch.__version__}, mpskern {mpskern.__version__}, cores {os.cpu_count()}, medians of {r}")
    ACTS = (None, "relu", "gelu", "gelu_tanh", "silu")
    if "16" in only:
        threads(16)
        case("512->512 3x3 @7 b1", 1, 512, 7, 512, 3, 1, 1, r)
        case("2048->512 1x1 @7 b1", 1, 2048, 7, 512, 1, 1, 0, r)
        case("512->2048 1x1 @7 b1", 1, 512, 7, 2048, 1, 1, 0, r)
    if "8" in only:
        threads(8)
        case("512->512 3x3 @7 b1", 1, 512, 7, 512, 3, 1, 1, r)
        case("256->512 1x1/2 @56 b8", 8, 256, 56, 512, 1, 2, 0, r)
    if "2" in only:
        threads(2)
        case("3->64 7x7/2 @224 b1", 1, 3, 224, 64, 7, 2, 3, r)
        case("512->512 3x3 @7 b1", 1, 512, 7, 512, 3, 1, 1, r)
        case("256->512 3x3/2 @14 b1", 1, 256, 14, 512, 3, 2, 1, r)
        case("2048->512 1x1 @7 b1", 1, 2048, 7, 512, 1, 1, 0, r)
        case("512->2048 1x1 @7 b1", 1, 512, 7, 2048, 1, 1, 0, r)
        case("256->256 3x3 @14 b8", 8, 256, 14, 256, 3, 1, 1, r)
        case("512->512 3x3 @7 b8", 8, 512, 7, 512, 3, 1, 1, r)
        case("act 1x1 128->512 @28 b8", 8, 128, 28, 512, 1, 1, 0, r, ACTS)
        case("act 3x3 64 @224 b1", 1, 64, 224, 64, 3, 1, 1, r, ACTS[:3])
        case("act 3x3 128 @28 b8 f16", 8, 128, 28, 128, 3, 1, 1, r, (None, "relu", "silu"),
             np.float16)


if __name__ == "__main__":
    main()
