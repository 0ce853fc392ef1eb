"""NSGA-II ranking, parent selection and the loss-vs-complexity frontier.

Why: the grid keeps diversity, but parents should still lean towards programs that are good
on *both* objectives (training loss, complexity; both minimised). NSGA-II's non-dominated
rank and crowding distance (from pymoo, so the ranking is the textbook one) give that
pressure; a binary tournament turns it into a selection probability.

Interface (used by ``evolve.search.loop``, ``evolve.cli.commands.frontier``):

* ``rank_and_crowding(objs) -> (rank, crowding)``: ``objs`` is ``(n, m)``, all minimised;
  ``rank`` 0 is the first front; ``crowding`` is pymoo's crowding distance within each
  front (``inf`` at front ends and in fronts of <= 2 points).
* ``select_parents(elites, rng, k) -> list[Elite]``: ``k`` binary tournaments; the winner
  has the lower rank, then the larger crowding, then the lower loss, then the smaller
  program id. Elites are first put in a canonical order, so the result depends only on the
  set of elites and the state of ``rng``.
* :class:`Frontier` – the non-dominated set as a first-class object, with PySR's hall of
  fame beside it: ``Frontier.from_elites(elites, tolerance=1.5)``, ``.members`` (the
  non-dominated elites) and ``.hall`` (the best elite of every complexity), both sorted by
  complexity, ``.scores``, ``.pick()``, and ``.rule`` (a sentence the CLI prints).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from pymoo.operators.survival.rank_and_crowding.metrics import calc_crowding_distance
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from evolve.search.grid import Elite

DEFAULT_TOLERANCE = 1.5
PICK_RULES = ("validate", "pysr")
_TINY_LOSS = 1e-300  # log(0) guard for the frontier score


def _finite(objs: np.ndarray) -> np.ndarray:
    """Replace nan/inf by the largest float so dominance and crowding stay well defined."""
    big = np.finfo(np.float64).max
    return np.where(np.isfinite(objs), objs, big)


def rank_and_crowding(objs: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Non-dominated rank (0 = best front) and crowding distance of each row of ``objs``."""
    F = _finite(np.asarray(objs, dtype=np.float64))
    if F.ndim != 2:
        raise ValueError(f"objs must be 2-D (n, m), got shape {F.shape}")
    n = F.shape[0]
    rank = np.zeros(n, dtype=np.int64)
    crowding = np.zeros(n, dtype=np.float64)
    if n == 0:
        return rank, crowding
    fronts = NonDominatedSorting().do(F)
    for r, front in enumerate(fronts):
        front = np.sort(np.asarray(front, dtype=np.int64))
        rank[front] = r
        if len(front) <= 2:
            crowding[front] = np.inf
        else:
            # Normalising by the front's range can overflow with the big-float stand-in.
            with np.errstate(over="ignore", invalid="ignore"):
                cd = calc_crowding_distance(F[front])
            crowding[front] = np.where(np.isnan(cd), 0.0, cd)
    return rank, crowding


def _canonical(elites: Iterable[Elite]) -> list[Elite]:
    return sorted(elites, key=lambda e: (e.loss, e.complexity, e.program_id, e.generation))


def select_parents(elites: Sequence[Elite], rng: np.random.Generator, k: int) -> list[Elite]:
    """Pick ``k`` parents (with repetition) by binary tournament on NSGA-II rank/crowding.

    Each tournament draws two contestants uniformly with replacement from the canonical
    order (loss, complexity, id); the key (rank, -crowding, loss, id) decides.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    pool = _canonical(elites)
    if not pool:
        raise ValueError("select_parents needs at least one elite")
    objs = np.array([[e.loss, float(e.complexity)] for e in pool], dtype=np.float64)
    rank, crowding = rank_and_crowding(objs)

    def key(i: int) -> tuple[int, float, float, str]:
        e = pool[i]
        loss = e.loss if math.isfinite(e.loss) else math.inf
        return (int(rank[i]), -float(crowding[i]), loss, e.program_id)

    draws = rng.integers(0, len(pool), size=(k, 2))
    return [pool[min(int(a), int(b), key=key)] for a, b in draws]


@dataclass(frozen=True)
class Frontier:
    """Non-dominated elites in (training loss, complexity), sorted by complexity, and the
    hall of fame they are drawn from.

    Built by a sweep: sort finite-loss elites by (complexity, loss, id); the first of each
    complexity is that complexity's entry in the *hall of fame* (``hall``, PySR's name for
    the best program of every size), and the frontier (``members``) keeps each hall entry
    whose loss is strictly lower than every simpler member's. So there is at most one
    member per complexity, and among elites with identical objectives the smallest id.

    Pick rules. Both first keep the *eligible* programs, ``loss <= tolerance * min
    frontier loss`` (PySR's guard against trading much accuracy for simplicity).

    * ``"validate"`` (default): the eligible *hall-of-fame* entry with the lowest validate
      loss (ties: lower training loss, then simpler). Why: the training runs cannot tell a
      program that prices long contexts from one that does not; the validate split can,
      and it is held out of every fit. Why the hall and not only the frontier: a program
      one complexity step longer but a little worse in training loss is dominated in
      (training loss, complexity) yet may be the one that holds on the validate runs; the
      frontier alone was often one to three programs (one in the seed-7 study run), which
      left the rule nothing to choose from. The pick is still non-dominated once the
      validate loss is an objective too. Without finite validate losses this falls back
      to ``"pysr"``.
    * ``"pysr"`` (PySR's "best", adapted): ``score_0 = 0`` and, for consecutive frontier
      members, ``score_i = -(log loss_i - log loss_{i-1}) / (complexity_i -
      complexity_{i-1})``, the relative loss bought per unit of complexity; the eligible
      member with the highest score, ties to the simpler. With one eligible member, the
      most accurate program.

    The test split is never read by either rule.
    """

    members: tuple[Elite, ...]
    tolerance: float = DEFAULT_TOLERANCE
    pick_rule: str = "validate"
    hall: tuple[Elite, ...] = ()

    @classmethod
    def from_elites(cls, elites: Iterable[Elite], tolerance: float = DEFAULT_TOLERANCE,
                    pick_rule: str = "validate") -> Frontier:
        if not tolerance >= 1.0:
            raise ValueError(f"tolerance must be >= 1, got {tolerance}")
        if pick_rule not in PICK_RULES:
            raise ValueError(f"pick rule must be one of {', '.join(PICK_RULES)}, "
                             f"got {pick_rule!r}")
        ordered = sorted((e for e in elites if math.isfinite(e.loss)),
                         key=lambda e: (e.complexity, e.loss, e.program_id, e.generation))
        hall: list[Elite] = []
        members: list[Elite] = []
        for e in ordered:
            if hall and hall[-1].complexity == e.complexity:
                continue  # the first of a complexity has the lowest loss
            hall.append(e)
            if not members or e.loss < members[-1].loss:
                members.append(e)
        return cls(tuple(members), float(tolerance), pick_rule, tuple(hall))

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[Elite]:
        return iter(self.members)

    @property
    def scores(self) -> tuple[float, ...]:
        """PySR score of each member (see the class docstring); the first is 0."""
        out: list[float] = []
        for i, e in enumerate(self.members):
            if i == 0:
                out.append(0.0)
                continue
            prev = self.members[i - 1]
            dlog = math.log(max(e.loss, _TINY_LOSS)) - math.log(max(prev.loss, _TINY_LOSS))
            out.append(-dlog / (e.complexity - prev.complexity))
        return tuple(out)

    @property
    def rule(self) -> str:
        """The pick rule in one sentence, with this frontier's tolerance."""
        pysr = (f"highest score -dlog(loss)/dcomplexity between consecutive frontier "
                f"members, among members with training loss <= {self.tolerance:g} x the "
                f"lowest (ties: simpler; PySR 'best' rule)")
        if self.pick_rule == "pysr":
            return f"pick = {pysr}"
        return (f"pick = lowest validate loss among the best program of each complexity "
                f"(hall of fame) with training loss <= {self.tolerance:g} x the lowest "
                f"(ties: lower training loss, simpler); without validate runs, {pysr}")

    def pick(self) -> Elite | None:
        """The member chosen by :attr:`rule`, or None for an empty frontier."""
        if not self.members:
            return None
        limit = self.tolerance * min(e.loss for e in self.members)
        eligible = [e for e in (self.hall or self.members) if e.loss <= limit]
        if self.pick_rule == "validate" and any(not math.isnan(e.val_loss) for e in eligible):
            return min(eligible, key=lambda e: (
                e.val_loss if not math.isnan(e.val_loss) else math.inf, e.loss,
                e.complexity, e.program_id))
        scores = self.scores
        best: int | None = None
        for i, e in enumerate(self.members):
            if e.loss <= limit and (best is None or scores[i] > scores[best]):
                best = i
        assert best is not None  # the most accurate member always qualifies
        return self.members[best]

    def rows(self) -> list[tuple[int, float, float, str]]:
        """``(complexity, loss, score, program_id)`` per member, for tables."""
        return [(e.complexity, e.loss, s, e.program_id)
                for e, s in zip(self.members, self.scores, strict=True)]
