"""The MSL lexer under the front-end's parser (mpskern/sim/parse.py): tokens, the words
MSL reserves for types and address spaces, bracket matching and comma splitting over tokens,
and the blanking that keeps offsets and lines put (comments, preprocessor lines, [[...]]
attributes become spaces; newlines stay).

    tokens = tokenize(text)        # [Token]: kind ("id", "num", "str", "punct"), text, pos, end
    match(tokens, i, "(", ")")     # index of the bracket closing tokens[i]
    split_params(tokens, po, pc)   # [a, b) token ranges of the comma-separated items
"""
import re
from dataclasses import dataclass

_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"[^\n]*$', re.M)
_PP_LINE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)    # continuation lines included
_ATTR = re.compile(r"\[\[(.*?)\]\]", re.S)
_TOKEN = re.compile(r"""
    (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<num>\.?\d(?:[eEpP][+-]|[\w.])*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<punct>::|->|\.\.\.|&&|\|\||[-+*/%&|^!=<>]=|\S)
""", re.X)

ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread", "threadgroup_imageblock",
                  "ray_data", "object_data")
SPACE_WORDS = frozenset(ADDRESS_SPACES)
# MSL's scalar and vector type names (and the few typedefs the standard library adds)
SCALARS = ("bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half",
           "float", "bfloat", "size_t", "ptrdiff_t", "int8_t", "uint8_t", "int16_t", "uint16_t",
           "int32_t", "uint32_t", "int64_t", "uint64_t", "unsigned", "signed", "void")
VECTOR_TYPES = frozenset(f"{p}{s}{n}" for s in SCALARS[:11] for n in (2, 3, 4)
                         for p in ("", "packed_"))


@dataclass
class Token:
    kind: str       # "id", "num", "str", "punct"
    text: str
    pos: int        # offset in the text
    end: int


def blank(s):
    """Spaces for s, keeping its newlines (offsets and line numbers stay put)."""
    return re.sub(r"[^\n]", " ", s)


_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)


def strip_comments(src):
    """src with its comments blanked (newlines kept), strings left alone: for source that
    has not been through the preprocessor."""
    return _COMMENT_OR_STRING.sub(lambda m: blank(m.group(0)) if m.group(0)[0] == "/" else m.group(0),
                                  src)


def blank_preprocessor(text):
    """text with its preprocessor lines (and their continuation lines) blanked."""
    return _PP_LINE.sub(lambda m: blank(m.group(0)), text)


def tokenize(text):
    """Tokens of text with attributes blanked ([[kernel]] -> kernel) and preprocessor
    lines skipped."""
    def attr(m):
        inner = m.group(1).strip()
        if inner == "kernel":
            return "kernel" + blank(m.group(0))[6:]
        return blank(m.group(0))
    code = blank_preprocessor(text)
    code = _ATTR.sub(attr, code)
    return [Token(m.lastgroup, m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(code)]


def match(tokens, i, open_t, close_t):
    """Index of the token closing the bracket tokens[i] (len(tokens) if unbalanced)."""
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j].text
        if t == open_t:
            depth += 1
        elif t == close_t:
            depth -= 1
            if depth == 0:
                return j
    return len(tokens)


def angle_close(tokens, i):
    """Index of the `>` closing the template bracket at tokens[i] (a `<`), skipping
    parenthesised expressions; len(tokens) when a ; { } comes first."""
    depth = 0
    j = i
    while j < len(tokens):
        t = tokens[j].text
        if t in ("(", "["):
            j = match(tokens, j, t, ")" if t == "(" else "]")
        elif t == "<":
            depth += 1
        elif t == ">":
            depth -= 1
            if depth == 0:
                return j
        elif t in (";", "{", "}"):
            return len(tokens)
        j += 1
    return len(tokens)


def split_params(tokens, po, pc):
    """Token index ranges [a, b) of the comma-separated items between tokens po and pc."""
    out, depth, start = [], 0, po + 1
    for j in range(po + 1, pc):
        t = tokens[j].text
        if t in ("(", "[", "{", "<"):
            depth += 1
        elif t in (")", "]", "}", ">"):
            depth -= 1
        elif t == "," and depth == 0:
            out.append((start, j))
            start = j + 1
    if start < pc:
        out.append((start, pc))
    return [(a, b) for a, b in out if b > a]


class LineMap:
    """(file, line) of an offset in preprocessed text, from the preprocessor's line markers
    (`# 12 "gemm.metal"`, `#line 12 "gemm.metal"`)."""

    def __init__(self, text):
        self.text = text
        self.marks = [(m.end() + 1, m.group(2), int(m.group(1))) for m in _MARKER.finditer(text)]

    def at(self, pos):
        start, fname, line = 0, "<source>", 1
        for off, f, ln in self.marks:
            if off > pos:
                break
            start, fname, line = off, f, ln
        return fname, line + self.text.count("\n", start, pos)

    def files(self):
        """The file names the markers mention (the source's own files)."""
        return {f for _o, f, _l in self.marks}
