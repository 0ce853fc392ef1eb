"""The hall of fame of a run as ``evolve frontier`` shows it: members, losses, figures.

Test figures come from the closed-loop simulations of the final hall of fame on every
whole test run (:mod:`evolve.search.final_scores`), never from the teacher-forced test
metrics the search stored (on a queueing run they give every program the corpora's
queue). A member without current closed-loop figures (an archive written before them, an
earlier generation's member since refitted) has none: ``-``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from evolve.archive import Archive, final_scores
from evolve.archive.models import on_frontier
from evolve.assess.heldout import fitting_loss
from evolve.assess.splits import SPLITS
from evolve.errors import ArchiveError

KEYS = ("e2e_mean", "ttft_mean")


@dataclass
class Member:
    id: str
    complexity: int
    loss: float
    train_loss: float
    transfer_loss: float
    validate_loss: float
    picked: bool
    on_frontier: bool
    errors: dict[str, dict[str, float | None]]  # split -> mean APE per key, stored metrics
    constants: Any
    test_closed_loop: dict[str, float | None] | None  # mean APE per key; None: not computed


@dataclass
class FrontierView:
    run_id: int
    generation: int
    rule: str
    members: list[Member]
    modes: dict[str, list[str]]  # split -> how its stored figures were computed
    stored: list[Any] = field(default_factory=list)

    @property
    def priced(self) -> bool:
        return any(not math.isnan(m.transfer_loss) for m in self.members)

    @property
    def closed_loop_test(self) -> bool:
        """Whether any member has closed-loop test figures (else no test columns)."""
        return any(m.test_closed_loop is not None for m in self.members)


def split_errors(metrics: Any, keys: tuple[str, ...] = KEYS
                 ) -> dict[str, dict[str, float | None]]:
    """Mean APE per split and key over the runs of that split (None if no run); a run whose
    metrics are invalid counts as ``inf``, so a split average never hides a failure."""
    out: dict[str, dict[str, float | None]] = {}
    for split in SPLITS:
        runs = [m for m in (metrics or {}).values() if m.get("split") == split]
        out[split] = {}
        for k in keys:
            vals = [float(m.get("ape", {}).get(k, math.inf)) if m.get("valid", True)
                    else math.inf for m in runs]
            out[split][k] = sum(vals) / len(vals) if vals else None
    return out


def split_modes(metrics_list: Any) -> dict[str, list[str]]:
    """How the figures of each split were computed (each run's stored ``mode``), over the
    given programs' metrics: ``{split: sorted modes}`` (splits without runs left out)."""
    out: dict[str, set[str]] = {}
    for metrics in metrics_list:
        for m in (metrics or {}).values():
            split, mode = m.get("split"), m.get("mode")
            if split in SPLITS and isinstance(mode, str):
                out.setdefault(str(split), set()).add(mode)
    return {s: sorted(out[s]) for s in SPLITS if s in out}


def load_frontier(path: str, run_id: int | None, generation: int | None) -> FrontierView:
    from evolve.search.pareto import Frontier
    from evolve.search.selection import split_loss

    with Archive(path, create=False) as archive:
        rid = run_id if run_id is not None else archive.latest_run_id()
        run_row = archive.run(rid)
        rows = archive.frontier(rid, generation)
        if not rows:
            raise ArchiveError(f"{archive.path}: run {rid} has no frontier"
                               + (f" at generation {generation}"
                                  if generation is not None else " yet"))
        latest = archive.latest_accepted(rid)
        finals = final_scores.read(archive, rid)
    search_cfg = run_row.config.get("search", {})
    tol = float(search_cfg.get("pick_tolerance", 1.5))
    # runs recorded before the validate rule existed were picked by PySR's rule
    rule = Frontier.from_elites([], tol, str(search_cfg.get("pick_rule", "pysr"))).rule
    members, stored = [], []
    for r, front in zip(rows, on_frontier(rows), strict=True):
        ev = latest.get(r.program_id)
        metrics = ev.metrics if ev else None
        stored.append(metrics)
        transfer = fitting_loss(metrics, "transfer")  # nan unless the run prices transfer
        closed = final_scores.current(finals, r.program_id,
                                      (ev.generation, ev.seq) if ev else None)
        members.append(Member(
            r.program_id, r.complexity, r.loss,
            r.loss if math.isnan(transfer) else fitting_loss(metrics, "train"), transfer,
            split_loss(metrics, "validate"), bool(r.picked), front, split_errors(metrics),
            ev.constants if ev else None,
            None if closed is None else split_errors(closed)["test"]))
    return FrontierView(rid, rows[0].generation, rule, members, split_modes(stored), stored)
