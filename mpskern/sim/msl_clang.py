"""Address spaces type-checked by clang: the preprocessed MSL as C++ for OpenCL (-x clcpp)
over the simulator's own headers (objc/sim/include, which have an OpenCL branch), with
device/threadgroup/thread mapped to __global/__local/__private and `constant` to
  (a) const __global: every error is MSL's (wording says "device" for constant), and
  (b) OpenCL's __constant: only errors that mix constant with another named space, and its
      wording where (a) found the same line. Copying a struct out of constant memory is MSL
      but fails here through the implicit copy constructors' __generic references, hence (a).
Unqualified pointers and references, which MSL reads as `thread` and OpenCL as generic, get
an explicit `thread` first (helpers' parameters and local declarations of known types).
Errors inside a compatibility header are reported at the source's line that instantiated
them. Without a usable clang, typecheck() returns None and warns once.
"""
import os
import re
import subprocess
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from mpskern.paths import SIM_INCLUDE_DIR
from mpskern.sim import frontend, toolchain
from mpskern.sim import msl_tokens as T
from mpskern.sim import parse as P
from mpskern.sim.msl_rules import Finding


class StrictCheckWarning(UserWarning):
    """The strict check ran without its clang stage."""


@lru_cache(maxsize=None)
def clang():
    """(path, version, include dirs) of a clang that type-checks C++ for OpenCL with the
    C++ standard headers, or (None, why, None). $MPSKERN_CLANG names one ("none": off)."""
    env = os.environ.get("MPSKERN_CLANG")
    if env and env.lower() in ("0", "none", "off"):
        return None, "MPSKERN_CLANG=%s" % env, None
    cands = [env] if env else toolchain.versioned("clang")
    for path, ver in toolchain.found(cands):
        try:        # its C++ include directories
            r = subprocess.run([path, "-x", "c++", "-E", "-v", "-"], input="", capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        dirs, on = [], False
        for ln in r.stderr.splitlines():
            if ln.startswith("#include <...> search starts here"):
                on = True
            elif ln.startswith("End of search list"):
                on = False
            elif on:
                dirs.append(ln.strip().split(" (framework directory)")[0])
        probe = _run_clang(path, dirs, "#include <metal_stdlib>\nint x;\n")
        if probe.returncode == 0:
            return path, ver, tuple(dirs)
        why = f"{path} cannot type-check C++ for OpenCL here: " + \
            (probe.stderr.strip().splitlines() or ["?"])[0]
        return None, why, None
    return None, "no clang found (tried %s)" % ", ".join(cands), None


def _run_clang(path, dirs, text):
    cmd = [path, "-x", "clcpp", "-cl-std=clc++2021", "-cl-no-stdinc", "-fsyntax-only",
           "-Xclang", "-cl-ext=+cl_khr_fp16", "-fno-caret-diagnostics", "-fno-color-diagnostics",
           "-fno-diagnostics-show-option", "-ferror-limit=0", "-w", "-I", SIM_INCLUDE_DIR,
           "-D__METAL_VERSION__=310", "-D__MPSKERN_SIM__=1", "-D__HAVE_SIMDGROUP_MATRIX__=1"]
    for d in dirs:
        cmd += ["-isystem", d]
    try:
        return subprocess.run(cmd + ["-"], input=text, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return subprocess.CompletedProcess(cmd, 1, "", f"cannot run {path}: {e}")


_warned = []


def typecheck_available():
    """(ok, why): whether stage 3 (clang) runs."""
    path, why, _ = clang()
    return path is not None, why


def _note_missing_clang():
    if not _warned:
        _warned.append(True)
        _, why, _ = clang()
        warnings.warn(f"mpskern: the strict MSL check runs without its address-space stage ({why}); "
                      f"install clang (14 or newer) so the simulator refuses what Apple's compiler "
                      f"refuses", StrictCheckWarning, stacklevel=3)


def _thread_insertions(prog):
    """Offsets where `thread ` goes: before unqualified pointer/reference parameters of the
    source's functions (not kernels: rule_kernel_params reports those) and before local
    pointer/reference declarations of known types -- MSL reads both as thread."""
    toks = prog.tokens
    at = set()
    for f in prog.functions:
        if f.is_kernel:
            continue
        for span in f.params:
            ts, words = P.param_words(prog, span)
            if ts and P.is_pointer_or_ref(words) and not T.SPACE_WORDS.intersection(words) and \
                    words[0] not in ("typename", "class", "template"):
                at.add(toks[ts[0]].pos)
    types = set(T.SCALARS) | T.VECTOR_TYPES | prog.type_names
    for st in prog.statements:
        if st.scope != "body":
            continue
        j = st.first
        while j <= st.last and toks[j].text in ("const", "volatile"):
            j += 1
        if j > st.last or toks[j].text not in types:
            continue
        j += 1
        if j <= st.last and toks[j].text == "<":
            j = T.angle_close(toks, j) + 1
        while j <= st.last and toks[j].text == "const":
            j += 1
        if j > st.last or toks[j].text not in ("*", "&", "&&"):
            continue
        while j <= st.last and toks[j].text in ("*", "&", "&&", "const"):
            j += 1
        if j <= st.last and toks[j].kind == "id" and j + 1 <= st.last + 1:
            words = [toks[k].text for k in range(st.first, j)]
            if not T.SPACE_WORDS.intersection(words):
                at.add(toks[st.first].pos)
    return sorted(at)


def clcpp_source(pre, prog, constant_as):
    """The preprocessed MSL as C++ for OpenCL: `thread` made explicit, then the simulator's
    own rewrites (frontend.rewrite) with `constant` kept and #defined as `constant_as`.
    Line numbers are unchanged."""
    text = pre
    for pos in reversed(_thread_insertions(prog)):
        text = text[:pos] + "thread " + text[pos:]
    return ("#include <metal_stdlib>\nusing namespace metal;\n"
            f"#define constant {constant_as}\n" + frontend.rewrite(text, constant=None))


_DIAG = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): "
                   r"(?P<msg>.*)$")
_MSL_WORDS = ((r"(\*|&)\s*__private\b", r"\1"),
              (r"__global\b", "device"), (r"__local\b", "threadgroup"), (r"__private\b", "thread"),
              (r"__constant\b", "constant"), (r"__generic\b", "thread"), (r"\bmetal::", ""))


def _msl_words(msg):
    for pat, rep in _MSL_WORDS:
        msg = re.sub(pat, rep, msg)
    return msg


def _diagnostics(stderr, user_files):
    """(file, line, message, full text) per clang error, located at the innermost line of
    the source's own files (an error inside a compatibility header points at the kernel's
    line that instantiated it)."""
    groups = []
    for ln in stderr.splitlines():
        m = _DIAG.match(ln)
        if not m:
            continue
        if m.group("sev") in ("error", "fatal error"):
            groups.append([m])
        elif m.group("sev") == "note" and groups:
            groups[-1].append(m)
        elif m.group("sev") == "warning":
            groups.append(None)
    out = []
    for g in groups:
        if not g:
            continue
        loc = next((x for x in g if x.group("file") in user_files), g[0])
        msg = g[0].group("msg")
        why = next((x.group("msg") for x in g[1:] if "not viable:" in x.group("msg") or
                    "candidate template ignored" in x.group("msg")), None)
        if why:
            msg += " (" + why.split(": ", 1)[-1] + ")"
        out.append((loc.group("file"), int(loc.group("line")), _msl_words(msg),
                    " ".join(x.group("msg") for x in g)))
    return out


_AS_PHRASE = re.compile(r"address space '__(constant|global|local|private)' as a pointer to address "
                        r"space '__(constant|global|local|private)'")
_QUOTED = re.compile(r"'([^']*)'")


def _mixes_constant(text):
    """Whether clang's text is about a pointer or reference converted between constant and
    another named space (device, threadgroup, thread) -- not about copying a value out of
    constant memory (which OpenCL C++ fails through __generic and MSL allows)."""
    for m in _AS_PHRASE.finditer(text):
        if "constant" in m.groups() and m.group(1) != m.group(2):
            return True
    quoted = [q for q in _QUOTED.findall(text) if "*" in q or "&" in q]

    def pointee(q, space):
        head = re.split(r"[*&]", q, 1)[0]      # the pointee's qualifiers, not the pointer's
        return space in head
    has_c = any(pointee(q, "__constant") for q in quoted)
    has_n = any(pointee(q, sp) for q in quoted for sp in ("__global", "__local", "__private"))
    return has_c and has_n


def typecheck(pre, prog=None):
    """Address-space findings from clang, or None when clang is not available."""
    path, _why, dirs = clang()
    if path is None:
        _note_missing_clang()
        return None
    prog = prog or P.parse(pre)
    user = prog.files()

    def by_line(r):
        out = {}
        for f, ln, msg, full in _diagnostics(r.stderr, user):
            out.setdefault((f, ln), (msg, full))
        return out

    # (a) constant as const device: every error is MSL's, but messages say "device";
    # (b) constant as OpenCL's __constant: its own errors only where they mix constant with
    # another named space (copying a constant struct, valid MSL, fails there through the
    # implicit copy constructors' __generic references) -- and its wording, which names
    # constant as constant, where it reports an error (a) found too.
    with ThreadPoolExecutor(2) as pool:       # the two runs at once
        runs = [pool.submit(_run_clang, path, dirs, clcpp_source(pre, prog, c))
                for c in ("const __global", "__constant")]
        a, b = (by_line(r.result()) for r in runs)
    found = []
    for key, (msg, _full) in a.items():
        bm = b.get(key)
        if bm and "__generic" not in bm[1]:
            msg = bm[0]
        found.append(Finding(key[0], key[1], msg))
    for key, (msg, full) in b.items():
        if key not in a and _mixes_constant(full):
            found.append(Finding(key[0], key[1], msg))
    return found
