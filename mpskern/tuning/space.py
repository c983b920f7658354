"""What a tunable kernel's configuration space declares (tuning/tiles.py and tuning/rows.py
declare them; tuning/spaces.py checks and chooses configurations with them).

A configuration is a flat JSON-friendly dict, e.g. for gemm

    {"variant": "simd", "BM": 64, "BN": 64, "BK": 16, "WM": 2, "WN": 2}

`variant` picks the kernel (`<op>_<variant>_<f32|f16>` in metal/<file>); the keys in
`params` are tile parameters passed to the compiler as macros MK_<KEY> (the same dict goes
to Metal's preprocessorMacros and to the simulator's -D); keys in `runtime` (gemm's
optional `split_k`, a threadgroup size) change the dispatch, not the compiled kernel.
"""
from dataclasses import dataclass, field

from mpskern import paths

FLOAT = 4   # bytes per staged element: tiles are staged in threadgroup memory as float


def _none(*_):
    return []


@dataclass(frozen=True)
class Space:
    op: str                         # the kernels' name prefix
    file: str                       # metal/ file holding the kernels
    variants: tuple                 # kernel variants (the config's "variant")
    params: dict                    # tile parameter -> candidate values (compiled as MK_<name>)
    runtime: dict = field(default_factory=dict)   # dispatch-time parameter -> candidates
    doc: str = ""
    threads: object = None          # config -> threads per threadgroup
    tg_memory: object = None        # config -> bytes of threadgroup memory
    rules: object = _none           # config -> why it is invalid in itself (sentences)
    fits: object = _none            # (config, shape key) -> why it cannot run that problem
    defaults: object = None         # (dtype, shape key) -> the generic rule's choices, best
                                    # first: the first valid on the device and problem wins
    shipped: tuple = ()             # every configuration the generic rule can return
    fallback: object = None         # (dtype, shape key) -> what it returns when no choice
                                    # fits (select() then says why); None: the first choice

    def kernel(self, config, dtype, variant=None):
        """The name of the kernel (paths.kernel_name: op_variant_dtype) of `config`'s
        variant, or of another `variant` of the same family (a helper kernel)."""
        return paths.kernel_name(self.op, variant or config["variant"], dtype)
