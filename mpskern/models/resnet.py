"""ResNet (He et al. 2015; torchvision's v1.5 bottleneck: the stride on the 3x3 conv) for
inference: parameter names and layout as torchvision's resnet50 state_dict, so its
weights would load unchanged (none are downloaded here: params() draws them).

forward() runs the network with batch_norm folded into each conv (fold(): w * g/sqrt(v+eps),
b - m g/sqrt(v+eps), once, in float64) and ReLU fused into the conv (activation=); each
block's last 1x1 conv is a GEMM whose C is the skip path, so the residual add and its ReLU
are that GEMM's output pass (prepare());
torch_forward() is the same network in torch.nn.functional as torchvision runs it in eval
mode (F.batch_norm with the running statistics, unfolded)."""
import numpy as np

# depth -> bottleneck blocks per stage (1 + 3 * blocks + 1 = depth)
DEPTHS = {14: (1, 1, 1, 1), 26: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
          152: (3, 8, 36, 3)}
EXPANSION = 4
EPS = 1e-5


def _blocks(depth, width):
    """(prefix, in, mid, out, stride, has_downsample) per bottleneck block."""
    if depth not in DEPTHS:
        raise ValueError(f"resnet: depth={depth}; use one of {sorted(DEPTHS)}")
    out, c = [], width
    for i, n in enumerate(DEPTHS[depth]):
        mid = width << i
        for j in range(n):
            stride = 2 if i > 0 and j == 0 else 1
            out.append((f"layer{i + 1}.{j}", c, mid, mid * EXPANSION, stride, j == 0))
            c = mid * EXPANSION
    return out


def params(s, rng, dtype=np.float32):
    """Random weights for shape s (depth, width, classes): Kaiming-normal convs, batch-norm
    statistics and affine terms near their trained ranges, the last BN of each block
    scaled down (the residual stream stays O(1) through the depth)."""
    P = {}

    def conv(name, k, c, r):
        P[name] = rng.standard_normal((k, c, r, r)) * np.sqrt(2.0 / (c * r * r))

    def bn(name, c, gain=1.0):
        P[name + ".weight"] = rng.uniform(0.5, 1.0, c) * gain
        P[name + ".bias"] = rng.uniform(-0.1, 0.1, c)
        P[name + ".running_mean"] = rng.uniform(-0.1, 0.1, c)
        P[name + ".running_var"] = rng.uniform(0.5, 1.5, c)

    w = s["width"]
    conv("conv1.weight", w, 3, 7)
    bn("bn1", w)
    for pre, c, mid, out, stride, down in _blocks(s["depth"], w):
        conv(f"{pre}.conv1.weight", mid, c, 1)
        bn(f"{pre}.bn1", mid)
        conv(f"{pre}.conv2.weight", mid, mid, 3)
        bn(f"{pre}.bn2", mid)
        conv(f"{pre}.conv3.weight", out, mid, 1)
        bn(f"{pre}.bn3", out, gain=0.3)
        if down:
            conv(f"{pre}.downsample.0.weight", out, c, 1)
            bn(f"{pre}.downsample.1", out, gain=0.3)
    feat = (w << 3) * EXPANSION
    P["fc.weight"] = rng.standard_normal((s["classes"], feat)) / np.sqrt(feat)
    P["fc.bias"] = rng.uniform(-0.1, 0.1, s["classes"])
    return {k: v.astype(dtype) for k, v in P.items()}


def inputs(s, rng, dtype=np.float32):
    return {"x": rng.standard_normal((s["batch"], 3, s["image"], s["image"])).astype(dtype)}


def check(s):
    if s["depth"] not in DEPTHS:
        raise ValueError(f"resnet50: depth={s['depth']}; use one of {sorted(DEPTHS)}")


def fold(P, dtype=None):
    """The conv weights with each following batch_norm folded in: {conv name: (w, b)} (the
    fc layer as is). Computed in float64, stored in the weights' dtype."""
    out = {}
    for name in P:
        if not name.endswith("weight") or P[name].ndim != 4:
            continue
        conv = name[:-len(".weight")]
        bn = conv.replace("conv", "bn") if "conv" in conv else conv[:-1] + "1"  # downsample.0 -> .1
        w = P[name].astype(np.float64)
        g = P[bn + ".weight"] / np.sqrt(P[bn + ".running_var"].astype(np.float64) + EPS)
        b = P[bn + ".bias"] - P[bn + ".running_mean"] * g
        dt = dtype or P[name].dtype
        out[conv] = ((w * g[:, None, None, None]).astype(dt), b.astype(dt))
    out["fc"] = (P["fc.weight"], P["fc.bias"])
    return out


def forward(kit, W, x, s):
    """Logits (N, classes) of images x (N, 3, H, W) with weights W from prepare()."""
    h = kit.conv(x, *W["conv1"], 2, 3, act="relu")
    h = kit.max_pool(h, 3, 2, 1)
    for pre, _c, mid, _out, stride, down in _blocks(s["depth"], s["width"]):
        y = kit.conv(h, *W[f"{pre}.conv1"], act="relu")
        w3, b3, w3b = W[f"{pre}.conv3"]
        N = h.shape[0]
        if not down and N == 1:     # conv2 writes rows 0..mid-1 of y1, its last row is ones
            P, Q = ((n - 1) // stride + 1 for n in y.shape[2:])      # (3x3, padding 1)
            y1 = np.empty((1, mid + 1, P * Q), y.dtype)
            y1[0, mid] = 1
            kit.conv(y, *W[f"{pre}.conv2"], stride, 1, act="relu",
                     out=y1[:, :mid].reshape(1, mid, P, Q))
            w3, y = w3b, y1         # [w3 | b3] @ [y; 1]: conv3's bias is in its product
            skip = h
        else:
            y = kit.conv(y, *W[f"{pre}.conv2"], stride, 1, act="relu")
            y = y.reshape(N, mid, -1)
            if down:    # the downsample's bias carries conv3's (prepare())
                skip = kit.conv(h, *W[f"{pre}.downsample.0"], stride)
            else:       # h is this network's own array: conv3's bias goes into it, in place
                skip = kit.add_bias(h, b3)
        # conv3 (1x1) as the GEMM w3 @ y with the skip as its C, ReLU fused, into the skip:
        # the residual add and its ReLU are the GEMM's output pass (no numpy passes)
        K = skip.shape[1]
        r = skip.reshape(N, K, -1)
        kit.gemm(w3, y, r, act="relu", out=r)
        h = skip
    return kit.linear(kit.mean_pool(h), *W["fc"])


def torch_forward(F, P, x, s):
    """The same network in torch.nn.functional (eval: running statistics), weights P."""
    def bn(h, name):
        return F.batch_norm(h, P[name + ".running_mean"], P[name + ".running_var"],
                            P[name + ".weight"], P[name + ".bias"], False, 0.0, EPS)

    h = F.relu(bn(F.conv2d(x, P["conv1.weight"], None, 2, 3), "bn1"))
    h = F.max_pool2d(h, 3, 2, 1)
    for pre, _c, _mid, _out, stride, down in _blocks(s["depth"], s["width"]):
        y = F.relu(bn(F.conv2d(h, P[f"{pre}.conv1.weight"]), f"{pre}.bn1"))
        y = F.relu(bn(F.conv2d(y, P[f"{pre}.conv2.weight"], None, stride, 1), f"{pre}.bn2"))
        y = bn(F.conv2d(y, P[f"{pre}.conv3.weight"]), f"{pre}.bn3")
        if down:
            h = bn(F.conv2d(h, P[f"{pre}.downsample.0.weight"], None, stride),
                   f"{pre}.downsample.1")
        h = F.relu(y + h)
    h = F.adaptive_avg_pool2d(h, 1).flatten(1)
    return F.linear(h, P["fc.weight"], P["fc.bias"])


def prepare(P):
    """forward()'s weights: fold(), then each block's last conv (1x1) as a GEMM's (out, in)
    matrix, its bias moved into the downsample's where the block has one (the GEMM adds the
    skip path, which then carries it); without one also [w3 | b3], (out, in + 1): at batch
    1 conv2 writes its result above a row of ones, so the GEMM's product holds the bias (no
    pass of its own over the skip: 1.4 ms of a 16-thread forward as a rank-1 GEMM). Sums in
    float64, stored in the weights' dtype."""
    W = fold(P)
    for name in [k for k in W if k.endswith(".conv3")]:
        w3, b3 = W[name]
        w3 = w3.reshape(w3.shape[0], -1)
        W[name] = (w3, b3, np.concatenate([w3, b3[:, None]], axis=1))
        ds = name[:-len("conv3")] + "downsample.0"
        if ds in W:
            wd, bd = W[ds]
            W[ds] = (wd, (bd.astype(np.float64) + b3).astype(bd.dtype))
    return W


def reduction(s):
    """The longest sum behind one output: the last stage's 3x3 conv (or the fc layer)."""
    mid = s["width"] << 3
    return max(9 * mid, mid * EXPANSION)


def flops(s):
    """Multiply-adds x 2 of the convs and the fc layer (pools, norms, adds not counted)."""
    def conv(k, c, r, hw):
        return 2 * k * c * r * r * hw * hw
    hw = (s["image"] + 2 * 3 - 7) // 2 + 1
    total = conv(s["width"], 3, 7, hw)
    hw = (hw + 2 - 3) // 2 + 1
    for _pre, c, mid, out, stride, down in _blocks(s["depth"], s["width"]):
        o = (hw - 1) // stride + 1
        total += conv(mid, c, 1, hw) + conv(mid, mid, 3, o) + conv(out, mid, 1, o)
        total += conv(out, c, 1, o) if down else 0
        hw = o
    total += 2 * s["classes"] * (s["width"] << 3) * EXPANSION
    return s["batch"] * total


def activations(s):
    """Elements of the tensors a bottleneck of the first stage holds at once (its input,
    two mid-width results, its output: ~3x the stem's output), the most any layer holds;
    Model.footprint's estimate, before anything is allocated."""
    return 3 * s["batch"] * s["width"] * ((s["image"] + 1) // 2) ** 2


def attention_scores(s):
    """No attention (gpt2.attention_scores)."""
    return 0
