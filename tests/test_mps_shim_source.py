"""The MPSGraph shim (objc/mk_mps_*.m) caches one graph per op arguments
(mk_mps_graph_get); a call that finds its graph should allocate no Objective-C objects
for it. An MPSShape (MK_SHAPE / mk_mps_shape: an NSArray of NSNumbers) belongs where a
graph is built: in mk_mps_graph_get's build block (`^MKGraph *{`), a function returning an
MKGraph, or a function or block handed the MPSGraph. run_affine (mk_mps_norm.m) took its shapes as NSArrays made by every
layer_norm/rms_norm/group_norm call, hit or miss. Static: no Mac here."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPE = re.compile(r"\b(?:MK_SHAPE|mk_mps_shape)\s*\(")
# a build block, a function returning a graph (a builder), a function or block given one
BUILDS = re.compile(r"\^\s*MKGraph\s*\*|\bMKGraph\s*\*\s*\w+\s*\(|\bMPSGraph\s*\*\s*\w+\s*[,)]")


def misplaced_shapes(text):
    """(line, text) of each MPSShape made outside a graph-building scope."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    opens, scopes = [], {}
    for i, c in enumerate(text):
        if c == "{":
            opens.append(i)
        elif c == "}" and opens:
            scopes[opens.pop()] = i
    bad = []
    for m in SHAPE.finditer(text):
        if text.rfind("\n#define", 0, m.start()) > text.rfind("\n", 0, m.start()) - 1:
            continue                                     # the macro's own definition
        inside = [o for o, e in scopes.items() if o < m.start() < e]
        if not inside:
            continue                                     # a declaration at file scope
        heads = [text[max(text.rfind(";", 0, o), text.rfind("}", 0, o)) + 1:o] for o in inside]
        if not any(BUILDS.search(h) for h in heads):
            ln = text.count("\n", 0, m.start()) + 1
            bad.append((ln, text.splitlines()[ln - 1].strip()))
    return bad


def test_shapes_are_made_only_where_a_graph_is_built():
    files = sorted(ROOT.glob("objc/mk_mps*.m"))
    assert len(files) >= 8, files
    found = {f.name: misplaced_shapes(f.read_text()) for f in files}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_the_check_finds_a_shape_made_per_call():
    planted = """
static mk_status run(mk_device *d, const void *a) {
    MKGraph *g = mk_mps_graph_get(d, "op", 0, a, 8, ^MKGraph *{
        MPSGraph *G = [MPSGraph new];
        return mk_mps_graph_of(G, @[[G placeholderWithShape:MK_SHAPE(1, 2) dataType:dt name:nil]], @[]);
    });
    return helper(d, MK_SHAPE(3, 4));
}
static MPSGraphTensor *ok(MPSGraph *G, int n) { return [G reshapeTensor:t withShape:MK_SHAPE(n) name:nil]; }
"""
    assert [ln for ln, _ in misplaced_shapes(planted)] == [7]
