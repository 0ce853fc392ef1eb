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


STEADY_TERMS = ("ttft_p90_steady", "ttft_p99_steady", "e2e_p99_steady")


def fitting_loss(metrics: Mapping[str, Mapping[str, Any]] | None, split: str) -> float:
    """The training loss's formula (``evaluator.api.loss``: mean-E2E and mean-TTFT APEs at
    weight 1, the steady percentiles' at the entry's stored ``loss_weights``, capped) over
    the stored entries of ``split``: ``train`` gives the training loss back, ``transfer``
    the transfer loss (``evolve.search.transfer``); nan if none, inf if any is invalid.
    An entry stored without ``loss_weights`` (before issue 58) counts its means only."""
    rows = [m for _n, m in sorted((metrics or {}).items()) if m.get("split") == split]
    if not rows:
        return math.nan
    acc = 0.0
    for m in rows:
        ape = m.get("ape") or {}
        if not m.get("valid") or "e2e_mean" not in ape or "ttft_mean" not in ape:
            return math.inf
        w = m.get("loss_weights") or {}
        num = float(ape["e2e_mean"]) ** 2 + float(ape["ttft_mean"]) ** 2
        den = 2.0
        for key in STEADY_TERMS:  # evaluator.scoring.score.run_loss, from stored dicts
            wk = float(w.get(key, 0.0))
            if wk > 0 and key in ape:
                num += wk * min(float(ape[key]), float(w.get("cap", 1.0))) ** 2
                den += wk
        acc += num / den
    return math.sqrt(acc / len(rows))


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
