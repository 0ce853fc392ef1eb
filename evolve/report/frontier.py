"""Page 2, the frontier: every evaluated program on loss vs complexity, the frontier and
the pick highlighted, training and validate loss side by side.

Why both losses: the frontier is built on training loss, but the pick (rule ``validate``)
reads the validate split; seeing a program sit low on the left chart and high on the right
one is how a reader spots a training-set fit that does not transfer. Test-split numbers
appear only as the hall of fame's closed-loop test errors, computed once when the run
ended (on every whole test run, :mod:`evolve.search.final_scores`), shown and never read;
a run without them shows none (its stored test figures are teacher forced on the run's
corpora, which give every program the same queue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from evolve.report.data import RunData
from evolve.report.pick import MemberWhy, champion, explain, pick_rule, tolerance


@dataclass
class ScatterPoint:
    """One evaluated program: complexity and both losses, and its role."""

    program_id: str
    complexity: int
    train_loss: float
    val_loss: float
    generation: int
    operator: str
    on_frontier: bool
    pick: bool
    champion: bool


@dataclass
class FrontierPage:
    points: list[ScatterPoint]
    members: list[MemberWhy]
    why: str
    rule: str
    tolerance: float
    generation: int | None
    pick_id: str | None
    champion_id: str | None
    # program id -> mean APE of (mean E2E, mean TTFT) over the whole test runs, closed loop
    test: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def frontier_points(self) -> list[ScatterPoint]:
        return [p for p in self.points if p.on_frontier]


def build_frontier(data: RunData) -> FrontierPage:
    """One point per program with an accepted evaluation; frontier members at their
    frontier coordinates (the loss the frontier was built on)."""
    members, why = explain(data)
    front = {r.program_id: r for r in data.frontier()}
    on_front = data.frontier_ids()
    pick, champ = data.pick_id(), champion(data)
    points = []
    for p in data.programs.values():
        f = front.get(p.id)
        if f is None and (not p.accepted or p.complexity is None):
            continue
        points.append(ScatterPoint(
            p.id, f.complexity if f else int(p.complexity or 0),
            f.loss if f else p.train_loss, p.val_loss, p.generation, p.operator,
            p.id in on_front, p.id == pick, p.id == champ))
    test = {m.program_id: t for m in members
            if (t := closed_loop_test(data, m.program_id)) is not None}
    return FrontierPage(points, members, why, pick_rule(data), tolerance(data),
                        data.last_generation, pick, champ, test)


def closed_loop_test(data: RunData, pid: str) -> tuple[float, float] | None:
    """Mean APE of mean E2E and of mean TTFT over the program's closed-loop test runs
    (an invalid run counts as inf); None when the run's end computed none for it."""
    p = data.programs.get(pid)
    runs = list(((p.test_closed_loop if p else None) or {}).values())
    if not runs:
        return None

    def mean(key: str) -> float:
        return sum(float((m.get("ape") or {}).get(key, math.inf)) if m.get("valid", True)
                   else math.inf for m in runs) / len(runs)

    return mean("e2e_mean"), mean("ttft_mean")
