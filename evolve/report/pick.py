"""Why the pick is the pick: the hall of fame with the numbers each pick rule reads.

The archive stores the hall of fame (the best program of each complexity; the frontier is
its non-dominated part) and which entry was picked, not why. The report answers "why" by
recomputing, from stored rows only, what the rule looked at: eligibility (training loss
within ``pick_tolerance`` x the lowest), the validate loss (rule ``validate``, over the
eligible hall of fame) and PySR's score -dlog(loss)/dcomplexity (rule ``pysr``, over the
eligible frontier members). The stored ``picked`` flag stays the
truth; :func:`explain` only annotates it (a disagreement is shown, not hidden).

The champion (the other program the loop polishes and the lineage page follows) is not
stored either; :func:`champion` recomputes it as ``evolve.search.selection.champion`` does:
among the last grid's elites within the tolerance of the best training loss, the lowest
``sqrt((train^2 + validate^2) / 2)``; archives written before the pick rule existed (no
``search.pick_rule`` in their config) used the lowest training loss.
``tests/report/test_builders.py`` checks this against the search's own function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evolve.archive.models import on_frontier
from evolve.report.data import RunData

TINY_LOSS = 1e-300


def pick_rule(data: RunData) -> str:
    """The run's pick rule: ``validate`` or ``pysr`` (archives without the key: ``pysr``)."""
    return str(data.config.get("search", {}).get("pick_rule", "pysr"))


def tolerance(data: RunData) -> float:
    return float(data.config.get("search", {}).get("pick_tolerance", 1.5))


def selection_loss(train: float, val: float) -> float:
    return train if math.isnan(val) else math.sqrt((train * train + val * val) / 2.0)


@dataclass
class MemberWhy:
    """One hall-of-fame entry with the numbers the pick rules read."""

    program_id: str
    complexity: int
    train_loss: float
    val_loss: float
    score: float  # PySR: -dlog(loss)/dcomplexity against the next simpler frontier member
    eligible: bool
    picked: bool
    note: str
    on_frontier: bool = True


def explain(data: RunData) -> tuple[list[MemberWhy], str]:
    """The last hall of fame annotated, and one sentence on why the pick won. Under the
    ``pysr`` rule only frontier members are eligible (and scored)."""
    rows = data.frontier()
    if not rows:
        return [], "no frontier yet"
    tol, rule = tolerance(data), pick_rule(data)
    lowest = min(r.loss for r in rows)
    limit = tol * lowest
    out: list[MemberWhy] = []
    prev = None
    for r, front in zip(rows, on_frontier(rows), strict=True):
        p = data.programs.get(r.program_id)
        val = p.val_loss if p else math.nan
        score = math.nan
        if front:
            score = 0.0 if prev is None else -(
                math.log(max(r.loss, TINY_LOSS)) - math.log(max(prev.loss, TINY_LOSS))
            ) / max(r.complexity - prev.complexity, 1)
            prev = r
        out.append(MemberWhy(r.program_id, r.complexity, r.loss, val, score,
                             r.loss <= limit, bool(r.picked), "", front))
    use_val = rule == "validate" and any(not math.isnan(m.val_loss) for m in out
                                         if m.eligible)
    if not use_val:
        for m in out:
            m.eligible = m.eligible and m.on_frontier
    for m in out:
        if not m.eligible and not m.on_frontier and m.train_loss <= limit:
            m.note = "not on the frontier (PySR's rule reads the frontier only)"
        elif not m.eligible:
            m.note = f"training loss {m.train_loss / lowest:.2f}x the lowest > {tol:g}x"
        elif m.picked:
            m.note = "picked"
        elif use_val:
            m.note = "higher validate loss" if not math.isnan(m.val_loss) else "no validate"
        else:
            m.note = "lower score"
    pick = next((m for m in out if m.picked), None)
    if pick is None:
        return out, "no member is marked as the pick"
    n_elig = sum(m.eligible for m in out)
    if n_elig == 1:
        return out, (f"{pick.program_id[:12]} is the only eligible program (training "
                     f"loss within {tol:g}x the lowest, {lowest:.4f}): every simpler one "
                     "gives up more accuracy than the rule allows")
    if use_val:
        why = (f"{pick.program_id[:12]} has the lowest validate loss ({pick.val_loss:.4f}) "
               f"of the {n_elig} programs in the hall of fame (the best of each complexity) "
               f"whose training loss is within {tol:g}x the lowest ({lowest:.4f}); the test "
               "split is never read")
    else:
        why = (f"{pick.program_id[:12]} has the highest PySR score "
               f"-dlog(loss)/dcomplexity ({pick.score:.3f}) of the {n_elig} frontier "
               f"members whose training loss is within {tol:g}x the lowest ({lowest:.4f})")
    return out, why


def champion(data: RunData) -> str | None:
    """The champion of the last grid (see the module docstring)."""
    if not data.grids:
        return None
    cells = data.grids[max(data.grids)]
    pool = [c for c in cells if math.isfinite(c.loss)]
    if not pool:
        return None
    if "pick_rule" not in data.config.get("search", {}):
        return min(pool, key=lambda c: (c.loss, c.complexity, c.program_id)).program_id
    limit = tolerance(data) * min(c.loss for c in pool)

    def val(pid: str) -> float:
        p = data.programs.get(pid)
        return p.val_loss if p else math.nan

    best = min((c for c in pool if c.loss <= limit), key=lambda c: (
        selection_loss(c.loss, val(c.program_id)), c.loss, c.complexity, c.program_id))
    return best.program_id
