"""Whole networks written in mpskern's ops with numpy for glue, each with its
torch.nn.functional twin: one definition shared by examples/, `mpskern bench --model` and
the tests. MODELS maps a name to its mpskern/models/model.py Model (shape fields: the real
network's sizes by default, a reduced variant under .small)."""
from mpskern.models import gpt2, resnet, unet
from mpskern.models.kit import Kit
from mpskern.models.model import Model
from mpskern.ops.op import Field

RESNET50 = Model(
    "resnet50", resnet,
    [Field("batch", 1), Field("image", 224, "input height = width"),
     Field("depth", 50, "14, 26, 50, 101 or 152"), Field("width", 64, "stem channels"),
     Field("classes", 1000)],
    "batch=8", dict(image=64, depth=14, width=16, classes=10),
    "ResNet-50 (torchvision v1.5), batch_norm folded into the convs, ReLU")
GPT2 = Model(
    "gpt2", gpt2,
    [Field("batch", 1), Field("seq", 256), Field("layers", 12), Field("width", 768),
     Field("heads", 12), Field("vocab", 50257)],
    "batch=1,seq=256", dict(seq=32, layers=2, width=64, heads=4, vocab=101),
    "GPT-2 small language model: token ids -> logits, causal attention")
UNET_BLOCK = Model(
    "unet-block", unet,
    [Field("batch", 1), Field("channels", 320), Field("size", 64, "latent height = width"),
     Field("layers", 2), Field("heads", 8), Field("context", 77, "text tokens"),
     Field("ctx_dim", 768), Field("temb", 1280, "time embedding width")],
    "batch=1", dict(channels=64, size=8, heads=2, context=7, ctx_dim=32, temb=48),
    "Stable Diffusion 1.x UNet down block (CrossAttnDownBlock2D, 320 ch @64x64)")

MODELS = {m.name: m for m in (RESNET50, GPT2, UNET_BLOCK)}


def get(name):
    """The Model called `name`; ValueError listing them."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; use one of {', '.join(MODELS)}") from None


__all__ = ["GPT2", "Kit", "MODELS", "Model", "RESNET50", "UNET_BLOCK", "get"]
