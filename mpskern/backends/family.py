"""Kernel families as the backends run them. A family is a row of the native op table
(_native.OPS: one line of metal/mk_args.h's MK_KERNELS); backends cpu and mps call that row by
its name. Backends metal and sim call the family's encode(), which its declaration, beside
the public op that runs it (mpskern/ops/<op>.py: `class <Name>Family(Family)`), writes as one
call of its encoder (mpskern/backends/gpu/<family>.py) imported in that call: a program that
only runs on the CPU never loads the GPU path, as backends.get imports a backend only when
asked for. A subclass registers itself under its `name` (get(name) finds it)."""
_FAMILIES = {}


class Family:
    name = None     # the native row: mk_<name>_args, mk_cpu_<name>, mk_mps_<name>

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.name in _FAMILIES:
            raise TypeError(f"kernel family {cls.name!r} is declared twice ({cls.__qualname__})")
        _FAMILIES[cls.name] = cls()

    def encode(self, ctx, args, dtype, *arrays, config=None):
        """The family on a GPU backend: its encoder's (timing, record) (backends/gpu/context.py)."""
        raise NotImplementedError(f"kernel family {self.name!r} declares no GPU encoder")

    def spaces(self):
        """The configuration spaces its encoder module declares ({name: Space}; the tuning
        registry, mpskern/tuning/spaces.py, reads them on its first lookup). {}: its spaces
        are declared in tuning/tiles.py or rows.py."""
        return {}


def get(name):
    """The family registered as `name`, or None."""
    return _FAMILIES.get(name)


def families():
    """Every registered family, in the order the op modules declared them."""
    return list(_FAMILIES.values())
