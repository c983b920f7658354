"""The API reference from the docstrings: what every public op's docstring shares
(backend=, out=, the dtype rule, the errors) is written once here and completed into each
op's __doc__ (so help() shows it too); render() makes docs/api.md (`python
docs/make_api.py`), and tests/test_api_docs.py checks that every public name is in it,
documented, and that each example runs.

A docstring: a summary paragraph, then numpydoc-style sections ("Parameters", "Returns",
"Raises", "Dtypes", "Example", each underlined with dashes); a parameter is `name : type`
with its description indented below. Examples are code, indented, with `np` and `mk`
(numpy, mpskern) imported."""
import inspect
import re
import textwrap

ACTIVATION_PARAMETER = '''\
activation : str or None
    None (default), "relu", "gelu" (erf), "gelu_tanh" or "silu", applied last and
    fused into the kernel's output pass.
'''
# what the pooling ops share: their input and window (an op whose signature has kernel_size and
# whose docstring leaves it out) and their result (a pooling op's docstring without Returns)
POOL_PARAMETERS = '''\
x : array (N, C, H, W) or (C, H, W)
    The input, NCHW.
kernel_size : int or (int, int)
    The window.
stride : int, (int, int) or None
    None (default): kernel_size.
padding : int or (int, int)
    At most kernel_size // 2 on each side.
'''
POOL_RETURNS = '''\
numpy.ndarray
    (N, C, P, Q) (or (C, P, Q)) in x's dtype.
'''
OP_PARAMETERS = '''\
backend : str
    "auto" (default: "metal" where available, else "cpu"), "cpu", "metal", "mps" or
    "sim"; an unavailable one raises BackendUnavailable saying why.
out : numpy.ndarray, optional
    Where to write the result (the result's shape and dtype, writable); returned. It
    may overlap the inputs.
'''
OP_SECTIONS = '''\
Dtypes
------
float32 and float16 (float16 accumulates in float32). The operands share one dtype,
which the result has; per-channel and per-feature vectors (biases, norm weights,
running statistics) may be float32 with float16 operands. Inputs may be any numpy
array (non-contiguous ones are copied to C order) or any array implementing DLPack
(torch CPU tensors, JAX, MLX), read without a copy where possible.

Raises
------
TypeError
    A dtype other than float32/float16 (float64: Metal has no double), operands of
    different dtypes, a list or masked array: the message says the cast to use.
ValueError
    Wrong ranks, mismatched shapes, out-of-range options, or a bad out=: the message
    names the argument, the shapes and the fix.
BackendUnavailable
    backend= names a backend this machine cannot run.
Unsupported
    A valid call this backend cannot run (a documented limitation); the message says
    what to use instead.
'''
HEADING = re.compile(r"^(\w[\w ]*)\n-+\n", re.M)


def sections(doc):
    """{"summary": text, "Parameters": text, ...} of a cleaned docstring."""
    doc = inspect.cleandoc(doc or "")
    parts = HEADING.split(doc)
    out = {"summary": parts[0].strip()}
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = body.rstrip()
    return out


def parameters(text):
    """The names a Parameters section describes ("a, b : array" names a and b)."""
    names = []
    for line in text.splitlines():
        if line and not line[0].isspace() and " : " in line:
            names += [n.strip() for n in line.split(" : ")[0].split(",")]
    return names


def complete_op(fn):
    """Add the shared parameters (the pooling ops' input and window, activation= where the
    op has it, backend=, out=), a pooling op's Returns and the Dtypes and Raises sections to
    an op's docstring (once)."""
    doc = inspect.cleandoc(fn.__doc__ or "")
    if "\nbackend : str" in doc:
        return fn
    signature = inspect.signature(fn).parameters
    if "kernel_size" in signature and "\nkernel_size : " not in doc:
        head, sep, rest = doc.partition("\nParameters\n----------\n")
        doc = head + sep + POOL_PARAMETERS + rest
    pooling = "kernel_size" in signature or "output_size" in signature
    if pooling and "\nReturns\n-------\n" not in doc:
        head, sep, example = doc.partition("\nExample\n-------\n")
        doc = head.rstrip() + "\n\nReturns\n-------\n" + POOL_RETURNS + "\n" + sep.lstrip("\n") + example
    head, sep, rest = doc.partition("\nReturns\n-------\n")
    if not sep:
        raise ValueError(f"{fn.__name__}'s docstring has no Returns section")
    shared = OP_PARAMETERS
    if "activation" in signature:
        shared = ACTIVATION_PARAMETER + shared
    doc = head.rstrip() + "\n" + shared + "\nReturns\n-------\n" + rest
    head, sep, example = doc.partition("\nExample\n-------\n")
    fn.__doc__ = head.rstrip() + "\n\n" + OP_SECTIONS + (sep + example if sep else "")
    return fn


# the reference's chapters: every public name of mpskern is in exactly one. The ops are the op
# table's (mpskern/ops/__init__.py TABLE, in its order): a new op is listed there only.
OTHER_GROUPS = [
    ("Devices, threads and memory", ["devices", "Device", "get_num_threads", "set_num_threads",
                                     "empty"]),
    ("Your own Metal kernels", ["metal_kernel", "Kernel"]),
    ("Timing your own code", ["benchmark", "BenchmarkResult"]),
    ("Errors", ["MpskernError", "BackendUnavailable", "Unsupported", "KernelError",
                "KernelCompileError", "KernelCheckError"]),
]


def groups():
    """[(title, public names)]: the op table's ops first, then OTHER_GROUPS."""
    from mpskern.ops import TABLE     # (mpskern.ops imports this module first)
    return [("Ops", list(TABLE)), *OTHER_GROUPS]


def public_names(module):
    """The names a user of `module` sees: not private, not a submodule."""
    return sorted(n for n in dir(module) if not n.startswith("_")
                  and not inspect.ismodule(getattr(module, n)))


def _signature(name, obj):
    try:
        return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return name


def _section_md(name, body):
    if name == "Example":
        return "**Example**\n\n```python\nimport numpy as np\nimport mpskern as mk\n\n" + \
            textwrap.dedent(body).strip("\n") + "\n```\n"
    if name in ("Parameters", "Raises"):
        items, cur = [], None
        for line in body.splitlines():
            if line and not line[0].isspace():
                left, _, right = line.partition(" : ")
                cur = [f"- `{left.strip()}`" + (f" ({right.strip()})" if right else "") + ":"]
                items.append(cur)
            elif cur is not None and line.strip():
                cur.append(line.strip())
        return f"**{name}**\n\n" + "\n".join(" ".join(i) for i in items) + "\n"
    if name == "Returns":
        lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
        return f"**Returns** `{lines[0]}`" + (": " + " ".join(lines[1:]) if lines[1:] else "") + "\n"
    return f"**{name}**\n\n" + "\n".join(ln.strip() for ln in body.splitlines()) + "\n"


def render(module):
    """docs/api.md's text for `module` (mpskern)."""
    out = ["# API reference", "",
           "Generated from the docstrings by `python docs/make_api.py` (do not edit by hand;",
           "tests/test_api_docs.py fails when this file is stale). `help(mpskern.NAME)` shows",
           "the same text.", ""]
    for title, names in groups():
        out += [f"## {title}", ""]
        for n in names:
            obj = getattr(module, n)
            out += [f"### {n}", "", "```", _signature(f"mpskern.{n}", obj), "```", ""]
            s = sections(obj.__doc__)
            out += [s["summary"], ""]
            for name, body in s.items():
                if name != "summary":
                    out += [_section_md(name, body)]
            if inspect.isclass(obj) and n == "Kernel":
                call = obj.__call__
                out += ["#### Kernel.__call__", "", "```",
                        _signature("Kernel.__call__", call), "```", ""]
                cs = sections(call.__doc__)
                out += [cs["summary"], ""] + [_section_md(k, v) for k, v in cs.items()
                                               if k != "summary"]
    return "\n".join(out).rstrip() + "\n"
