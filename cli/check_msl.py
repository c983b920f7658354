"""`mpskern check-msl FILE.metal...`: the simulator's strict MSL check on files, for kernel
writers (mpskern/sim/strict.py): findings as `file:line: message`, exit status 1 if any."""
import os
import re
import warnings
from typing import List

import typer

from mpskern._errors import KernelCompileError
from mpskern.cli.app import app

_DIAG = re.compile(r"^(.*?):(\d+):(?:\d+:)? (?:fatal )?error: (.*)$")   # the preprocessor's errors


def _macros(defines):
    out = {}
    for d in defines:
        name, _, value = d.partition("=")
        if not name.isidentifier():
            raise typer.BadParameter(f"-D {d!r}: expected NAME or NAME=VALUE", param_hint="'-D'")
        out[name] = value if _ else "1"
    return out


def _source(path):
    """The file with its "..." includes (beside it) inlined, as the simulator gets it."""
    from mpskern.paths import inline_includes
    directory, name = os.path.split(path)

    def label(fname):
        return path if fname == name else os.path.join(directory, fname)
    return inline_includes(directory or ".", name, label)


@app.command("check-msl")
def check_msl(files: List[str] = typer.Argument(..., metavar="FILE.metal...",
                                                help="MSL sources to check."),
              define: List[str] = typer.Option([], "-D", "--define", metavar="NAME[=VALUE]",
                                               help="A preprocessor macro (repeatable), e.g. "
                                                    "-D MK_BM=64 for a tile parameter.")):
    """Check MSL sources as strictly as Apple's compiler: address spaces, MSL's language
    rules, includes. Prints `file:line: message` per finding; exit status 1 if any."""
    from mpskern.sim import compiler, strict
    macros = _macros(define)
    ok, why = compiler.available()
    if not ok:
        typer.echo(f"check-msl: {why}", err=True)
        raise typer.Exit(2)
    clang_ok, clang_why = strict.typecheck_available()
    if not clang_ok:
        typer.echo(f"check-msl: address spaces are not type-checked ({clang_why}); only the "
                   f"front-end's rules run. Install clang 14 or newer for the full check.", err=True)
    bad = 0
    for path in files:
        try:
            src = _source(path)
        except (OSError, UnicodeDecodeError) as e:     # a binary file: one line, no traceback
            why = f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})" \
                if isinstance(e, UnicodeDecodeError) else e.strerror or e
            typer.echo(f"{path}: cannot read: {why}")
            bad += 1
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", strict.StrictCheckWarning)   # said above
                found = strict.check_source(src, macros, origin=path)
        except KernelCompileError as e:      # the preprocessor refused it (#error, syntax)
            lines = [f"{m.group(1)}:{m.group(2)}: {m.group(3)}" for m in map(_DIAG.match, str(e).splitlines())
                     if m] or [f"{path}: {e}"]
            typer.echo("\n".join(lines))
            bad += 1
            continue
        for f in found:
            typer.echo(str(f))
        bad += bool(found)
    n = len(files)
    typer.echo(f"check-msl: {n - bad} of {n} file{'s' if n != 1 else ''} passed"
               + ("" if clang_ok else " (front-end rules only)"), err=True)
    if bad:
        raise typer.Exit(1)
