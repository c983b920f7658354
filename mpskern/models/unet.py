"""A Stable Diffusion UNet down block: diffusers' CrossAttnDownBlock2D as SD 1.x's first
one (down_blocks.0: 320 channels on 64 x 64 latents, 2 layers, 8 heads, text context 77 x
768, time embedding 1280). Per layer a ResnetBlock2D (GroupNorm(32)+SiLU, 3x3 conv, + the
projected time embedding, GroupNorm+SiLU, 3x3 conv, + skip) and a Transformer2DModel
(GroupNorm(32, eps 1e-6), 1x1 proj_in, LayerNorm + self-attention, LayerNorm +
cross-attention to the context, LayerNorm + GEGLU feed-forward (x * gelu(gate), erf
GELU), 1x1 proj_out, + skip); then the 3x3 stride-2 Downsample2D conv. Inputs: latents x
(B, C, H, W), time embedding temb (B, temb), context (B, ctx, ctx_dim); output (B, C, H/2,
W/2). Parameter names follow diffusers' down_blocks.0 state_dict."""
import numpy as np

from mpskern.models.kit import merge_heads

GROUPS = 32
RES_EPS = 1e-5
ATTN_GN_EPS = 1e-6
LN_EPS = 1e-5


def params(s, rng, dtype=np.float32):
    """Random weights, PyTorch's default initialisation scale (uniform +-1/sqrt(fan_in))."""
    C, T, D = s["channels"], s["temb"], s["ctx_dim"]
    P = {}

    def lin(name, n, k, bias=True):
        bound = 1 / np.sqrt(k)
        P[name + ".weight"] = rng.uniform(-bound, bound, (n, k))
        if bias:
            P[name + ".bias"] = rng.uniform(-bound, bound, n)

    def conv(name, k, c, r):
        bound = 1 / np.sqrt(c * r * r)
        P[name + ".weight"] = rng.uniform(-bound, bound, (k, c, r, r))
        P[name + ".bias"] = rng.uniform(-bound, bound, k)

    def norm(name, c):
        P[name + ".weight"] = rng.uniform(0.8, 1.2, c)
        P[name + ".bias"] = rng.uniform(-0.1, 0.1, c)

    for i in range(s["layers"]):
        r, a = f"resnets.{i}.", f"attentions.{i}."
        norm(r + "norm1", C)
        conv(r + "conv1", C, C, 3)
        lin(r + "time_emb_proj", C, T)
        norm(r + "norm2", C)
        conv(r + "conv2", C, C, 3)
        norm(a + "norm", C)
        conv(a + "proj_in", C, C, 1)
        b = a + "transformer_blocks.0."
        for n in ("norm1", "norm2", "norm3"):
            norm(b + n, C)
        for at, kv in (("attn1", C), ("attn2", D)):
            lin(b + at + ".to_q", C, C, bias=False)
            lin(b + at + ".to_k", C, kv, bias=False)
            lin(b + at + ".to_v", C, kv, bias=False)
            lin(b + at + ".to_out.0", C, C)
        lin(b + "ff.net.0.proj", 8 * C, C)          # GEGLU: value and gate, 4C each
        lin(b + "ff.net.2", C, 4 * C)
        conv(a + "proj_out", C, C, 1)
    conv("downsamplers.0.conv", C, C, 3)
    return {k: v.astype(dtype) for k, v in P.items()}


def inputs(s, rng, dtype=np.float32):
    """Latents x, time embedding temb, text context."""
    B = s["batch"]
    return {"x": rng.standard_normal((B, s["channels"], s["size"], s["size"])).astype(dtype),
            "temb": rng.standard_normal((B, s["temb"])).astype(dtype),
            "context": rng.standard_normal((B, s["context"], s["ctx_dim"])).astype(dtype)}


def check(s):
    if s["channels"] % GROUPS or s["channels"] % s["heads"]:
        raise ValueError(f"unet-block: channels={s['channels']} must be a multiple of "
                         f"{GROUPS} (GroupNorm groups) and of heads={s['heads']}")


def prepare(P):
    """forward()'s weights: GEGLU's projection cut into its value and gate halves (two
    linears, so the gate's GELU can be applied to its own result)."""
    W = dict(P)
    for name in [k for k in P if k.endswith("ff.net.0.proj.weight")]:
        pre = name[:-len("weight")]
        w, b = P[pre + "weight"], P[pre + "bias"]
        n = w.shape[0] // 2
        W[pre + "value.weight"], W[pre + "gate.weight"] = w[:n].copy(), w[n:].copy()
        W[pre + "value.bias"], W[pre + "gate.bias"] = b[:n].copy(), b[n:].copy()
    return W


def _attention_add(kit, W, p, z, x, ctx, H):
    """z += attention block p of x (queries) over ctx (keys and values). q, k, v come from
    a GEMM per head, written in the head layout (kit.heads). Tried: q|k|v as one stacked
    linear + one head-split copy: the copies on Python threads took what the GEMMs saved."""
    q = kit.heads(x, W[p + "to_q.weight"], None, H)
    k = kit.heads(ctx, W[p + "to_k.weight"], None, H)
    v = kit.heads(ctx, W[p + "to_v.weight"], None, H)
    o = kit.glue("merge heads", merge_heads, kit.attention(q, k, v))
    return kit.linear_add(z, o, W[p + "to_out.0.weight"], W[p + "to_out.0.bias"])


def _proj_in(kit, y, w, b):
    """proj_in (a 1x1 conv) of y (B, C, H, W) as the GEMM y^T @ w^T + b: its result is
    already the tokens (B, HW, C), with no transpose copy."""
    B, C = y.shape[:2]
    return kit.gemm(y.reshape(B, C, -1), w.reshape(w.shape[0], C), b, trans_a=True,
                    trans_b=True)


def _proj_out_add(kit, z, w, b, h):
    """h += proj_out(tokens z (B, HW, C)) (a 1x1 conv) as the GEMM w @ z^T + (h + b),
    written into h (B, C, H, W) in the image layout: no transpose copy, no separate add."""
    B, C = h.shape[:2]
    hv = kit.add_bias(h.reshape(B, C, -1), b)
    kit.gemm(w.reshape(w.shape[0], -1), z, hv, trans_b=True, out=hv)
    return h


def forward(kit, W, x, temb, ctx, s):
    """The block's output (B, C, H/2, W/2); W from prepare()."""
    H = s["heads"]
    st = kit.act(temb.copy(), "silu")
    h = x
    for i in range(s["layers"]):
        r, a = f"resnets.{i}.", f"attentions.{i}."
        y = kit.group_norm(h, GROUPS, W[r + "norm1.weight"], W[r + "norm1.bias"], RES_EPS, "silu")
        t = kit.linear(st, W[r + "time_emb_proj.weight"], W[r + "time_emb_proj.bias"])
        if len(t) == 1:    # one image: its time embedding is part of conv1's bias (no pass)
            y = kit.conv(y, W[r + "conv1.weight"], W[r + "conv1.bias"] + t[0], 1, 1)
        else:
            y = kit.conv(y, W[r + "conv1.weight"], W[r + "conv1.bias"], 1, 1)
            kit.add(y, t[:, :, None, None])
        y = kit.group_norm(y, GROUPS, W[r + "norm2.weight"], W[r + "norm2.bias"], RES_EPS, "silu")
        y = kit.conv(y, W[r + "conv2.weight"], W[r + "conv2.bias"], 1, 1)
        h = kit.add(y, h)

        y = kit.group_norm(h, GROUPS, W[a + "norm.weight"], W[a + "norm.bias"], ATTN_GN_EPS)
        z = _proj_in(kit, y, W[a + "proj_in.weight"], W[a + "proj_in.bias"])
        b = a + "transformer_blocks.0."
        n = kit.layer_norm(z, W[b + "norm1.weight"], W[b + "norm1.bias"], LN_EPS)
        _attention_add(kit, W, b + "attn1.", z, n, n, H)
        n = kit.layer_norm(z, W[b + "norm2.weight"], W[b + "norm2.bias"], LN_EPS)
        _attention_add(kit, W, b + "attn2.", z, n, ctx, H)
        n = kit.layer_norm(z, W[b + "norm3.weight"], W[b + "norm3.bias"], LN_EPS)
        f = b + "ff.net.0.proj."
        g = kit.linear(n, W[f + "gate.weight"], W[f + "gate.bias"], act="gelu")
        v = kit.linear(n, W[f + "value.weight"], W[f + "value.bias"])
        v = kit.mul(v, g)
        kit.linear_add(z, v, W[b + "ff.net.2.weight"], W[b + "ff.net.2.bias"])
        h = _proj_out_add(kit, z, W[a + "proj_out.weight"], W[a + "proj_out.bias"], h)
    return kit.conv(h, W["downsamplers.0.conv.weight"], W["downsamplers.0.conv.bias"], 2, 1)


def torch_forward(F, P, x, temb, ctx, s):
    """The same block in torch.nn.functional (diffusers' modules, eval, no dropout)."""
    H, C = s["heads"], s["channels"]

    def attention(p, x, c):
        B, N, _ = x.shape
        q = F.linear(x, P[p + "to_q.weight"])
        k = F.linear(c, P[p + "to_k.weight"])
        v = F.linear(c, P[p + "to_v.weight"])
        q, k, v = (t.view(B, -1, H, C // H).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C)
        return F.linear(o, P[p + "to_out.0.weight"], P[p + "to_out.0.bias"])

    st = F.silu(temb)
    h = x
    for i in range(s["layers"]):
        r, a = f"resnets.{i}.", f"attentions.{i}."
        y = F.silu(F.group_norm(h, GROUPS, P[r + "norm1.weight"], P[r + "norm1.bias"], RES_EPS))
        y = F.conv2d(y, P[r + "conv1.weight"], P[r + "conv1.bias"], 1, 1)
        y = y + F.linear(st, P[r + "time_emb_proj.weight"], P[r + "time_emb_proj.bias"])[:, :, None, None]
        y = F.silu(F.group_norm(y, GROUPS, P[r + "norm2.weight"], P[r + "norm2.bias"], RES_EPS))
        h = F.conv2d(y, P[r + "conv2.weight"], P[r + "conv2.bias"], 1, 1) + h

        B, _, hh, ww = h.shape
        y = F.group_norm(h, GROUPS, P[a + "norm.weight"], P[a + "norm.bias"], ATTN_GN_EPS)
        y = F.conv2d(y, P[a + "proj_in.weight"], P[a + "proj_in.bias"])
        z = y.permute(0, 2, 3, 1).reshape(B, hh * ww, C)
        b = a + "transformer_blocks.0."
        n = F.layer_norm(z, (C,), P[b + "norm1.weight"], P[b + "norm1.bias"], LN_EPS)
        z = attention(b + "attn1.", n, n) + z
        n = F.layer_norm(z, (C,), P[b + "norm2.weight"], P[b + "norm2.bias"], LN_EPS)
        z = attention(b + "attn2.", n, ctx) + z
        n = F.layer_norm(z, (C,), P[b + "norm3.weight"], P[b + "norm3.bias"], LN_EPS)
        v, g = F.linear(n, P[b + "ff.net.0.proj.weight"], P[b + "ff.net.0.proj.bias"]).chunk(2, -1)
        z = F.linear(v * F.gelu(g), P[b + "ff.net.2.weight"], P[b + "ff.net.2.bias"]) + z
        y = z.reshape(B, hh, ww, C).permute(0, 3, 1, 2)
        h = F.conv2d(y, P[a + "proj_out.weight"], P[a + "proj_out.bias"]) + h
    return F.conv2d(h, P["downsamplers.0.conv.weight"], P["downsamplers.0.conv.bias"], 2, 1)


def reduction(s):
    """The longest sum behind one output: a 3x3 conv (9 x channels), the feed-forward's
    down projection (4 x channels) or self-attention's softmax row (size^2 tokens)."""
    return max(9 * s["channels"], s["size"] ** 2, s["ctx_dim"])


def flops(s):
    """2 x multiply-adds of the convs and linears, attention's two products."""
    B, C, N, X, D = s["batch"], s["channels"], s["size"] ** 2, s["context"], s["ctx_dim"]
    resnet = 2 * (2 * 9 * C * C * N) + 2 * C * s["temb"]
    attn1 = 2 * N * C * C * 4 + 4 * N * N * C
    attn2 = 2 * N * C * C * 2 + 2 * X * D * C * 2 + 4 * N * X * C
    ff = 2 * N * C * 8 * C + 2 * N * 4 * C * C
    transformer = 2 * (2 * N * C * C) + attn1 + attn2 + ff
    down = 2 * 9 * C * C * ((s["size"] + 1) // 2) ** 2
    return B * (s["layers"] * (resnet + transformer) + down)


def activations(s):
    """Elements a transformer layer holds at once at most (the residual, the normed tokens,
    q/k/v, the GEGLU projection 8C wide and its 4C product), attention's scores not (fused);
    Model.footprint's estimate, before anything is allocated."""
    return s["batch"] * (16 * s["channels"] * s["size"] ** 2 + s["context"] * s["ctx_dim"])


def attention_scores(s):
    """Elements of one head's largest score matrix (self-attention: size^2 x size^2 tokens;
    cross-attention's size^2 x context is smaller), as gpt2.attention_scores."""
    n = s["size"] ** 2
    return n * max(n, s["context"])
