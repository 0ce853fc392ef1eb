"""The held-out loss of stored metrics: what the pick reads and what the report shows.

Why a module of its own: the search's selection (``evolve.search.selection``) and the
report (``evolve.report``, which reads the archive and never the search) must compute the
same number from the same stored metric dicts; this leaf module, which imports nothing of
ours, is the one definition. See ``docs/selection.md`` for why it is richer than the
training loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

MIN_FAILURES = 100.0
KEYS = ("e2e_mean", "ttft_mean", "itl_mean")


def split_loss(metrics: Mapping[str, Mapping[str, Any]] | None, split: str) -> float:
    """The held-out loss over the stored runs/slices of ``split`` (module docstring); nan
    if there are none, inf if any is invalid."""
    def terms(m: Mapping[str, Any]) -> list[float] | None:
        ape = m.get("ape") or {}
        if any(k not in ape for k in KEYS):
            return None
        out = [float(ape[k]) for k in KEYS]
        if float((m.get("meas") or {}).get("failures", 0.0)) >= MIN_FAILURES:
            out.append(float(ape.get("failures", math.inf)))
        return out
    return _rms(metrics, split, terms)


def fitting_loss(metrics: Mapping[str, Mapping[str, Any]] | None, split: str) -> float:
    """The training loss's formula (``evaluator.api.loss``: mean-E2E and mean-TTFT APEs)
    over the stored entries of ``split``: ``train`` gives the training loss back,
    ``transfer`` the transfer loss (``evolve.search.transfer``); nan if none, inf if any
    is invalid."""
    def terms(m: Mapping[str, Any]) -> list[float] | None:
        ape = m.get("ape") or {}
        ok = "e2e_mean" in ape and "ttft_mean" in ape
        return [float(ape["e2e_mean"]), float(ape["ttft_mean"])] if ok else None
    return _rms(metrics, split, terms)


def _rms(metrics: Mapping[str, Mapping[str, Any]] | None, split: str,
         terms: Callable[[Mapping[str, Any]], list[float] | None]) -> float:
    """RMS over the entries of ``split`` of each entry's mean squared term; nan if there
    are none, inf if one is invalid or lacks a term."""
    rows = [m for _n, m in sorted((metrics or {}).items()) if m.get("split") == split]
    if not rows:
        return math.nan
    acc = 0.0
    for m in rows:
        t = terms(m) if m.get("valid") else None
        if t is None:
            return math.inf
        acc += sum(x * x for x in t) / len(t)
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
