"""One run of an archive, loaded once into plain Python for the report's page builders.

Why a snapshot: every page reads the same rows (programs, their latest evaluation, the
frontier of each generation); reading them once keeps report generation linear in the
archive's size and lets the builders be pure functions, unit-tested on a :class:`RunData`
without HTML. The archive is read only through ``evolve.archive`` (the :class:`Archive`
reader and the table models), never with raw SQL, so a schema change breaks here loudly.

Losses: ``train_loss`` is the stored ``evaluations.loss``; ``val_loss`` (and ``test_loss``,
shown only where labelled as test: closed loop on the whole test runs where the run's end
computed that, :mod:`evolve.archive.final_scores`) are recomputed from the stored per-run
metrics with the same formula as ``evaluator.api.loss``: sqrt of the mean over runs of
(APE(mean E2E)^2 + APE(mean TTFT)^2) / 2, ``inf`` if any run of the split is invalid, NaN
when the split has no run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import defer

from evolve.archive import Archive, final_scores
from evolve.archive.ids import source_matches
from evolve.archive.models import (
    Evaluation,
    FrontierRow,
    GridCell,
    LLMCall,
    ProgramRow,
    Run,
    on_frontier,
)
from evolve.assess.heldout import split_loss


@dataclass
class EvalBrief:
    """An evaluation without its metrics (history tables, LLM verdicts)."""

    generation: int
    seq: int
    program_id: str | None
    kind: str
    operator: str
    status: str
    loss: float | None
    reason: str
    n_evals: int


@dataclass
class ProgramData:
    """A program of the run: where it came from, and its latest accepted evaluation."""

    id: str
    source: str
    parents: list[str]
    operator: str
    generation: int
    seq: int
    complexity: int | None
    n_features: int | None
    children: list[str] = field(default_factory=list)
    evals: list[EvalBrief] = field(default_factory=list)
    constants: dict[str, dict[str, float]] | None = None
    metrics: dict[str, dict[str, Any]] | None = None
    metrics_generation: int | None = None
    train_loss: float = math.nan  # of the latest accepted evaluation; NaN: never accepted
    first_loss: float = math.nan  # of the first accepted evaluation (as the child was born)
    val_loss: float = math.nan
    test_loss: float = math.nan  # closed loop (end of run) if computed, else as stored
    # closed-loop metrics on every whole test run, computed when the run ended
    # (evolve.search.final_scores); None: none current (then test_loss is the stored one)
    test_closed_loop: dict[str, dict[str, Any]] | None = None
    evaluation: tuple[int, int] | None = None  # (generation, seq) of the latest accepted
    edited: bool = False  # the stored source does not hash to the id: the archive was edited

    @property
    def accepted(self) -> bool:
        return math.isfinite(self.train_loss)

    @property
    def kind(self) -> str:
        """``seed``, ``offline``, ``llm``... (the operator's family)."""
        return self.operator.split(":", 1)[0]


@dataclass
class RunData:
    """Everything the pages show about one run."""

    archive_path: Path | str  # a file, or a server URL without its password
    run: Run
    programs: dict[str, ProgramData]  # in (generation, seq) order
    evals: list[EvalBrief]
    frontiers: dict[int, list[FrontierRow]]  # generation -> members by position
    grids: dict[int, list[GridCell]]  # generation -> cells
    llm_calls: list[LLMCall]
    tokens: int = 0
    cost_usd: float = 0.0
    # generation -> the validate loss of that generation's pick at the constants it had
    # then (its latest accepted evaluation up to that generation), as the pick rule read it
    pick_val_loss: dict[int, float] = field(default_factory=dict)

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.run.config or {})

    @property
    def last_generation(self) -> int | None:
        return max(self.frontiers) if self.frontiers else None

    def frontier(self) -> list[FrontierRow]:
        g = self.last_generation
        return [] if g is None else self.frontiers[g]

    def frontier_ids(self) -> set[str]:
        """The last stored hall of fame's members that are on the frontier."""
        rows = self.frontier()
        return {r.program_id for r, on in zip(rows, on_frontier(rows), strict=True) if on}

    def pick_id(self) -> str | None:
        return next((f.program_id for f in self.frontier() if f.picked), None)


def load_run(archive: Archive, run_id: int | None = None) -> RunData:
    """Read one run (default: the latest) into a :class:`RunData`."""
    rid = archive.latest_run_id() if run_id is None else run_id
    run = archive.run(rid)
    programs: dict[str, ProgramData] = {}
    for row in archive.programs(rid):
        programs[row.id] = _program(row)
    for p in programs.values():
        for parent in dict.fromkeys(p.parents):
            if parent in programs:
                programs[parent].children.append(p.id)
    evals = _evaluations(archive, rid, programs)
    for pid, final in final_scores.read(archive, rid).items():
        prog = programs.get(pid)
        if prog is not None and final.evaluation == prog.evaluation:
            prog.test_closed_loop = final.metrics
            prog.test_loss = split_loss(final.metrics, "test")
    with archive.session() as s:
        frontiers: dict[int, list[FrontierRow]] = defaultdict(list)
        for f in s.scalars(select(FrontierRow).where(FrontierRow.run_id == rid)
                           .order_by(FrontierRow.generation, FrontierRow.position)):
            frontiers[f.generation].append(f)
        grids: dict[int, list[GridCell]] = defaultdict(list)
        for c in s.scalars(select(GridCell).where(GridCell.run_id == rid)
                           .order_by(GridCell.generation, GridCell.cell)):
            grids[c.generation].append(c)
        calls = list(s.scalars(select(LLMCall).where(LLMCall.run_id == rid)
                               .order_by(LLMCall.generation, LLMCall.seq)))
    tokens, cost = archive.llm_usage(rid)
    return RunData(archive.path, run, programs, evals, dict(frontiers), dict(grids), calls,
                   tokens, cost, _pick_val_losses(archive, rid, frontiers))


def _pick_val_losses(archive: Archive, rid: int,
                     frontiers: dict[int, list[FrontierRow]]) -> dict[int, float]:
    """Per generation, its pick's validate loss at that generation's constants (a later
    polish or refit must not be shown as what the pick rule read: found in review)."""
    picks = {g: next((f.program_id for f in rows if f.picked), None)
             for g, rows in frontiers.items()}
    history: dict[str, list[tuple[int, float]]] = {}
    for one in {p for p in picks.values() if p}:
        history[one] = [(e.generation, split_loss(e.metrics, "validate"))
                        for e in archive.evaluations(rid, program_id=one)
                        if e.status == "accepted"]
    out: dict[int, float] = {}
    for g, pid in picks.items():
        upto = [loss for gen, loss in history.get(pid or "", []) if gen <= g]
        out[g] = upto[-1] if upto else math.nan
    return out


def _program(p: ProgramRow) -> ProgramData:
    """A program row; one whose source does not hash to its id (the archive was edited
    after the run wrote it) is kept, marked ``edited``, so its page says so."""
    return ProgramData(p.id, p.source, list(p.parent_ids or []), p.operator, p.generation,
                       p.seq, p.complexity, p.n_features,
                       edited=not source_matches(p.id, p.source))


def _evaluations(archive: Archive, rid: int,
                 programs: dict[str, ProgramData]) -> list[EvalBrief]:
    """Briefs of every evaluation; metrics and constants of each program's latest accepted.

    Metrics are the bulk of an archive, so they are read in a second pass only for the
    evaluation that is each program's latest accepted one.
    """
    briefs: list[EvalBrief] = []
    latest: dict[str, tuple[int, int]] = {}
    with archive.session() as s:
        q = (select(Evaluation).options(defer(Evaluation.metrics), defer(Evaluation.constants))
             .where(Evaluation.run_id == rid).order_by(Evaluation.generation, Evaluation.seq))
        for e in s.scalars(q):
            b = EvalBrief(e.generation, e.seq, e.program_id, e.kind, e.operator, e.status,
                          e.loss, e.reason or "", e.n_evals)
            briefs.append(b)
            if e.program_id in programs:
                programs[e.program_id].evals.append(b)
                if e.status == "accepted":
                    latest[e.program_id] = (e.generation, e.seq)
                    p = programs[e.program_id]
                    if math.isnan(p.first_loss):
                        p.first_loss = float(e.loss) if e.loss is not None else math.inf
        wanted: dict[int, list[int]] = defaultdict(list)
        for g, seq in latest.values():
            wanted[g].append(seq)
        for g, seqs in sorted(wanted.items()):
            for chunk in range(0, len(seqs), 500):
                q2 = select(Evaluation).where(Evaluation.run_id == rid,
                                              Evaluation.generation == g,
                                              Evaluation.seq.in_(seqs[chunk:chunk + 500]))
                for e in s.scalars(q2):
                    _attach(programs[str(e.program_id)], e)
    return briefs


def _attach(p: ProgramData, e: Evaluation) -> None:
    p.constants = e.constants
    p.metrics = e.metrics
    p.metrics_generation = e.generation
    p.evaluation = (e.generation, e.seq)
    p.train_loss = float(e.loss) if e.loss is not None else math.inf
    p.val_loss = split_loss(e.metrics, "validate")
    p.test_loss = split_loss(e.metrics, "test")


def open_run(path: str | Path, run_id: int | None = None) -> RunData:
    """Open an archive read-only (it must exist) and load one run."""
    with Archive(path, create=False) as archive:
        return load_run(archive, run_id)
