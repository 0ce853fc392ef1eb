"""Small output helpers shared by the read-only commands: tables, numbers, JSON.

Why here: ``frontier``, ``show``, ``runs`` and ``replay`` print the same kinds of numbers
(short ids, APEs per split); one formatting keeps them comparable at a glance, and
``--json`` output goes through one function so scripts see one style.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from evolve.text.numbers import num, pct, percent
from evolve.text.tables import table

__all__ = ["ID_LEN", "num", "pct", "percent", "print_json", "short", "table"]

ID_LEN = 12


def short(pid: str | None) -> str:
    return (pid or "-")[:ID_LEN]


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
