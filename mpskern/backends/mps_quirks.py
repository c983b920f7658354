"""Known MPSGraph bugs, by macOS version, that backend "mps" works around by running the
case on mpskern's own Metal kernels (backend "metal") instead: the answer stays right and
bench records say which kernels ran. Found in PyTorch's MPS issues (docs/macos.md lists
them with their links); `mpskern devices` names the ones active on this Mac.

    conv2d_quirk(args, dtype, macos=None) -> Quirk or None
    active(macos=None) -> [Quirk]     (the workarounds in force on this macOS)

A version range is [since, before): `before` None means no fixed version is known yet.
MPSKERN_MPS_QUIRKS=0 turns the routing off (to reproduce a bug on purpose).
"""
import platform
import re
from dataclasses import dataclass

from mpskern import env


@dataclass(frozen=True)
class Quirk:
    name: str
    op: str
    what: str                 # the bug, in words
    since: tuple              # first affected macOS (major, minor)
    before: tuple             # first fixed macOS, or None (not known to be fixed)
    links: tuple
    applies: object           # applies(args: dict, dtype: str) -> bool

    def affects(self, macos):
        return macos >= self.since and (self.before is None or macos < self.before)


def _f32(dtype):
    return dtype in (0, "float32")            # _native.F32 (MK_F32) or its name


QUIRKS = (
    Quirk("grouped-conv-batch-fp32", "conv2d",
          "grouped/depthwise float32 convolutions with batch > 1 and a kernel dimension of 256 or "
          "more compute wrong results (the kernel overruns its threadgroup memory)",
          (12, 0), None,
          ("https://github.com/pytorch/pytorch/issues/188335", "https://github.com/pytorch/pytorch/pull/188359"),
          lambda a, dt: a["groups"] > 1 and a["N"] > 1 and _f32(dt) and max(a["R"], a["S"]) >= 256),
    Quirk("conv-out-channels-65536", "conv2d",
          "convolutions with more than 65536 output channels compute wrong results (conv2d still on "
          "macOS 15.1, where conv1d was fixed)",
          (12, 0), None,
          ("https://github.com/pytorch/pytorch/issues/129207", "https://github.com/pytorch/pytorch/issues/142836"),
          lambda a, dt: a["K"] > 65536),
    Quirk("conv-uneven-strides", "conv2d",
          "convolutions whose stride differs between height and width gave results different from the "
          "CPU on macOS 12 (reported on 12.5; PyTorch changed its own descriptor code)",
          (12, 0), (13, 0),
          ("https://github.com/pytorch/pytorch/issues/83180", "https://github.com/pytorch/pytorch/issues/82921",
           "https://github.com/pytorch/pytorch/pull/83522"),
          lambda a, dt: a["stride_h"] != a["stride_w"]),
)


def macos_version(text=None):
    """(major, minor) of this macOS (or of `text`, e.g. "15.1.1"); None off macOS."""
    text = platform.mac_ver()[0] if text is None else text
    m = re.match(r"(\d+)(?:\.(\d+))?", text or "")
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def _enabled():
    return env.flag("MPSKERN_MPS_QUIRKS") is not False


def active(macos=None):
    """The workarounds in force on macOS `macos` (default: this one)."""
    macos = macos or macos_version()
    if macos is None or not _enabled():
        return []
    return [q for q in QUIRKS if q.affects(macos)]


def conv2d_quirk(args, dtype, macos=None):
    """The known bug a conv2d with these mk_conv2d_args fields would hit, or None."""
    return next((q for q in active(macos) if q.op == "conv2d" and q.applies(args, dtype)), None)


def summary(macos=None):
    """One line for `mpskern devices`: which cases go to mpskern's kernels here."""
    qs = active(macos)
    if not qs:
        return ""
    return "known MPSGraph bugs routed to mpskern's metal kernels on this macOS: " + \
        ", ".join(q.name for q in qs)
