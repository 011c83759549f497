"""The C++ a candidate hands to the compiler, read as code: comments and literals blanked.

The rules about kernel sources (no extra streams, a ``__global__`` kernel present) look at the
code, not at what a comment or a message string says about it. The sources given to
``load_inline`` are assembled from the Python where the syntax tree shows how (string constants,
``+``, f-strings, lists, ``"sep".join([...])``, names bound once) and lexed as the compiler does,
from their first character, with line splices, escapes and raw strings.

A piece only known at run time (an f-string field, a call's result) can leave the lexer in any
state, so the text after it is lexed once from every state it could be in: code, inside a string
or char literal, a comment, or a raw string closed by a delimiter the text contains. A quote or
comment marker supplied at run time then cannot hide code from the scan. When the sources are
not fully known, every other string of the candidate (docstrings excepted) is read the same way.
Identifiers built at run time or by the preprocessor (``##``) are not seen; the timer's
device-wide synchronization is the backstop for streams.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable

from .scopes import Scopes

STREAM_WORDS = re.compile(
    r"\b(cudaStreamCreate\w*|getStreamFromPool|cudaStreamPerThread|cudaStreamNonBlocking|"
    r"cudaStreamLegacy|cudaGraphLaunch|cudaLaunchHostFunc|getStreamFromExternal)\b"
)
GLOBAL_KERNEL = re.compile(r"\b__global__\b")

#: load_inline's parameters in order; the *_sources ones are whole C++ files.
_PARAMS = ("name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
           "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths")
_SOURCES = {"cpp_sources", "cuda_sources", "sycl_sources"}

CODE, DQ, SQ, BLOCK, LINE = "code", '"', "'", "/*", "//"  # a raw string is ("R", delimiter)
_RAW_PREFIXES = {"R", "LR", "uR", "UR", "u8R"}
_RAW_OPEN = re.compile(r'([^ ()\\\t\v\f\r\n"]{0,16})\(')
_RAW_CLOSE = re.compile(r'\)([^ ()\\\t\v\f\r\n"]{0,16})"')
_TOKEN_TAIL = re.compile(r"\w+$")

Piece = tuple[str, "ast.AST | None"]  # text, and the constant it comes from
Text = list["Piece | None"]  # None: a piece only known at run time


def _splice(text: str, i: int) -> int:
    """Length of a line splice (backslash-newline) at ``i``, 0 if there is none."""
    if text.startswith("\\\n", i):
        return 2
    return 3 if text.startswith("\\\r\n", i) else 0


def _peek(text: str, i: int) -> int:
    """The index of the next character at or after ``i``, past line splices."""
    while _splice(text, i):
        i += _splice(text, i)
    return i


@functools.lru_cache(maxsize=256)
def lex(text: str, state: str | tuple = CODE) -> tuple[str, tuple[int, ...]]:
    """The code of a C++ ``text``, starting in ``state``: every character of a comment or a
    string/char literal becomes a space and line splices vanish (so spliced identifiers join).
    Also returns, for each output character, its index in ``text``."""
    out: list[str] = []
    origin: list[int] = []
    i, n = 0, len(text)

    def blank(upto: int) -> int:
        for k in range(i, upto):
            out.append(" ")
            origin.append(k)
        return upto

    while i < n:
        c = text[i]
        if c == "\\" and not isinstance(state, tuple) and _splice(text, i):
            i += _splice(text, i)
            continue
        if state == CODE:
            if c == "/" and (nxt := _peek(text, i + 1)) < n and text[nxt] in "/*":
                state = LINE if text[nxt] == "/" else BLOCK
                i = blank(nxt + 1)
                continue
            if c in "\"'":
                tail = _TOKEN_TAIL.search("".join(out[-32:]))
                token = tail.group(0) if tail else ""  # the identifier or number just before
                if c == '"' and token in _RAW_PREFIXES and (m := _RAW_OPEN.match(text, i + 1)):
                    state = ("R", m.group(1))
                    i = blank(m.end())
                    continue
                if not (c == "'" and token[:1].isdigit()):  # in 1'000 the quote separates digits
                    state = c
                    i = blank(i + 1)
                    continue
            out.append(c)
            origin.append(i)
            i += 1
        elif state in (DQ, SQ):
            if c == "\\":  # an escape takes the next character, wherever a splice puts it
                i = blank(min(_peek(text, i + 1) + 1, n))
                continue
            if c == state or c == "\n":  # a literal ends at its quote, or (unterminated) at the line end
                state = CODE
            i = blank(i + 1)
        elif state == LINE:
            state = CODE if c == "\n" else LINE
            i = blank(i + 1)
        elif state == BLOCK:
            nxt = _peek(text, i + 1) if c == "*" else i + 1
            if c == "*" and nxt < n and text[nxt] == "/":
                state = CODE
                i = blank(nxt + 1)
                continue
            i = blank(i + 1)
        else:
            close = ")" + state[1] + '"'
            if text.startswith(close, i):
                state = CODE
                i = blank(i + len(close))
                continue
            i = blank(i + 1)
    return "".join(out), tuple(origin)


def _states(runs: list[str]) -> list[str | tuple]:
    """Every state the lexer can be in right after a piece only known at run time."""
    delimiters = sorted(set(_RAW_CLOSE.findall("".join(runs))))
    return [CODE, DQ, SQ, BLOCK, LINE] + [("R", d) for d in delimiters]


def find(pattern: re.Pattern, text: Text, known_start: bool = True,
         code_only: bool = False) -> list[tuple[str, int | None]]:
    """Each match of ``pattern`` in the code of ``text`` (once per word), with its line in the
    candidate. ``known_start``: the text is a whole source file (it starts in code); with
    ``code_only`` the pieces after run-time ones are read as code only, not in every state."""
    runs: list[list[Piece]] = [[]]
    for piece in text:
        if piece is None:
            runs.append([])
        else:
            runs[-1].append(piece)
    joined = ["".join(t for t, _ in run) for run in runs]
    exact = len(runs) == 1 and known_start
    found: dict[str, int | None] = {}
    for state in [CODE] if exact or code_only else _states(joined):
        code, where = [], []
        for k, run_text in enumerate(joined):
            part, origin = lex(run_text, CODE if k == 0 and known_start else state)
            code.append(part)
            where.extend((k, o) for o in origin)
        for m in pattern.finditer("".join(code)):
            k, offset = where[m.start()]
            found.setdefault(m.group(0), _line(runs[k], offset))
    return list(found.items())


def _line(run: list[Piece], offset: int) -> int | None:
    for text, node in run:
        if offset < len(text):
            line = getattr(node, "lineno", None)
            return None if line is None else line + text[:offset].count("\n")
        offset -= len(text)
    return None


class KernelSources:
    """What the candidate's ``load_inline`` calls hand to the compiler, as far as the tree shows."""

    def __init__(self, tree: ast.Module, calls: list[ast.Call], scopes: Scopes) -> None:
        self.scopes = scopes
        self.sources: list[tuple[str, Text]] = []  # (parameter, a whole source file)
        self.fragments: list[Text] = []  # text that lands in C++ or the command line somewhere
        self.complete = True
        for call in calls:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                self.complete = False
            named = [(p, a) for p, a in zip(_PARAMS, call.args)] + [(k.arg, k.value) for k in call.keywords]
            for param, value in named:
                items, _ = self._fold(value)
                if param in _SOURCES:
                    self.sources.append((param, _join(items, "\n")))
                else:
                    self.fragments.extend(items)
        texts = [t for _, t in self.sources] + self.fragments
        called = {id(c.func) for c in calls}
        other_uses = [n for n in ast.walk(tree) if id(n) not in called and isinstance(n, (ast.Name, ast.Attribute))
                      and "load_inline" in (getattr(n, "id", None), getattr(n, "attr", None),
                                            (scopes.import_path(n) or "").rpartition(".")[2])]
        self.complete = self.complete and not other_uses and not any(None in t for t in texts)
        if not self.complete:
            docstrings = {id(n) for s in ast.walk(tree) if isinstance(s, ast.Expr)
                          and isinstance(s.value, (ast.Constant, ast.JoinedStr)) for n in ast.walk(s.value)}
            self.fragments += [[(n.value, n)] for n in ast.walk(tree) if isinstance(n, ast.Constant)
                               and isinstance(n.value, str) and id(n) not in docstrings]

    def stream_uses(self) -> list[tuple[str, int | None]]:
        hits = [h for _, text in self.sources for h in find(STREAM_WORDS, text)]
        hits += [h for text in self.fragments for h in find(STREAM_WORDS, text, known_start=False)]
        return hits

    def has_cuda_kernel(self) -> bool:
        cuda = [text for param, text in self.sources if param == "cuda_sources"]
        if any(find(GLOBAL_KERNEL, text, code_only=True) for text in cuda):
            return True
        return not self.complete and any(find(GLOBAL_KERNEL, t, code_only=True) for t in self.fragments)

    def _fold(self, node: ast.expr, seen: frozenset = frozenset()) -> tuple[list[Text], bool | None]:
        """The texts ``node`` evaluates to (one, or a list's elements), and whether it is a list
        (None: not known)."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str) or type(node.value) in (int, float):
                return [[(str(node.value), node)]], False
            return [], None
        if isinstance(node, ast.JoinedStr):
            text: Text = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    text.append((v.value, v))
                    continue
                items, is_list = self._fold(v.value, seen)
                plain = v.conversion == -1 and v.format_spec is None and is_list is False
                text += items[0] if plain and len(items) == 1 else [None]
            return [text], False
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return [[None] if isinstance(e, ast.Starred) else _join(self._fold(e, seen)[0], "\n")
                    for e in node.elts], True
        if isinstance(node, ast.Dict):  # functions={"name": "docstring"}
            return [[None] if e is None else _join(self._fold(e, seen)[0], "\n")
                    for e in node.keys + node.values], True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            (left, left_list), (right, right_list) = self._fold(node.left, seen), self._fold(node.right, seen)
            if left_list or right_list:
                return left + right, True
            return [_join(left, "") + _join(right, "")], None if None in (left_list, right_list) else False
        if isinstance(node, ast.Name):
            value = self.scopes.single_value(node)
            if value is not None and value not in seen:
                return self._fold(value, seen | {value})
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
                and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
                and len(node.args) == 1 and not node.keywords):
            items, is_list = self._fold(node.args[0], seen)
            if is_list:
                return [_join(items, node.func.value.value, node.func.value)], False
        return [[None]], None


def _join(items: Iterable[Text], sep: str, node: ast.AST | None = None) -> Text:
    text: Text = []
    for k, item in enumerate(items):
        if k and sep:
            text.append((sep, node))
        text += item
    return text
