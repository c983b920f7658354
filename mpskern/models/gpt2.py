"""GPT-2 (Radford et al. 2019; the "small" model is 12 layers of width 768, 12 heads) as a
language model: token ids (B, T) -> logits (B, T, vocab), causal self-attention, GELU
(tanh form, as GPT-2's gelu_new), pre-layer norms, the token embedding tied to the output
head. Parameter names follow Hugging Face's GPT2LMHeadModel ("h.0.attn.c_attn.weight"),
but its Conv1D weights are stored as torch.nn.Linear's (out, in), the layout
mpskern.linear and F.linear take (transpose HF's to load them)."""
import numpy as np

from mpskern.models.kit import head_views, merged

POSITIONS = 1024
EPS = 1e-5


def params(s, rng, dtype=np.float32):
    """Random weights as GPT-2's initialisation: normal(0, 0.02), the residual projections
    scaled by 1/sqrt(2 layers); small random biases and layer-norm affine terms (so every
    bias path is exercised)."""
    C, L, V = s["width"], s["layers"], s["vocab"]
    P = {"wte.weight": rng.standard_normal((V, C)) * 0.02,
         "wpe.weight": rng.standard_normal((POSITIONS, C)) * 0.01}

    def lin(name, n, k, std=0.02):
        P[name + ".weight"] = rng.standard_normal((n, k)) * std
        P[name + ".bias"] = rng.uniform(-0.02, 0.02, n)

    def ln(name):
        P[name + ".weight"] = rng.uniform(0.8, 1.2, C)
        P[name + ".bias"] = rng.uniform(-0.05, 0.05, C)

    for i in range(L):
        ln(f"h.{i}.ln_1")
        lin(f"h.{i}.attn.c_attn", 3 * C, C)
        lin(f"h.{i}.attn.c_proj", C, C, 0.02 / np.sqrt(2 * L))
        ln(f"h.{i}.ln_2")
        lin(f"h.{i}.mlp.c_fc", 4 * C, C)
        lin(f"h.{i}.mlp.c_proj", C, 4 * C, 0.02 / np.sqrt(2 * L))
    ln("ln_f")
    return {k: v.astype(dtype) for k, v in P.items()}


def inputs(s, rng, dtype=np.float32):
    """Token ids (B, T)."""
    return {"ids": rng.integers(0, s["vocab"], (s["batch"], s["seq"]), dtype=np.int64)}


def check(s):
    if s["seq"] > POSITIONS:
        raise ValueError(f"gpt2: seq={s['seq']}; GPT-2 has {POSITIONS} positions")
    if s["width"] % s["heads"]:
        raise ValueError(f"gpt2: heads={s['heads']} must divide width={s['width']}")


def prepare(P):
    return P


def forward(kit, P, ids, s):
    """The layers' intermediate results live in buffers made once per pass and rewritten
    by every layer (out=): no fresh allocation per op (at 16 threads a fresh result's page
    faults cost as much as a small op); attention reads its heads in place from the qkv
    projection and writes them merged (no split or merge copy)."""
    H, (B, T) = s["heads"], ids.shape
    h = kit.glue("embedding", lambda: P["wte.weight"][ids] + P["wpe.weight"][:T])
    C = h.shape[-1]
    a = np.empty_like(h)                                     # the layer norms' results
    qkv = np.empty((B, T, 3 * C), h.dtype)
    q, k, v = head_views(qkv, 3, H)
    o, heads = merged(B, T, H, C // H, h.dtype)
    m = np.empty((B, T, 4 * C), h.dtype)
    for i in range(s["layers"]):
        p = f"h.{i}."
        kit.layer_norm(h, P[p + "ln_1.weight"], P[p + "ln_1.bias"], EPS, out=a)
        kit.linear(a, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"], out=qkv)
        kit.attention(q, k, v, causal=True, out=heads)
        kit.linear_add(h, o, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        kit.layer_norm(h, P[p + "ln_2.weight"], P[p + "ln_2.bias"], EPS, out=a)
        kit.linear(a, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"], act="gelu_tanh", out=m)
        kit.linear_add(h, m, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    kit.layer_norm(h, P["ln_f.weight"], P["ln_f.bias"], EPS, out=a)
    return kit.linear(a, P["wte.weight"])


def torch_forward(F, P, ids, s):
    H, T, C = s["heads"], ids.shape[1], s["width"]
    B = ids.shape[0]
    h = F.embedding(ids, P["wte.weight"]) + P["wpe.weight"][:T]
    for i in range(s["layers"]):
        p = f"h.{i}."
        a = F.layer_norm(h, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], EPS)
        q, k, v = F.linear(a, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"]).split(C, 2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = o.transpose(1, 2).reshape(B, T, C)
        h = h + F.linear(o, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        a = F.layer_norm(h, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], EPS)
        m = F.gelu(F.linear(a, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]),
                   approximate="tanh")
        h = h + F.linear(m, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    h = F.layer_norm(h, (C,), P["ln_f.weight"], P["ln_f.bias"], EPS)
    return F.linear(h, P["wte.weight"])


def reduction(s):
    """The longest sum behind one output: the MLP's down projection (4 x width) or a
    softmax row over the sequence."""
    return max(4 * s["width"], s["seq"])


def flops(s):
    """2 x multiply-adds of the linear layers, attention's two products (full, not halved by
    the causal mask) and the output head."""
    B, T, C, L, V = s["batch"], s["seq"], s["width"], s["layers"], s["vocab"]
    per_layer = 2 * B * T * C * (3 * C + C + 8 * C) + 4 * B * T * T * C
    return L * per_layer + 2 * B * T * C * V


def activations(s):
    """Elements forward() holds at once at most: the logits and a layer's buffers (the
    residual stream, qkv, attention output, the 4x-wide MLP), attention's scores not (fused);
    Model.footprint's estimate, before anything is allocated."""
    return s["batch"] * s["seq"] * (s["vocab"] + 9 * s["width"])


def attention_scores(s):
    """Elements of one head's score matrix (queries x keys), the most the float64 reference
    without torch holds per attention (Kit("reference") runs one head at a time)."""
    return s["seq"] ** 2
