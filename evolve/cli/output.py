"""Small output helpers shared by the read-only commands: tables, numbers, JSON.

Why here: ``frontier``, ``show``, ``runs`` and ``replay`` print the same kinds of numbers
(short ids, APEs per split); one formatting keeps them comparable at a glance, and
``--json`` output goes through one function so scripts see one style.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from evolve.text.numbers import num, pct, percent

__all__ = ["ID_LEN", "num", "pct", "percent", "print_json", "short", "table"]

ID_LEN = 12


def short(pid: str | None) -> str:
    return (pid or "-")[:ID_LEN]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
          right: Sequence[int] = (), strip: bool = True) -> str:
    """A plain aligned text table; columns whose index is in ``right`` align right. Cells
    are shown ``printable`` (a run status or operator name read from an archive may hold
    a terminal escape: it is shown, never sent). ``strip=False`` keeps the trailing
    spaces of a row whose last cells are blank (``evolve fit``'s tables always had them)."""
    from evolve.text.untrusted import printable

    cells = [[printable(h) for h in headers]] + [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        text = "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        return text.rstrip() if strip else text

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    """Strict JSON (non-finite floats as strings) with sorted keys, for scripts."""
    json.dump(_jsonable(obj), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
