"""A small MSL parser over *preprocessed* source: tokens, scopes, functions, statements.

Enough structure for the strict checks (mpskern/sim/strict.py) and the kernel lint
(tests/test_metal_lint.py) to ask "is this token in a kernel's body, a helper's body or at
program scope", "which functions call which", "what are this function's parameters" --
not a C++ parser: it knows braces, parentheses, statements and declarations' heads.

    prog = parse(preprocessed_text)
    prog.functions          # [Function]: name, params (text spans), body span, is_kernel
    prog.statements         # [Statement]: scope ("program", "class", "body"), token range
    prog.where(pos)         # (file, line) of an offset (line markers honoured)
    prog.function_at(pos)   # the Function whose body holds pos, or None

The tokens come from mpskern/sim/msl_tokens.py: attributes [[...]] are blanked before
tokenising ([[kernel]] counts as `kernel`); preprocessor lines (line markers, #pragma) are
skipped. Offsets are into the text given.
"""
from dataclasses import dataclass, field

from mpskern.sim.msl_tokens import SCALARS, LineMap, angle_close, match, split_params, tokenize

_CLASS_KEYS = ("struct", "class", "union", "enum")
_NOT_A_CALL = frozenset(("if", "for", "while", "switch", "return", "sizeof", "alignof",
                         "alignas", "decltype", "noexcept", "static_assert", "static_cast",
                         "reinterpret_cast", "const_cast", "dynamic_cast", "catch", "throw",
                         "__attribute__", "defined", "operator", "new", "delete", "typeid"))


@dataclass
class Function:
    name: str                  # unqualified (operator names as "operator+")
    name_tok: int              # token index of the name
    params: list               # (start, end) offsets of each parameter's text
    body: tuple = None         # (first token index inside, index of the closing brace)
    is_kernel: bool = False
    is_template: bool = False
    scope: str = "program"     # "program" or "class" (a member function)


@dataclass
class Statement:
    scope: str                 # "program", "class" or "body"
    first: int                 # token indices [first, last]
    last: int
    function: object = None    # the Function whose body holds it ("body")


@dataclass
class Program:
    text: str
    tokens: list
    functions: list = field(default_factory=list)
    statements: list = field(default_factory=list)
    type_names: set = field(default_factory=set)   # structs, typedefs, template parameters
    lines: LineMap = None
    _body_of: list = field(default_factory=list)   # per token: Function or None

    def where(self, pos):
        """(file, line) of offset pos, from the preprocessor's line markers."""
        return self.lines.at(pos)

    def function_at(self, tok):
        """The Function whose body holds token index tok (None at program/class scope)."""
        return self._body_of[tok]

    def files(self):
        """The file names the line markers mention (the source's own files)."""
        return self.lines.files()

    def param_tokens(self, span):
        """Token indices of a parameter's text span."""
        a, b = span
        return [i for i, t in enumerate(self.tokens) if a <= t.pos < b]


_SKIP_PARENS = frozenset(("decltype", "alignas", "__attribute__", "noexcept", "sizeof", "alignof",
                          "__declspec"))


def function_head(tokens, first, end):
    """(name index, '(' index, ')' index) when tokens[first:end] is the head of a function
    (definition: tokens[end] is its `{`; declaration: its `;`), else None."""
    j = first
    while j < end:
        t = tokens[j].text
        if t == "template" and j + 1 < end and tokens[j + 1].text == "<":
            j = angle_close(tokens, j + 1) + 1
            continue
        if t == "=":
            return None                   # an initialiser: T x = f(...)
        if t == "(":
            prev = tokens[j - 1] if j > first else None
            if prev is None or prev.text in _SKIP_PARENS:
                j = match(tokens, j, "(", ")") + 1
                continue
            po = j
            if prev.text == "operator" and j + 1 < end and tokens[j + 1].text == ")":
                po = j + 2                # operator()(...)
                if po >= end or tokens[po].text != "(":
                    return None
                name = j - 1
            elif prev.text == ">":        # a template-id: f<T>(...)
                k, depth = j - 1, 0
                while k >= first:
                    if tokens[k].text == ">":
                        depth += 1
                    elif tokens[k].text == "<":
                        depth -= 1
                        if depth == 0:
                            break
                    k -= 1
                name = k - 1
            else:
                name = j - 1
            for back in (0, 1, 2, 3):     # operator+ / operator[] / operator== / operator T
                if name - back >= first and tokens[name - back].text == "operator":
                    name -= back
                    break
            if name < first or tokens[name].kind != "id" or tokens[name].text in SCALARS or \
                    tokens[name].text in _NOT_A_CALL - {"operator"}:
                return None
            pc = match(tokens, po, "(", ")")
            return (name, po, pc) if pc < end else None
        j += 1
    return None


def _name_text(tokens, name, po):
    if tokens[name].text == "operator":
        return "operator" + "".join(t.text for t in tokens[name + 1:po])
    return tokens[name].text


def _function(prog, first, end, scope):
    """A Function for the head tokens[first:end], or None."""
    toks = prog.tokens
    fh = function_head(toks, first, end)
    if not fh:
        return None
    name, po, pc = fh
    head = [x.text for x in toks[first:name]]
    return Function(_name_text(toks, name, po), name,
                    [(toks[a].pos, toks[b - 1].end) for a, b in split_params(toks, po, pc)],
                    None, "kernel" in head, "template" in head, scope)


_BLOCK_AFTER = frozenset((")", "else", "do", "try", "{", "}", ";", ":"))


def parse(text):
    """The Program of preprocessed MSL text."""
    toks = tokenize(text)
    prog = Program(text, toks)
    prog.lines = LineMap(text)
    prog._body_of = [None] * len(toks)
    stack = [("program", None)]        # (kind, Function): program, class, body, init
    stmt_start = [0]                   # per non-init scope: first token of the statement
    i, n = 0, len(toks)
    while i < n:
        t = toks[i].text
        kind, fn = stack[-1]
        prog._body_of[i] = fn
        if t in ("typename", "class") and i + 1 < n and toks[i + 1].kind == "id" and \
                i > 0 and toks[i - 1].text in ("<", ","):
            prog.type_names.add(toks[i + 1].text)          # a template's type parameter
        elif t in ("struct", "class", "union", "enum") and i + 1 < n and toks[i + 1].kind == "id":
            prog.type_names.add(toks[i + 1].text)
        elif t == "typedef":
            j = i
            while j < n and toks[j].text not in (";", "{"):
                j += 1
            if j < n and toks[j].text == ";" and toks[j - 1].kind == "id":
                prog.type_names.add(toks[j - 1].text)
        elif t == "using" and i + 2 < n and toks[i + 1].kind == "id" and toks[i + 2].text == "=":
            prog.type_names.add(toks[i + 1].text)
        if t == "{":
            first = stmt_start[-1] if kind != "init" else None
            if kind in ("program", "class"):
                head = [x.text for x in toks[first:i]]
                f = _function(prog, first, i, kind) if "namespace" not in head else None
                if f is not None:
                    f.body = (i + 1, match(toks, i, "{", "}"))
                    prog.functions.append(f)
                    stack.append(("body", f))
                    stmt_start.append(i + 1)
                elif "namespace" in head or head[:1] == ["extern"]:
                    stack.append(("program", None))
                    stmt_start.append(i + 1)
                elif any(h in head for h in _CLASS_KEYS) and "=" not in head:
                    stack.append(("class", None))
                    stmt_start.append(i + 1)
                else:
                    stack.append(("init", fn))
            elif kind == "body" and (i == stmt_start[-1] or toks[i - 1].text in _BLOCK_AFTER):
                if i > stmt_start[-1]:
                    prog.statements.append(Statement("body", stmt_start[-1], i - 1, fn))
                stack.append(("body", fn))
                stmt_start.append(i + 1)
            else:
                stack.append(("init", fn))                 # a braced initialiser
        elif t == "}":
            if len(stack) > 1:
                k, f = stack.pop()
                if k != "init":
                    if i > stmt_start[-1]:
                        prog.statements.append(Statement(k, stmt_start[-1], i - 1, f))
                    stmt_start.pop()
                    if k != "class":
                        stmt_start[-1] = i + 1   # `struct S {...} s;` goes on to its `;`
        elif t == ";" and kind != "init":
            if i > stmt_start[-1]:
                prog.statements.append(Statement(kind, stmt_start[-1], i, fn))
                if kind in ("program", "class"):
                    f = _function(prog, stmt_start[-1], i, kind)
                    if f is not None:
                        prog.functions.append(f)
            stmt_start[-1] = i + 1
        elif t == "(" and kind == "body" and i > 0 and toks[i - 1].text == "for":
            # for (init; cond; step): the init is a statement of its own
            close = match(toks, i, "(", ")")
            semi = next((j for j in range(i + 1, close) if toks[j].text == ";"), close)
            if semi > i + 1:
                prog.statements.append(Statement("body", i + 1, semi, fn))
            for j in range(i, min(close + 1, n)):
                prog._body_of[j] = fn
            i = close + 1
            stmt_start[-1] = i
            continue
        elif kind == "body" and (t in ("else", "do") or (t == ")" and _ends_condition(toks, i))):
            stmt_start[-1] = i + 1                         # if (...) stmt;  else stmt;
        elif t == ":" and kind in ("body", "class") and (
                toks[i - 1].text in ("default", "public", "private", "protected") or
                toks[stmt_start[-1]].text == "case" or
                (i - 1 == stmt_start[-1] and toks[i - 1].kind == "id")):
            stmt_start[-1] = i + 1                         # labels
        i += 1
    return prog


def _ends_condition(toks, i):
    """Whether the `)` at i closes an if/while/switch condition (a statement follows)."""
    depth = 0
    for j in range(i, -1, -1):
        t = toks[j].text
        if t == ")":
            depth += 1
        elif t == "(":
            depth -= 1
            if depth == 0:
                return j > 0 and toks[j - 1].text in ("if", "while", "switch")
    return False


def calls(prog, fn):
    """(name, token index, argument count) of the calls in fn's body that are not member
    calls (x.f(), p->f()) and not keywords or casts."""
    out = []
    if fn.body is None:
        return out
    toks = prog.tokens
    a, b = fn.body
    for i in range(a, b):
        t = toks[i]
        if t.kind != "id" or t.text in _NOT_A_CALL:
            continue
        if i > 0 and toks[i - 1].text in (".", "->"):
            continue
        j = i + 1
        if j < b and toks[j].text == "<":
            j = angle_close(toks, j) + 1
        if j < b and toks[j].text == "(":
            pc = match(toks, j, "(", ")")
            nargs = len(split_params(toks, j, pc))
            out.append((t.text, i, nargs))
    return out


def arity(prog, fn):
    """(minimum, maximum) argument counts fn accepts (defaults lower the minimum)."""
    toks = prog.tokens
    lo = hi = 0
    for span in fn.params:
        ts = [toks[k].text for k in prog.param_tokens(span)]
        if ts in (["void"], ["..."]):
            if ts == ["..."]:
                hi = 10 ** 6
            continue
        hi += 1
        if "=" not in ts:
            lo = hi
    return lo, hi


def param_words(prog, span):
    """(token indices, texts) of a parameter's declaration, without its default value."""
    ts = prog.param_tokens(span)
    words = [prog.tokens[k].text for k in ts]
    if "=" in words:
        cut = words.index("=")
        ts, words = ts[:cut], words[:cut]
    return ts, words


def param_source(prog, span):
    """A parameter's source text with the attributes after it ([[buffer(i)]]), up to the
    `,` or `)` that ends it."""
    a, b = span
    nxt = next((t.pos for t in prog.tokens if t.pos >= b), len(prog.text))
    return prog.text[a:nxt]


def body_text(prog, fn):
    """(offset, text) of fn's body between its braces (None for a declaration)."""
    if fn.body is None:
        return None
    a, b = fn.body
    start = prog.tokens[a - 1].end
    end = prog.tokens[b].pos if b < len(prog.tokens) else len(prog.text)
    return start, prog.text[start:end]


def is_pointer_or_ref(words, stop=()):
    """Whether a declaration's words declare a pointer or reference (a * or & outside
    template brackets, before any of the words `stop` there)."""
    depth = 0
    for w in words:
        if w == "<":
            depth += 1
        elif w == ">":
            depth -= 1
        elif depth == 0 and w in ("*", "&", "&&"):
            return True
        elif depth == 0 and w in stop:
            return False
    return False
