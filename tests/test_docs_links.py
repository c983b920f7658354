"""The docs point only at what a user of the repository has: every relative link and every
`../` path in README.md, DEVELOPERS.md, results/README.md and docs/*.md resolves to a file or
folder inside the checkout (no sibling folders of the team's machines, no absolute paths of
them), and every `#anchor` of a link names a heading of its target."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "DEVELOPERS.md", ROOT / "results" / "README.md"] + \
    sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
UP_PATH = re.compile(r"(?<![\w\]\(./])((?:\.\./)+[\w./-]+)")
ABSOLUTE = re.compile(r"(?<![\w.:/])/(?:work|home|Users)/[\w./-]+")


def _anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def findings(doc, text):
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        where = f"{doc.relative_to(ROOT)}:{n}"
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue                                   # http(s), mailto: fine
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if ROOT not in dest.parents and dest != ROOT:
                out.append(f"{where}: link {target} leaves the repository")
            elif not dest.exists():
                out.append(f"{where}: link {target}: no such file")
            elif anchor and dest.suffix == ".md":
                heads = [_anchor(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)]
                if anchor not in heads:
                    out.append(f"{where}: link {target}: no heading #{anchor} in {path or doc.name}")
        for path in UP_PATH.findall(LINK.sub("]()", line)):
            # from the doc's folder, or from the checkout root (where commands are run)
            dests = [(base / path).resolve() for base in (doc.parent, ROOT)]
            if not any(ROOT in d.parents and d.exists() for d in dests):
                out.append(f"{where}: {path} is outside the repository (or missing)")
        for path in ABSOLUTE.findall(line):
            out.append(f"{where}: {path} is a path of one machine, not of the repository")
    return out


def test_docs_point_only_inside_the_repository():
    found = [f for d in DOCS for f in findings(d, d.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_the_check_finds_what_it_is_for():
    doc = ROOT / "docs" / "x.md"
    planted = ("Read ../shared/DESIGN.md first.\n"
               "Run `../shared/tools/check-objc SDK` from the root.\n"
               "See [design](../../shared/DESIGN.md) and [gone](nothing.md).\n"
               "[anchor](simulator.md#no-such-heading) and `cd /work/main`.\n"
               "Fine: [ok](design.md), [readme](../README.md#quick-start), https://x.org/a/../b\n")
    got = findings(doc, planted)
    assert len(got) == 6, got
    for needle in ("../shared/DESIGN.md is outside", "check-objc is outside", "leaves the repository",
                   "nothing.md: no such file", "no heading #no-such-heading", "/work/main"):
        assert any(needle in g for g in got), (needle, got)
