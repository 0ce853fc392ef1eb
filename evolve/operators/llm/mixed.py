"""Mixed operators: each child from the LLM or the offline operator, by a configured share.

Why: a small or slow model alone makes a worse search than no model (issue 59: SmolLM2-135M
alone, 3 of 79 children accepted, no progress in 10 generations, 5x the offline wall time).
Mixed, the offline edits keep the search moving and the LLM adds structure they cannot
(whole new programs, crossovers of two designs), at a fraction of the endpoint time.

Determinism: from the generation's operator stream the mixer draws, in this order, one
uniform per child (child ``i`` is the LLM's when it is below ``share``), then a seed for
the LLM's stream and one for the offline operator's. So which operator makes which child,
and every draw of either, depend on the run seed and the generation only. Child ``i``'s
primary parent is ``parents[i % len(parents)]`` whichever operator makes it (each operator
gets the parents reordered so its children's primaries come first).

Overlap (``overlap=True``): after the loop has the proposals of generation ``g``, it calls
:meth:`MixedOperator.prefetch` with generation ``g``'s parents for each generation
``g + 1 .. g + lookahead`` not planned yet (``operator.lookahead``); their LLM requests are
planned then (from ``g``'s parents) and sent, in generation order, on one background thread
while ``g`` fits and judges. :meth:`propose` of generation ``t`` collects ``t``'s batch and
accounts it in request order. One ahead is the default: farther ahead, the LLM proposes
from parents up to ``lookahead`` generations behind the selection, and on twelve seeds its
programs then never reached a pick (docs/llm.md); more than one is for a model slower than
a generation's fits. A recorded run and
its cassette replay make the same plans, so their archives are identical. A resumed run
has no batch in flight: its first generations plan their LLM requests from their own
parents (those LLM children differ from an uninterrupted run's; docs/llm.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from evolve.operators.base import ExchangeStore, Operator, Parent, Proposal
from evolve.operators.llm.operator import LLMOperator

_SPAN = 2**63 - 1
# consecutive LLM batches failing at the endpoint before the run falls back to offline
# (measured: one 120 s timeout of a starved local server ended the LLM's part of a run)
FAIL_BATCHES = 3


def primaries_first(parents: Sequence[Parent], idx: Sequence[int]) -> list[Parent]:
    """``parents`` reordered so that ``out[j] == parents[idx[j] % len(parents)]`` for the
    children ``idx`` an operator makes (the rest follow: crossover partners)."""
    n = len(parents)
    first = [parents[i % n] for i in idx]
    used = {i % n for i in idx}
    return first + [p for k, p in enumerate(parents) if k not in used]


def split(rng: np.random.Generator, n: int, share: float
          ) -> tuple[list[int], list[int], np.random.Generator, np.random.Generator]:
    """(children of the LLM, children of the offline operator, the LLM's stream, the
    offline operator's stream), drawn from ``rng`` in a fixed order.

    The LLM makes ``share * n`` children, rounded down or up at random so that the share
    holds on average, at random positions. Why not one draw per child: the model's
    batches were then 0 to 5 children, and a generation of 4-5 made the next one wait for
    the model (seed 1: 35 s of the model against about 22 s of fitting), while one of 2-3
    keeps it inside the fitting time."""
    order = np.argsort(rng.random(n), kind="stable")
    k = min(n, int(np.floor(share * n + rng.random())))
    chosen = {int(i) for i in order[:k]}
    llm = [i for i in range(n) if i in chosen]
    offline = [i for i in range(n) if i not in chosen]
    llm_rng = np.random.default_rng(int(rng.integers(0, _SPAN)))
    off_rng = np.random.default_rng(int(rng.integers(0, _SPAN)))
    return llm, offline, llm_rng, off_rng


class MixedOperator:
    """``Operator`` drawing each child from ``llm`` (share ``share``) or ``offline``."""

    name = "mixed"

    def __init__(self, llm: LLMOperator, offline: Operator, share: float,
                 overlap: bool = True):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"llm share must be in [0, 1], not {share!r}")
        self.llm, self.offline, self.share, self.overlap = llm, offline, float(share), overlap
        llm.fail_batches = FAIL_BATCHES
        self._pool: ThreadPoolExecutor | None = None
        # generation -> its batch in flight; None keys: batches of callers that give none
        self._ahead: dict[int | None, tuple[list[Any], Future[Any]]] = {}
        self._planned: set[int] = set()  # generations whose LLM part prefetch has planned
        self.prefetched = 0  # batches sent ahead of their generation (and collected)

    def attach_journal(self, journal: ExchangeStore) -> None:
        """The LLM half keeps its exchanges there; the offline half has none."""
        self.llm.attach_journal(journal)

    # the loop reads the fallback on the operator it holds

    @property
    def fallen_back(self) -> bool:
        return self.llm.fallen_back

    def close(self) -> None:
        for _, future in self._ahead.values():
            future.cancel()
        self._ahead.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.llm.close()

    def propose(self, parents: Sequence[Parent], inspirations: Sequence[Parent],
                rng: np.random.Generator, n: int, generation: int | None = None
                ) -> list[Proposal]:
        """``n`` children; the LLM's are generation ``generation``'s batch sent ahead when
        there is one (``None``: the batch prefetched without a generation), else asked
        now from ``parents``."""
        if not parents:
            raise ValueError("MixedOperator.propose needs at least one parent")
        llm_idx, off_idx, llm_rng, off_rng = split(rng, n, self.share)
        ahead = self._ahead.pop(generation, None)
        out: list[Proposal | None] = [None] * n
        if llm_idx:
            if ahead is not None and not self.llm.fallen_back:
                self.llm._check_budget()  # as propose would (BudgetExhausted stops the run)
                plans, future = ahead
                got = self.llm.finish(plans, future.result())
                self.prefetched += 1
            else:
                got = self.llm.propose(primaries_first(parents, llm_idx), inspirations,
                                       llm_rng, len(llm_idx))
            for i, prop in zip(llm_idx, got, strict=True):
                out[i] = prop
        if off_idx:
            got = self.offline.propose(primaries_first(parents, off_idx), inspirations,
                                       off_rng, len(off_idx))
            for i, prop in zip(off_idx, got, strict=True):
                out[i] = prop
        assert all(p is not None for p in out)
        return [p for p in out if p is not None]

    def prefetch(self, parents: Sequence[Parent], inspirations: Sequence[Parent],
                 rng: np.random.Generator, n: int, generation: int | None = None) -> None:
        """Plan generation ``generation``'s LLM requests now, from these ``parents`` and that
        generation's stream ``rng``, and send them on the background thread (after the
        batches already there); :meth:`propose` of that generation collects them. A
        generation planned before is left alone. Nothing is sent when overlap is off, the
        operator fell back to offline, or a budget is spent (the generation's propose then
        asks or says so); a budget may be passed by the batches in flight."""
        if (generation in self._planned or not self.overlap or not parents
                or self.llm.fallen_back or not self.llm.budget_left()):
            return
        if generation is not None:
            self._planned.add(generation)
        llm_idx, _, llm_rng, _ = split(rng, n, self.share)
        if not llm_idx:
            return
        plans = self.llm.plan(primaries_first(parents, llm_idx), inspirations, llm_rng,
                              len(llm_idx))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-ahead")
        self._ahead[generation] = (plans, self._pool.submit(self.llm.send, plans, False))


def build_mixed_operator(llm: LLMOperator, offline: Operator, share: float,
                         overlap: bool) -> Operator:
    """The run's operator for ``operator.kind = "llm"``: the LLM alone at share 1 without
    overlap (what runs stored before mixing existed replay as), else mixed."""
    if share >= 1.0 and not overlap:
        return llm
    return MixedOperator(llm, offline, share, overlap)
