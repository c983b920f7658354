#!/usr/bin/env python3
"""Compile and link the macOS shim (objc/*.m, objc/*.c) against a real macOS SDK, from any
machine with clang and lld: nothing runs, but every Metal / MPS / MPSGraph selector, type
and enum the shim uses is checked against Apple's own headers (-Wall -Wextra -Werror), and
every symbol it needs must exist in the SDK's framework stubs (docs/shim-check.md).

    python objc/check_shim.py SDK                 # arm64-apple-macos12, compile + link
    python objc/check_shim.py SDK --arch x86_64   # Intel Macs (universal2 Pythons build it)
    python objc/check_shim.py SDK --print-root    # the unpacked SDK root, for other tools

SDK is a macOS SDK folder (holding System/Library/Frameworks/Metal.framework) or a git
repository holding one under root/ (e.g. a clone of the public hexops-graveyard/
sdk-macos-12.0), which is unpacked once under MPSKERN_SDK_CACHE (default: a folder in the
system's temporary directory). Needs clang >= 14 and ld64.lld (Debian: clang-19 lld-19).
Exit status 0 when the shim compiles and links, 1 when it does not, 2 for a usage problem.
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_OS = "macos12"     # setup.py's MACOS_MIN: the shim's deployment target
FRAMEWORKS = ("Foundation", "Metal", "MetalPerformanceShaders", "MetalPerformanceShadersGraph")


class Problem(Exception):
    """A usage problem (exit status 2): no SDK, no compiler."""


def _tool(names, what):
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    raise Problem(f"no {what} found (tried {', '.join(names)}); install clang and lld "
                  "(Debian/Ubuntu: apt-get install clang-19 lld-19)")


def clang():
    cc = _tool([f"clang-{v}" for v in range(30, 13, -1)] + ["clang"], "clang >= 14")
    out = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version (\d+)", out)
    if not m or int(m.group(1)) < 14:
        raise Problem(f"{cc} is clang {m.group(1) if m else '?'}; the shim needs clang >= 14")
    return cc


def sdk_root(sdk):
    """The SDK's root folder: `sdk` itself, or its git tree's root/ unpacked once."""
    p = Path(sdk)
    if (p / "System/Library/Frameworks/Metal.framework").is_dir():
        return p
    if not p.exists():
        raise Problem(f"no SDK at {sdk}")
    git_dir = p if (p / "HEAD").is_file() and (p / "objects").is_dir() else p / ".git"
    if not git_dir.exists():
        raise Problem(f"{sdk} holds no System/Library/Frameworks/Metal.framework and is not a "
                      "git repository of an SDK")
    head = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode:
        raise Problem(f"{git_dir}: {head.stderr.strip()}")
    cache = Path(os.environ.get("MPSKERN_SDK_CACHE") or Path(tempfile.gettempdir()) /
                 "mpskern-macos-sdk") / hashlib.sha1(head.stdout.strip().encode()).hexdigest()[:16]
    root = cache / "root"
    if not (root / "System/Library/Frameworks/Metal.framework").is_dir():
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="unpack-", dir=cache.parent))
        archive = subprocess.Popen(["git", "--git-dir", str(git_dir), "archive", "HEAD", "root"],
                                   stdout=subprocess.PIPE)
        with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
            if hasattr(tarfile, "tar_filter"):       # Python >= 3.11.4: no absolute paths
                tar.extractall(tmp, filter="tar")
            else:
                tar.extractall(tmp)
        if archive.wait():
            shutil.rmtree(tmp, ignore_errors=True)
            raise Problem(f"git archive of {git_dir} failed (no root/ folder in its tree?)")
        shutil.rmtree(cache, ignore_errors=True)
        try:
            os.replace(tmp, cache)               # a concurrent unpacker may have won: fine
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    if not (root / "System/Library/Frameworks/Metal.framework").is_dir():
        raise Problem(f"{sdk}: its tree's root/ holds no System/Library/Frameworks/Metal.framework")
    return root


def check(sdk, arch="arm64", link=True, jobs=None):
    """Compile every objc/*.m and objc/*.c for `arch` against the SDK and (link) link them as
    one dynamic library. Returns (ok, report lines)."""
    root = sdk_root(sdk)
    cc = clang()
    fw = root / "System/Library/Frameworks"
    target = f"{arch}-apple-{TARGET_OS}"
    flags = ["-target", target, "-isysroot", str(root), f"-F{fw}", "-fobjc-arc", "-Wall",
             "-Wextra", "-Werror", "-Wno-unused-parameter", f"-I{ROOT / 'objc'}",
             f"-I{ROOT / 'metal'}"]
    srcs = sorted(ROOT.glob("objc/*.m")) + sorted(ROOT.glob("objc/*.c"))
    if not srcs:
        raise Problem(f"no objc/*.m under {ROOT}")
    out = Path(tempfile.mkdtemp(prefix="mpskern-shim-"))
    try:
        def compile_one(src):
            obj = out / (src.name + ".o")
            r = subprocess.run([cc] + flags + ["-c", str(src), "-o", str(obj)],
                               capture_output=True, text=True)
            return src, obj, r
        with ThreadPoolExecutor(jobs or os.cpu_count() or 2) as pool:
            results = list(pool.map(compile_one, srcs))
        failed = [(s, r) for s, _, r in results if r.returncode]
        lines = [f"{s.relative_to(ROOT)}: compile failed\n{r.stderr.rstrip()}" for s, r in failed]
        if failed:
            return False, lines
        if link:
            # clang's Darwin driver passes ld64's flags only to a linker it runs as
            # -fuse-ld=lld, looked up as ld64.lld beside clang, then in -B folders and PATH
            search = []
            if not (Path(os.path.realpath(cc)).parent / "ld64.lld").exists() and \
                    not shutil.which("ld64.lld"):
                ld = _tool([f"ld64.lld-{v}" for v in range(30, 13, -1)], "ld64.lld")
                (out / "ld64.lld").symlink_to(ld)
                search = ["-B", str(out)]
            sub = fw / "MetalPerformanceShaders.framework/Frameworks"
            subs = [a for d in sorted(sub.glob("*.framework")) for a in ("-framework", d.stem)]
            lib = out / "libmpskern_shim.dylib"
            cmd = ([cc, "-target", target, "-isysroot", str(root), "-fuse-ld=lld"] + search +
                   ["-dynamiclib", "-o", str(lib)] + [str(o) for _, o, _ in results] +
                   [f"-F{fw}", f"-F{sub}"] +
                   [a for f in FRAMEWORKS for a in ("-framework", f)] + subs + ["-lobjc"])
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                return False, [f"link failed (a symbol the SDK does not export?)\n"
                               f"{r.stderr.rstrip()}"]
            lines.append(f"linked {lib.name} for {target} ({lib.stat().st_size} bytes)")
        lines.append(f"ok: {len(srcs)} file(s) compiled for {target} with -Werror"
                     + (" and linked" if link else ""))
        return True, lines
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sdk", nargs="?", default=os.environ.get("MPSKERN_MACOS_SDK"),
                    help="macOS SDK folder or a git repository of one [MPSKERN_MACOS_SDK]")
    ap.add_argument("--arch", default="arm64", choices=["arm64", "x86_64"])
    ap.add_argument("--no-link", action="store_true", help="compile only")
    ap.add_argument("--print-root", action="store_true",
                    help="print the SDK root folder (unpacking it if needed) and exit")
    a = ap.parse_args(argv)
    try:
        if not a.sdk:
            raise Problem("give the SDK (a folder or a git repository), or set MPSKERN_MACOS_SDK")
        if a.print_root:
            print(sdk_root(a.sdk))
            return 0
        ok, lines = check(a.sdk, a.arch, link=not a.no_link)
    except Problem as e:
        print(f"check_shim: {e}", file=sys.stderr)
        return 2
    for line in lines:
        print(f"check_shim: {line}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
