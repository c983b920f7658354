"""Named shape sets per op. Each entry is (label, shape fields); the op's spec fills the
defaults. "small" is each op's default: a handful of representative shapes that finish in
seconds per backend on a 2-core machine.
"""

# ResNet-50 (v1.5, 224x224 input) convolutions, one entry per distinct layer shape.
_RESNET50_CONV = [
    ("conv1 7x7/2", dict(C=3, H=224, K=64, R=7, stride=2, pad=3)),
    ("res2 1x1 64>64", dict(C=64, H=56, K=64, R=1)),
    ("res2 3x3 64", dict(C=64, H=56, K=64, R=3, pad=1)),
    ("res2 1x1 64>256", dict(C=64, H=56, K=256, R=1)),
    ("res2 1x1 256>64", dict(C=256, H=56, K=64, R=1)),
    ("res3 1x1 256>128", dict(C=256, H=56, K=128, R=1)),
    ("res3 3x3/2 128", dict(C=128, H=56, K=128, R=3, stride=2, pad=1)),
    ("res3 3x3 128", dict(C=128, H=28, K=128, R=3, pad=1)),
    ("res3 1x1 128>512", dict(C=128, H=28, K=512, R=1)),
    ("res3 1x1 512>128", dict(C=512, H=28, K=128, R=1)),
    ("res3 down 1x1/2", dict(C=256, H=56, K=512, R=1, stride=2)),
    ("res4 1x1 512>256", dict(C=512, H=28, K=256, R=1)),
    ("res4 3x3/2 256", dict(C=256, H=28, K=256, R=3, stride=2, pad=1)),
    ("res4 3x3 256", dict(C=256, H=14, K=256, R=3, pad=1)),
    ("res4 1x1 256>1024", dict(C=256, H=14, K=1024, R=1)),
    ("res4 1x1 1024>256", dict(C=1024, H=14, K=256, R=1)),
    ("res4 down 1x1/2", dict(C=512, H=28, K=1024, R=1, stride=2)),
    ("res5 1x1 1024>512", dict(C=1024, H=14, K=512, R=1)),
    ("res5 3x3/2 512", dict(C=512, H=14, K=512, R=3, stride=2, pad=1)),
    ("res5 3x3 512", dict(C=512, H=7, K=512, R=3, pad=1)),
    ("res5 1x1 512>2048", dict(C=512, H=7, K=2048, R=1)),
    ("res5 1x1 2048>512", dict(C=2048, H=7, K=512, R=1)),
    ("res5 down 1x1/2", dict(C=1024, H=14, K=2048, R=1, stride=2)),
]
_CONV_SMALL = ["conv1 7x7/2", "res2 3x3 64", "res3 3x3 128", "res4 1x1 1024>256", "res5 3x3 512"]

_MOBILENET_DW = [  # MobileNetV2 depthwise 3x3 layers (groups = channels)
    (f"dw 3x3{'/2' if st == 2 else ''} {c}@{h}", dict(C=c, H=h, K=c, R=3, stride=st, pad=1, groups=c))
    for c, h, st in [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1),
                     (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1)]]

_SQUARE = [(f"{n}^3", dict(M=n)) for n in (64, 128, 256, 512, 1024, 2048, 4096)]
_TRANSFORMER_GEMM = [  # BERT-base / GPT-2-small projections at 512 tokens
    ("qkv 512x2304x768", dict(M=512, N=2304, K=768)),
    ("attn-out 512x768x768", dict(M=512, N=768, K=768)),
    ("mlp-up 512x3072x768", dict(M=512, N=3072, K=768)),
    ("mlp-down 512x768x3072", dict(M=512, N=768, K=3072)),
    ("scores 12x512x512x64", dict(M=512, N=512, K=64, batch=12)),
]

_POOL_RESNET = [
    ("resnet stem 3x3/2 @112 c64", dict(C=64, H=112, k=3, stride=2, pad=1)),
    ("2x2/2 @56 c256", dict(C=256, H=56, k=2)),
    ("2x2/2 @28 c512", dict(C=512, H=28, k=2)),
    ("resnet head 7x7 @7 c2048", dict(C=2048, H=7, k=7)),
    ("3x3/1 @14 c1024", dict(C=1024, H=14, k=3, stride=1, pad=1)),
]
_POOL_VGG = [(f"vgg 2x2/2 @{h} c{c}", dict(C=c, H=h, k=2))
             for c, h in [(64, 224), (128, 112), (256, 56), (512, 28), (512, 14)]]

_ROWS_SOFTMAX = [  # attention scores (batch 8 x 12 heads x seq rows of seq) and vocabularies
    ("attn 8x12x128 rows x128", dict(rows=8 * 12 * 128, n=128)),
    ("attn 2x12x512 rows x512", dict(rows=2 * 12 * 512, n=512)),
    ("attn 1x12x1024 rows x1024", dict(rows=12 * 1024, n=1024)),
    ("attn 1x16x2048 rows x2048", dict(rows=16 * 2048, n=2048)),
    ("vocab 32 x 32000", dict(rows=32, n=32000)),
    ("vocab 16 x 50257", dict(rows=16, n=50257)),
]
_ROWS_NORM = [  # tokens x hidden size
    ("bert-base 4096x768", dict(rows=4096, n=768)),
    ("bert-large 4096x1024", dict(rows=4096, n=1024)),
    ("gpt2-xl 2048x1600", dict(rows=2048, n=1600)),
    ("llama-7b 2048x4096", dict(rows=2048, n=4096)),
    ("llama-70b 512x8192", dict(rows=512, n=8192)),
]
_CHANNEL_NORM = [  # ResNet-50 stage outputs, batch 8
    ("res2 8x256x56x56", dict(N=8, C=256, H=56)),
    ("res3 8x512x28x28", dict(N=8, C=512, H=28)),
    ("res4 8x1024x14x14", dict(N=8, C=1024, H=14)),
    ("res5 8x2048x7x7", dict(N=8, C=2048, H=7)),
    ("stem 8x64x112x112", dict(N=8, C=64, H=112)),
]


def _pick(entries, labels):
    d = dict(entries)
    return [(k, d[k]) for k in labels]


PRESETS = {
    "conv2d": {
        "small": _pick(_RESNET50_CONV, _CONV_SMALL),
        "resnet50": _RESNET50_CONV,
        "mobilenet-dw": _MOBILENET_DW,
        "tiny": [("tiny 3x3 16", dict(C=16, H=16, K=16, R=3, pad=1)),
                 ("tiny 1x1 32>16", dict(C=32, H=8, K=16, R=1))],
    },
    "matmul": {
        "small": _SQUARE[1:5],
        "square": _SQUARE,
        "transformer": _TRANSFORMER_GEMM,
        "tiny": [("32^3", dict(M=32)), ("64x48x80", dict(M=64, N=48, K=80))],
    },
    "gemm": {
        "small": [(f"{n}^3 +C", dict(M=n)) for n in (128, 256, 512, 1024)],
        "square": [(f"{n}^3 +C", dict(M=n)) for n in (64, 128, 256, 512, 1024, 2048, 4096)],
        "transposed": [(f"1024^3 {a}{b}", dict(M=1024, ta=int(a == "T"), tb=int(b == "T")))
                       for a in "NT" for b in "NT"],
        "tiny": [("32^3 +C", dict(M=32)), ("48x40x72 TN", dict(M=48, N=40, K=72, ta=1, c=0))],
    },
    "pool": {
        "small": _POOL_RESNET[:4],
        "resnet50": _POOL_RESNET,
        "vgg": _POOL_VGG,
        "options": [("stem 3x3/2 ceil_mode @112 c64", dict(C=64, H=112, k=3, stride=2, ceil=1)),
                    ("3x3/2 pad 1 ceil_mode @57 c128", dict(C=128, H=57, k=3, stride=2, pad=1,
                                                           ceil=1))],
        "tiny": [("tiny 3x3/2", dict(C=8, H=16, k=3, stride=2, pad=1))],
    },
    "softmax": {
        "small": _ROWS_SOFTMAX[:3] + _ROWS_SOFTMAX[4:5],
        "transformer": _ROWS_SOFTMAX,
        "tiny": [("tiny 64x100", dict(rows=64, n=100))],
    },
    "rownorm": {
        "small": _ROWS_NORM[:3],
        "transformer": _ROWS_NORM,
        "tiny": [("tiny 64x96", dict(rows=64, n=96))],
    },
    "channelnorm": {
        "small": [(lbl.replace("8x", "1x", 1), dict(s, N=1)) for lbl, s in _CHANNEL_NORM[:4]],
        "resnet50": _CHANNEL_NORM,
        "tiny": [("tiny 2x64x8x8", dict(N=2, C=64, H=8))],
    },
}
_FAMILY = {"max_pool2d": "pool", "avg_pool2d": "pool", "log_softmax": "softmax",
           "layer_norm": "rownorm", "rms_norm": "rownorm", "batch_norm": "channelnorm",
           "group_norm": "channelnorm"}


def presets_for(op):
    """{preset name: [(label, fields), ...]} of an op."""
    return PRESETS[_FAMILY.get(op, op)]


def get(op, name):
    p = presets_for(op)
    if name not in p:
        raise ValueError(f"{op} has no preset {name!r}; use one of {', '.join(p)}")
    return p[name]
