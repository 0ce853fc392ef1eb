"""The seam between the search loop and whatever proposes new programs.

An operator turns parents (with their training errors) into candidate program *sources*.
It never fits, scores or stores anything: the loop validates, fits and archives, so LLM and
offline operators are interchangeable and every proposal, good or bad, is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from evolve.program.language import Program


@dataclass(frozen=True)
class Parent:
    """A program as an operator sees it: source, fitted constants, training errors only."""

    program: Program
    constants: dict[str, dict[str, float]]  # group key -> {constant name: value}
    loss: float
    train_errors: dict[str, dict[str, float]]  # scenario name -> {"e2e_mean": ape, ...}
    worst_batches: str = ""  # compact table of where the parent errs most (training runs)
    # why recent children of this program were rejected after fitting (physics probe, fit),
    # most recent last; shown in LLM prompts so the model does not repeat them
    rejections: tuple[str, ...] = ()


@dataclass(frozen=True)
class Proposal:
    """One candidate: a program source, or the reason there is none."""

    source: str | None
    operator: str  # e.g. "offline:swap_feature", "llm:mutate"
    parent_ids: tuple[str, ...]
    error: str | None = None
    llm_call: dict[str, Any] | None = field(default=None, compare=False)


class ExchangeStore(Protocol):
    """Where an operator keeps the endpoint exchanges of the generation in progress (the
    search's journal, :class:`evolve.search.journal.Journal`), so replies paid for before a
    kill are served, not asked for (and paid) again, on resume."""

    def exchange(self, index: int, request_hash: str) -> dict[str, Any] | None: ...

    def put_exchange(self, index: int, request_hash: str, exchange: dict[str, Any],
                     cached: bool) -> None: ...


class Operator(Protocol):
    """What the loop asks of an operator: proposals, and (once, before the first
    generation) the journal it may keep its exchanges in."""

    name: str

    def attach_journal(self, journal: ExchangeStore) -> None:
        """Keep ``journal`` for the exchanges of each generation (operators without an
        endpoint ignore it)."""
        ...

    def propose(self, parents: Sequence[Parent], inspirations: Sequence[Parent],
                rng: np.random.Generator, n: int) -> list[Proposal]:
        """Return ``n`` proposals (some may carry ``error`` instead of ``source``)."""
        ...
