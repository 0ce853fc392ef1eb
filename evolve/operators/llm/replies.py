"""Extracting a program from an LLM reply: a full fenced program, or a SEARCH/REPLACE diff.

Why it never raises: a reply is untrusted text, and every failure is data for the archive
(the loop stores the reason with the proposal). The whitelist check belongs to
``evolve.program.language.parse_program`` in the loop; here we only find the text and pre-check it
is Python at all, so obviously broken replies carry a precise reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_DIFF = re.compile(
    r"^[ \t]*<{5,9} ?SEARCH[ \t]*\n(.*?)^[ \t]*={5,9}[ \t]*\n(.*?)^[ \t]*>{5,9} ?REPLACE[ \t]*$",
    re.DOTALL | re.MULTILINE)
_PY_LANGS = {"python", "py", "python3", ""}


@dataclass(frozen=True)
class Extracted:
    """The program text found in a reply, or why there is none."""

    source: str | None
    error: str | None
    form: str  # "program" | "diff" | "none"


def extract_program(reply: str | None, parent_source: str | None) -> Extracted:
    """Find a program in ``reply``.

    Preference: the last fenced python block containing ``def step_time`` (models often
    show a draft first and the final answer last); otherwise SEARCH/REPLACE blocks applied
    to ``parent_source``. The result is pre-checked with ``ast.parse``.
    """
    if reply is None or not reply.strip():
        return Extracted(None, "empty reply", "none")
    blocks = [body for lang, body in FENCE.findall(reply)
              if lang.lower() in _PY_LANGS and "def step_time" in body]
    if blocks:
        return _checked(blocks[-1], "program")
    diffs = _DIFF.findall(reply)
    if diffs:
        if parent_source is None:
            return Extracted(None, "reply is a SEARCH/REPLACE diff but there is no parent", "diff")
        source, error = apply_diff(parent_source, diffs)
        if error:
            return Extracted(None, error, "diff")
        return _checked(source, "diff")
    if "def step_time" in reply and "```" not in reply:
        return Extracted(None, "reply has a step_time program but not in a ```python fenced "
                               "block", "none")
    return Extracted(None, "no ```python block with def step_time and no SEARCH/REPLACE diff "
                           "in the reply", "none")


def apply_diff(source: str, blocks: list[tuple[str, str]]) -> tuple[str, str | None]:
    """Apply (search, replace) pairs in order; each search must occur exactly once.

    Exact match first; failing that, a match that ignores trailing whitespace and the
    common indentation (models re-indent). Returns (new source, error or None).
    """
    for i, (search, replace) in enumerate(blocks, start=1):
        if not search.strip():
            return source, f"SEARCH block {i} is empty"
        count = source.count(search)
        if count == 1:
            source = source.replace(search, replace, 1)
            continue
        if count > 1:
            return source, f"SEARCH block {i} matches the parent {count} times"
        span = _loose_find(source, search)
        if span is None:
            return source, f"SEARCH block {i} not found in the parent source"
        start, end = span
        source = source[:start] + replace + source[end:]
    return source, None


def _loose_find(source: str, search: str) -> tuple[int, int] | None:
    """Character span of the unique run of lines equal to ``search`` up to whitespace."""
    want = [ln.strip() for ln in search.strip("\n").splitlines()]
    lines = source.splitlines(keepends=True)
    hits = [i for i in range(len(lines) - len(want) + 1)
            if [ln.strip() for ln in lines[i:i + len(want)]] == want]
    if len(hits) != 1:
        return None
    start = sum(len(ln) for ln in lines[:hits[0]])
    end = start + sum(len(ln) for ln in lines[hits[0]:hits[0] + len(want)])
    return start, end


def _checked(source: str, form: str) -> Extracted:
    text = source.strip("\n") + "\n"
    try:
        ast.parse(text)
    except SyntaxError as exc:
        return Extracted(None, f"reply program is not valid Python: line {exc.lineno}: "
                               f"{exc.msg}", form)
    if "def step_time" not in text:
        return Extracted(None, "program has no def step_time", form)
    return Extracted(text, None, form)
