"""The held-out loss of stored metrics: what the pick reads and what the report shows.

Why a module of its own: the search's selection (``evolve.search.selection``) and the
report (``evolve.report``, which reads the archive and never the search) must compute the
same number from the same stored metric dicts; this leaf module, which imports nothing of
ours, is the one definition. See ``docs/selection.md`` for why it is richer than the
training loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MIN_FAILURES = 100.0
KEYS = ("e2e_mean", "ttft_mean", "itl_mean")


def split_loss(metrics: Mapping[str, Mapping[str, Any]] | None, split: str) -> float:
    """The held-out loss over the stored runs/slices of ``split`` (module docstring); nan
    if there are none, inf if any is invalid."""
    rows = [m for _n, m in sorted((metrics or {}).items()) if m.get("split") == split]
    if not rows:
        return math.nan
    acc = 0.0
    for m in rows:
        ape = m.get("ape") or {}
        if not m.get("valid") or any(k not in ape for k in KEYS):
            return math.inf
        terms = [float(ape[k]) for k in KEYS]
        if float((m.get("meas") or {}).get("failures", 0.0)) >= MIN_FAILURES:
            terms.append(float(ape.get("failures", math.inf)))
        acc += sum(t * t for t in terms) / len(terms)
    return math.sqrt(acc / len(rows))


def normal_within(folds: Mapping[str, Mapping[str, Mapping[str, Any]]],
                  normal: set[str] | None = None, limit: float = 0.10) -> tuple[int, int]:
    """(held-out normal runs within ``limit`` mean-E2E APE, held-out normal runs) of an
    ``evolve generalize`` fold table, the count issue 11's held-out targets are stated in.
    ``normal`` names the non-reasoning runs; without it, a run is normal unless its name
    says ``reasoning`` (all a stored JSON has). A run without a mean-E2E APE misses."""
    apes = [float((m.get("ape") or {}).get("e2e_mean", math.inf))
            for runs in folds.values() for n, m in runs.items()
            if (n in normal if normal is not None else "reasoning" not in n)]
    return sum(a <= limit for a in apes), len(apes)
