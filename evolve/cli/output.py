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

ID_LEN = 12


def short(pid: str | None) -> str:
    return (pid or "-")[:ID_LEN]


def pct(x: float | None) -> str:
    """An APE fraction as a percentage, or '-'."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{100.0 * x:.1f}%"


def num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
          right: Sequence[int] = ()) -> str:
    """A plain aligned text table; columns whose index is in ``right`` align right. Cells
    are shown ``printable`` (a run status or operator name read from an archive may hold
    a terminal escape: it is shown, never sent)."""
    from evolve.text.untrusted import printable

    cells = [[printable(h) for h in headers]] + [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()

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
