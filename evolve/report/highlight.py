"""Python source highlighting and unified diffs as HTML, with the standard library only.

Why ``tokenize`` and not Pygments or a JS highlighter: programs are short Python the
checker already accepted (or, for rejected sources, arbitrary text), the report must work
offline with nothing vendored, and the standard tokenizer classifies exactly what a reader
needs (keywords, names, numbers, strings, comments, operators). A source that does not
tokenize is shown escaped and unhighlighted, never dropped.
"""

from __future__ import annotations

import builtins
import difflib
import io
import keyword
import tokenize
from dataclasses import dataclass
from html import escape

_BUILTINS = frozenset(dir(builtins))
_NUMPY_LIKE = frozenset({"maximum", "minimum", "where", "sqrt", "log", "exp", "clip", "abs",
                         "log1p", "pow", "floor", "ceil", "tanh"})


def _css(tok: tokenize.TokenInfo, prev: tokenize.TokenInfo | None) -> str:
    """The CSS class of one token ('' for plain text)."""
    if tok.type == tokenize.COMMENT:
        return "c"
    if tok.type == tokenize.STRING:
        return "s"
    if tok.type == tokenize.NUMBER:
        return "m"
    if tok.type == tokenize.OP:
        return "o"
    if tok.type == tokenize.NAME:
        if keyword.iskeyword(tok.string):
            return "k"
        if prev is not None and prev.type == tokenize.NAME and prev.string == "def":
            return "nf"
        if tok.string in _BUILTINS or tok.string in _NUMPY_LIKE:
            return "nb"
        return "n"
    return ""


def highlight_python(source: str) -> str:
    """``source`` as HTML spans (``<span class="k">def</span>`` ...), whitespace kept.

    The output is meant for a ``<pre>``; it contains the source text exactly once, so a
    browser's text of the element equals the source.
    """
    lines = source.splitlines(keepends=True)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return escape(source)
    out: list[str] = []
    row, col = 1, 0  # next unwritten position (1-based row, 0-based column)
    prev: tokenize.TokenInfo | None = None
    for tok in tokens:
        if tok.type in (tokenize.ENDMARKER, tokenize.DEDENT, tokenize.INDENT):
            continue
        (sr, sc), (er, ec) = tok.start, tok.end
        if (sr, sc) < (row, col):
            continue
        out.append(escape(_slice(lines, (row, col), (sr, sc))))
        text = _slice(lines, (sr, sc), (er, ec))
        css = _css(tok, prev)
        out.append(f'<span class="{css}">{escape(text)}</span>' if css and text
                   else escape(text))
        row, col = er, ec
        if tok.type not in (tokenize.NL, tokenize.NEWLINE):
            prev = tok
    out.append(escape(_slice(lines, (row, col), (len(lines) + 1, 0))))
    return "".join(out)


def _slice(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """Text between two (row, col) positions of ``lines`` (rows 1-based)."""
    (sr, sc), (er, ec) = start, end
    if sr > len(lines):
        return ""
    if sr == er:
        return lines[sr - 1][sc:ec]
    parts = [lines[sr - 1][sc:]]
    parts += lines[sr:min(er - 1, len(lines))]
    if er <= len(lines):
        parts.append(lines[er - 1][:ec])
    return "".join(parts)


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff: ``kind`` is ``add``, ``del``, ``hunk`` or ``ctx``."""

    kind: str
    text: str


def diff_lines(old: str, new: str, old_name: str = "parent",
               new_name: str = "program", context: int = 3) -> list[DiffLine]:
    """Unified diff of two sources as classified lines (empty when they are equal)."""
    out: list[DiffLine] = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name,
                                     n=context, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        kind = ("hunk" if line.startswith("@@") else "add" if line.startswith("+")
                else "del" if line.startswith("-") else "ctx")
        out.append(DiffLine(kind, line))
    return out


def diff_html(lines: list[DiffLine]) -> str:
    """Diff lines as HTML for a ``<pre class="diff">``."""
    return "\n".join(f'<span class="d-{d.kind}">{escape(d.text)}</span>' for d in lines)
