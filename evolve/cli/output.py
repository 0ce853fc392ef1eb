"""Small output helpers shared by the read-only commands: tables, numbers, JSON.

Why here: ``frontier``, ``show``, ``runs`` and ``replay`` print the same kinds of numbers
(short ids, APEs per split); one formatting keeps them comparable at a glance, and
``--json`` output goes through one function so scripts see one style.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from evolve.assess.splits import SPLITS

ID_LEN = 12
# How output names an engine loop (config run.loop, --loop).


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


def split_errors(metrics: Mapping[str, Mapping[str, Any]] | None,
                 keys: Sequence[str] = ("e2e_mean", "ttft_mean")
                 ) -> dict[str, dict[str, float | None]]:
    """Mean APE per split and metric key over the runs of that split (None if no run).

    A run whose metrics are invalid counts as ``inf``, so a split average never hides a
    failure.
    """
    out: dict[str, dict[str, float | None]] = {}
    for split in SPLITS:
        runs = [m for m in (metrics or {}).values() if m.get("split") == split]
        out[split] = {}
        for k in keys:
            vals = [float(m.get("ape", {}).get(k, math.inf)) if m.get("valid", True)
                    else math.inf for m in runs]
            out[split][k] = sum(vals) / len(vals) if vals else None
    return out


# how a run's stored metrics were computed (its ``mode``), in words


def split_modes(metrics_list: Sequence[Mapping[str, Mapping[str, Any]] | None]
                ) -> dict[str, list[str]]:
    """How the figures of each split were computed (each run's stored ``mode``), over the
    given programs' metrics: ``{split: sorted modes}`` (splits without runs left out).

    Why: a run scores its splits differently (training runs on closed-loop slices,
    validate runs that queue closed loop whole, the rest teacher forced), and a teacher-
    forced figure on an overloaded run takes its queue from the corpora, not from the
    program, so readers must be told which figure is which."""
    out: dict[str, set[str]] = {}
    for metrics in metrics_list:
        for m in (metrics or {}).values():
            split, mode = m.get("split"), m.get("mode")
            if split in SPLITS and isinstance(mode, str):
                out.setdefault(str(split), set()).add(mode)
    return {s: sorted(out[s]) for s in SPLITS if s in out}


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
