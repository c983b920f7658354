"""Whole networks (mpskern/models): each reduced variant through mpskern's ops on cpu and
sim against the same network in float64: in torch.nn.functional with the same weights
where torch is installed, and always on mpskern/reference.py's ops (CI has no torch); the
two float64 references agree; the FLOP counts are torch's; the unfused activations are
torch's; `mpskern bench --model` and the examples run."""
import json
import math
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

from mpskern import backends, models
from mpskern.bench import schema
from mpskern.models.kit import unfused
from mpskern.reference import max_error, tolerance

try:
    import torch
    F = torch.nn.functional
except ImportError:                 # CI: the torch twins are checked where torch is installed
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (pip install "
                                 "'.[peers]')")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NETS = list(models.MODELS.values())


def small(m, seed=0, dtype="float32", **fields):
    s = m.shape(**{**m.small, **fields})
    return m.inputs(s, dtype, np.random.default_rng(seed))


def tensors(m, inp, dtype=None):
    dtype = dtype or torch.float64
    t = {"params": {k: torch.from_numpy(v).to(dtype) for k, v in inp["params"].items()},
         "p": inp["p"]}
    for k in m._names(inp):
        v = torch.from_numpy(inp[k])
        t[k] = v.to(dtype) if v.is_floating_point() else v
    return t


@pytest.mark.parametrize("twin", ["torch", "reference"])
@pytest.mark.parametrize("backend", ["cpu", "sim"])
@pytest.mark.parametrize("m", NETS, ids=lambda m: m.name)
def test_network_matches_float64_twin(m, backend, twin):
    ok, why = backends.availability(backend)
    if not ok:
        pytest.skip(why)
    if twin == "torch" and torch is None:
        pytest.skip("torch is not installed")
    inp = small(m, batch=2)
    if twin == "torch":
        want = m.torch_call(F, tensors(m, inp)).numpy()        # torch.nn.functional, float64
    else:
        want = m.reference(inp, torch=False)                   # forward() on reference.py
    got = m.call(inp, backend)
    assert got.dtype == np.float32 and got.shape == want.shape
    tol = tolerance("float32", m.reduction(inp))
    err = max_error(got, want)
    assert err <= tol, f"{m.name} on {backend}: max error {err:.3g} > {tol:.3g}"
    # not trivially close: the output varies, and another seed's weights give another one
    assert np.std(want) > 1e-3 * np.max(np.abs(want))
    assert max_error(m.call(small(m, seed=1, batch=2), "cpu"), want) > 100 * tol


@needs_torch
@pytest.mark.parametrize("m", NETS, ids=lambda m: m.name)
def test_float64_references_agree(m):
    """The bench's reference: torch's float64 twin, or (no torch) the same forward() on
    mpskern/reference.py's ops; both are the same network."""
    inp = small(m)
    a, b = m.reference(inp, torch=True), m.reference(inp, torch=False)
    assert max_error(b, a) < 1e-12


@needs_torch
def test_resnet_fold_is_batch_norm():
    """fold() is exact in float64: the folded network equals the unfolded one for every
    depth-14 conv + BN pair (checked end to end above, here with strong BN statistics)."""
    m = models.RESNET50
    inp = small(m)
    P = inp["params"]
    for k in P:
        if k.endswith("running_var"):
            P[k] = P[k] * 5
    assert max_error(m.reference(inp, torch=False), m.reference(inp, torch=True)) < 1e-12


@pytest.mark.parametrize("batch", [1, 2])
def test_resnet_conv3_bias_in_its_gemm(batch):
    """Depth 26 (blocks without a downsample): at batch 1 conv3's bias is a column of its
    GEMM ([w3 | b3] @ [y; 1], conv2 writing above a row of ones: no rank-1 bias pass), at
    batch 2 the rank-1 pass into the skip. Each agrees with torch's float64 network where
    torch is installed, and batch 1 with the first image of a batch of 2 (the other path:
    the reference Kit runs the same forward())."""
    m = models.RESNET50
    inp = small(m, batch=batch, depth=26)
    want = m.reference(inp)
    prof = {}
    got = m.run(models.Kit("cpu", prof), inp)
    tol = tolerance("float32", m.reduction(inp))
    assert max_error(got, want) <= tol
    assert np.std(want) > 1e-3 * np.max(np.abs(want))
    if batch == 1:
        two = dict(inp, x=np.concatenate([inp["x"], -inp["x"]]), p={**inp["p"], "batch": 2})
        assert max_error(m.call(two, "cpu")[:1], got) <= tol
    passes = [k for k in prof if k.startswith("bias ")]
    mids = [inp["p"]["width"] << i for i in range(4)]
    folded = [k for k in prof if any(f" x {mid + 1}->" in k for mid in mids)]   # K = mid + 1
    assert (not passes and len(folded) == 4) if batch == 1 else (len(passes) == 4 and not folded)


class CountingF:  # (used with torch only)
    """torch.nn.functional whose scaled_dot_product_attention adds its two products'
    FLOPs (torch's FlopCounterMode does not count the CPU attention)."""

    def __init__(self):
        self.attention = 0

    def __getattr__(self, name):
        return getattr(F, name)

    def scaled_dot_product_attention(self, q, k, v, **kw):
        self.attention += 2 * q.shape[:-1].numel() * k.shape[-2] * (q.shape[-1] + v.shape[-1])
        return F.scaled_dot_product_attention(q, k, v, **kw)


@needs_torch
@pytest.mark.parametrize("m", NETS, ids=lambda m: m.name)
def test_flops_are_torch_flop_counters(m):
    from torch.utils.flop_counter import FlopCounterMode
    inp = small(m, batch=3)
    cf = CountingF()
    with FlopCounterMode(display=False) as fc:
        m.torch_call(cf, tensors(m, inp, torch.float32))
    assert m.module.flops(inp["p"]) == fc.get_total_flops() + cf.attention


def _exact(y, act):
    """Forms of the activations that do not cancel in float64 (reference.activation's
    1 + tanh / 1 + erf lose the tail for negative y)."""
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    if act == "relu":
        return np.where(y < 0, 0.0, y)
    if act == "silu":
        return y / (1 + np.exp(-y))
    if act == "gelu_tanh":
        return y / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
    return np.where(np.isneginf(y), np.nan, 0.5 * y * erfc(-y / math.sqrt(2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act", ["relu", "silu", "gelu_tanh", "gelu"])
def test_unfused_activations_are_torchs(act, dtype):
    y = np.concatenate([np.linspace(-12, 12, 20001), [0, -0.0, 1e-30, -1e-30, 3e38, -3e38,
                                                       np.inf, -np.inf, np.nan, 88, -88]])
    with np.errstate(over="ignore"):
        x = y.astype(dtype)
    with np.errstate(all="ignore"):
        want = _exact(x.astype(np.float64), act).astype(dtype).astype(np.float64)
        got = unfused(x.copy(), act)
    assert got.dtype == dtype
    got = got.astype(np.float64)
    fin = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), fin)
    assert np.array_equal(got[~fin], want[~fin], equal_nan=True)
    eps = np.finfo(dtype).eps
    big = fin & (np.abs(want) > (1e-30 if dtype == np.float32 else 1e-3))
    rel = np.abs(got[big] - want[big]) / np.abs(want[big])
    # a few ulp times exp's condition number |argument| (the float32 argument's own rounding
    # grows by it; the erfc fit's own relative error is below 1.2e-7)
    xs = x[big].astype(np.float64)
    arg = {"relu": 0 * xs, "silu": xs, "gelu": xs * xs / 2,
           "gelu_tanh": 2 * math.sqrt(2 / math.pi) * (xs + 0.044715 * xs ** 3)}[act]
    bound = 4 * eps * (1 + np.abs(arg))
    assert np.all(rel <= bound), f"{act}: worst relative error {rel.max():.3g}"
    with pytest.raises(ValueError, match="activation must be one of"):
        unfused(x.copy(), "tanh")


def test_profile_names_the_layers():
    m = models.GPT2
    inp = small(m)
    prof = {}
    m.run(models.Kit("cpu", prof), inp)
    s = inp["p"]
    assert prof[f"layer_norm {s['seq']} x {s['width']}"][1] == 2 * s["layers"] + 1
    assert prof[f"attention 1x{s['heads']} heads {s['seq']}x{s['seq']} d16 causal"][1] == 2
    assert all(sec >= 0 for sec, _ in prof.values())


@pytest.mark.parametrize("fields,msg", [
    (dict(depth=13), "use one of [14, 26, 50, 101, 152]"),
])
def test_bad_network_shapes(fields, msg):
    with pytest.raises(ValueError, match=msg.replace("[", r"\[")):
        models.RESNET50.shape(**fields)
    with pytest.raises(ValueError, match="GPT-2 has 1024 positions"):
        models.GPT2.shape(seq=1025)
    with pytest.raises(ValueError, match="must divide width"):
        models.GPT2.shape(heads=5)
    with pytest.raises(ValueError, match="multiple of 32"):
        models.UNET_BLOCK.shape(channels=48)


# -- mpskern bench --model ---------------------------------------------------------------------
def bench(*args):
    from typer.testing import CliRunner

    from mpskern.cli.main import app
    r = CliRunner().invoke(app, ["bench", *args])
    r.returncode = r.exit_code
    return r


def test_cli_bench_model_rows_like_an_op(tmp_path):
    out = tmp_path / "r.jsonl"
    peers = ["torch-cpu"] if torch else []
    r = bench("--model", "gpt2", "--preset", "small", "--batch", "2", "-b", "cpu",
              *[a for p in peers for a in ("-b", p)], "--budget", "0.02", "--out", str(out),
              "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["op"], x["backend"], x["status"]) for x in rows] == [
        ("gpt2", b, "ok") for b in ["cpu"] + peers]
    for x in rows:
        assert x["shape"]["batch"] == 2 and x["shape"]["layers"] == 2
        assert x["shape_label"].startswith("gpt2 b2") and x["gflops"] > 0
        assert x["max_err"] <= x["tolerance"] and x["n_samples"] >= 3
    assert rows[-1]["speedup_vs_cpu"] > 0
    assert schema.read_jsonl([out]) == schema.clean(rows)
    r = bench("--model", "resnet50", "--shape", "image=32,depth=14,width=8,classes=5",
              "--batch", "3", "-b", "cpu", "--budget", "0.02", "--no-save", "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["shape_label"] == "resnet50 b3 (image=32,depth=14,width=8,classes=5)"
    assert row["shape_key"] == "batch=3,image=32,depth=14,width=8,classes=5"


@pytest.mark.parametrize("args,msg", [
    ([], "give an op"),
    (["softmax", "--model", "gpt2"], "not both"),
    (["softmax", "--batch", "2"], "--batch is --model's option"),
    (["--model", "resnet50", "--shape", "depth=13"], "use one of"),
    (["--model", "resnet50", "--batch", "0"], "batch=0 must be > 0"),
    (["--model", "vgg"], "vgg"),
])
def test_cli_bench_model_errors(args, msg):
    r = bench(*args, "--no-save")
    assert r.returncode == 2 and msg in " ".join(r.stderr.split()), r.stderr


@pytest.mark.parametrize("script", ["resnet50.py", "gpt2.py", "unet_block.py"])
def test_examples_run(script, monkeypatch, capsys):
    """Each example as `python examples/X.py --small --batch 2` (in this process: the
    interpreter and torch are loaded already)."""
    monkeypatch.setattr(sys, "argv", [script, "--small", "--batch", "2"])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")   # SystemExit on a mismatch
    out = capsys.readouterr().out
    assert "max error vs the float64 reference" in out and "batch 2" in out


@pytest.mark.parametrize("shape", [(5, 7), (1, 1, 3, 1000), (2, 3, 1), (0, 50), (64,), (1, 1, 1, 1)])
def test_split_glue_is_numpys(shape, monkeypatch):
    """The glue's thread split (kit.split): every piece written once, broadcasting kept,
    float16 activations included, on pieces as small as 16 elements and 3 threads."""
    import mpskern
    from mpskern.models import kit
    monkeypatch.setattr(kit, "SPLIT_MIN", 4)
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(3)
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape[-1:] if shape else ()).astype(np.float32)
        k = models.Kit("cpu")
        assert np.array_equal(k.add(x.copy(), y), x + y)
        assert np.array_equal(k.add(x.copy(), y, act="relu"), np.maximum(x + y, 0))
        assert np.array_equal(k.mul(x.copy(), y), x * y)
        for act in ("relu", "silu"):
            h = x.astype(np.float16)
            assert np.array_equal(k.act(h.copy(), act), unfused(h.copy(), act))
        t = x.T if x.ndim == 2 else x[..., ::-1]
        got = kit.contiguous(t)
        assert got.flags.c_contiguous and np.array_equal(got, t)
    finally:
        mpskern.set_num_threads(old)


@pytest.mark.parametrize("shape", [(1, 256, 56, 56), (3, 5, 7, 1), (2, 1024, 7, 7), (1, 3, 0, 4)])
@pytest.mark.parametrize("threads", [1, 3, 16])
def test_kit_add_bias(shape, threads):
    """Kit.add_bias (a per-channel bias added in place as a rank-1 GEMM): exactly x + b,
    every element once, on the array passed in."""
    import mpskern
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(threads)
    try:
        rng = np.random.default_rng(1)
        x = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape[1]).astype(np.float32)
        want = x + b[:, None, None]
        got = models.Kit("cpu").add_bias(x, b)
        assert got is x and np.array_equal(got, want)
    finally:
        mpskern.set_num_threads(old)


def test_networks_with_split_glue(monkeypatch):
    import mpskern
    from mpskern.models import kit
    monkeypatch.setattr(kit, "SPLIT_MIN", 16)
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(3)
    try:
        for m in NETS:
            inp = small(m, batch=2)
            want = m.reference(inp, torch=False)
            assert max_error(m.call(inp, "cpu"), want) <= tolerance("float32", m.reduction(inp))
    finally:
        mpskern.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 3, 16])
@pytest.mark.parametrize("bias", [True, False])
def test_kit_linear_add_is_a_residual_linear_in_place(threads, bias):
    """Kit.linear_add(z, x, w, b): z + linear(x, w, b) (within the GEMM's tolerance), written
    into z itself; shapes large enough for the pool (bias as a rank-1 GEMM)."""
    import mpskern
    from mpskern import reference
    old = mpskern.get_num_threads()
    mpskern.set_num_threads(threads)
    try:
        rng = np.random.default_rng(threads)
        z = rng.standard_normal((2, 300, 257)).astype(np.float32)
        x = rng.standard_normal((2, 300, 130)).astype(np.float32)
        w = rng.standard_normal((257, 130)).astype(np.float32)
        b = rng.standard_normal(257).astype(np.float32) if bias else None
        want = z.astype(np.float64) + reference.linear(x, w, b)
        got = models.Kit("cpu").linear_add(z, x, w, b)
        assert got is z
        assert max_error(got, want) <= tolerance("float32", 131)
        exact = models.Kit("reference").linear_add(z.astype(np.float64), x, w, b)
        assert exact.dtype == np.float64
    finally:
        mpskern.set_num_threads(old)


def test_kit_linear_add_refuses_a_view_it_cannot_write():
    z = np.zeros((8, 6), np.float32).T
    with pytest.raises(ValueError, match="C-contiguous"):
        models.Kit("cpu").linear_add(z, np.ones((6, 4), np.float32), np.ones((8, 4), np.float32))


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_head_views_and_merged(parts):
    """head_views: no copy, each part's heads; merged: its (B, H, N, D) view writes the
    (B, N, H * D) array with the heads side by side (merge_heads' layout)."""
    from mpskern.models.kit import head_views, merge_heads, merged
    B, N, H, D = 2, 37, 4, 5
    y = np.arange(B * N * parts * H * D, dtype=np.float32).reshape(B, N, parts * H * D)
    got = head_views(y, parts, H)
    assert len(got) == parts
    for i, a in enumerate(got):
        want = y[:, :, i * H * D:(i + 1) * H * D].reshape(B, N, H, D).transpose(0, 2, 1, 3)
        assert a.shape == (B, H, N, D) and np.shares_memory(a, y) and np.array_equal(a, want)
        o, heads = merged(B, N, H, D, np.float32)
        heads[...] = a
        assert np.array_equal(o, y[:, :, i * H * D:(i + 1) * H * D])
        assert np.array_equal(merge_heads(np.ascontiguousarray(a)), o)


