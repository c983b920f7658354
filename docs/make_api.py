"""Write docs/api.md, the API reference, from mpskern's docstrings (mpskern/_doc.py).

    python docs/make_api.py            # (re)write docs/api.md
    python docs/make_api.py --check    # exit 1 if docs/api.md is stale (what the tests check)
"""
import argparse
import importlib.machinery
import pathlib
import sys

API = pathlib.Path(__file__).resolve().parent / "api.md"
ROOT = API.parent.parent
# a checkout built in place: its mpskern (a compiled extension, not _native.pyx, else the
# installed mpskern: a fresh clone after `pip install .` has only the sources)
if any((ROOT / "mpskern" / f"_native{s}").exists() for s in importlib.machinery.EXTENSION_SUFFIXES):
    sys.path.insert(0, str(ROOT))

import mpskern  # noqa: E402
from mpskern import _doc  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    a = ap.parse_args(argv)
    text = _doc.render(mpskern)
    if a.check:
        ok = API.exists() and API.read_text(encoding="utf-8") == text
        print(f"{API.name}: {'up to date' if ok else 'stale: run python docs/make_api.py'}")
        return 0 if ok else 1
    API.write_text(text, encoding="utf-8")
    print(f"wrote {API} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
