"""Losses per split from stored metrics, and the champion: selection that looks past training.

Why: the training runs (contexts under ~850 tokens) cannot tell a program that prices
long contexts from one that does not, so a pick made on training loss alone happily
chose programs with no context term, which then ran 61-81 % low on the long-context,
overloaded reasoning runs. The validate split (Mixtral reasoning, CodeLlama codegen and
roleplay in the bundled data) holds exactly the runs that can tell them apart, so
selection reads it; the test split is never read by any decision.

* :func:`split_loss`, the held-out loss, from stored metric dicts: RMS over the split's
  runs (or slices) of the mean-E2E, mean-TTFT and decode-interval APEs, plus the
  failure-count error where at least ``MIN_FAILURES`` requests failed. Richer than the
  training loss (``evaluator.api.loss``: mean E2E and TTFT), because on an overloaded
  long-context run E2E and TTFT are dominated by the queue and the client timeout, and a
  model can match them with the wrong decode speed and the wrong number of timeouts.
* :func:`champion`: among the grid's elites whose training loss is within ``tolerance`` of
  the best, the lowest *selection loss* ``sqrt((train^2 + validate^2) / 2)``; without
  validate runs, the best training loss. The pick is chosen by
  :meth:`evolve.search.pareto.Frontier.pick` by the same principle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from evolve.assess.heldout import MIN_FAILURES, split_loss
from evolve.search.grid import Elite

__all__ = ["MIN_FAILURES", "champion", "selection_loss", "split_loss"]

def selection_loss(train: float, val: float) -> float:
    """``sqrt((train^2 + val^2) / 2)``; the training loss alone when there is no validate."""
    if math.isnan(val):
        return train
    return math.sqrt((train * train + val * val) / 2.0)


def champion(elites: Iterable[Elite], tolerance: float) -> Elite | None:
    """The elite with the lowest selection loss among those within ``tolerance`` x the
    best training loss (ties: lower training loss, simpler, smaller id)."""
    pool = [e for e in elites if math.isfinite(e.loss)]
    if not pool:
        return None
    limit = tolerance * min(e.loss for e in pool)
    return min((e for e in pool if e.loss <= limit),
               key=lambda e: (selection_loss(e.loss, e.val_loss), e.loss, e.complexity,
                              e.program_id))
