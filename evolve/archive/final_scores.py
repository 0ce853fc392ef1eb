"""Closed-loop test figures of a run's final hall of fame: shown to readers, read by nothing.

Why a table of its own, beside the record: during a search the test runs are scored
teacher forced on the run's corpora (cheap, never read), which on a queueing run reads
the same TTFT for every program. At the end of a run each final hall-of-fame member is
simulated closed loop on every whole test run once (:mod:`evolve.search.final_scores`)
and the figures are kept here for ``evolve frontier`` and ``evolve report``. They are
display-only: no selection, pick or resume reads them. Like the run locks and the journal
(:mod:`evolve.archive.process_tables`) the table has its own metadata, so the determinism
digest (``Archive.comparable``, ``Base.metadata`` only) and archives written before it
stay as they were; it is created by the first run that writes it, never by a reader, and
a reader of an archive without it finds no figures (commands then show none).

A row names the evaluation whose constants were simulated (``eval_generation``,
``eval_seq``): a reader shows a figure only while that is still the program's latest
accepted evaluation (a resumed run may refit or polish it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, String, delete, inspect, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from evolve.archive.engines import schema_lock
from evolve.archive.models import CanonicalJSON, ProgramId
from evolve.archive.store import Archive

MODE = "closed_loop_final"  # the ``mode`` of the stored per-run metrics


class FinalBase(DeclarativeBase):
    pass


class FinalScore(FinalBase):
    __tablename__ = "final_scores"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    program_id: Mapped[str] = mapped_column(ProgramId("final_scores.program_id"),
                                            primary_key=True)
    generation: Mapped[int] = mapped_column(Integer)  # the hall of fame it was computed for
    eval_generation: Mapped[int] = mapped_column(Integer)  # the evaluation simulated
    eval_seq: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[Any] = mapped_column(  # scenario -> RunMetrics.to_dict() + split, mode
        CanonicalJSON("final_scores.metrics"))
    created_at: Mapped[str] = mapped_column(String)  # wall clock, informational


@dataclass(frozen=True)
class Final:
    """One program's closed-loop test figures and the evaluation they belong to."""

    program_id: str
    generation: int
    evaluation: tuple[int, int]  # (generation, seq)
    metrics: dict[str, dict[str, Any]]


def _has_table(archive: Archive) -> bool:
    return FinalScore.__tablename__ in inspect(archive.engine).get_table_names()


def read(archive: Archive, run_id: int) -> dict[str, Final]:
    """Program id -> its stored figures ({} for an archive or run without any)."""
    if not _has_table(archive):
        return {}
    with archive.session() as s:
        rows = s.scalars(select(FinalScore).where(FinalScore.run_id == run_id))
        return {r.program_id: Final(r.program_id, r.generation,
                                    (r.eval_generation, r.eval_seq), dict(r.metrics or {}))
                for r in rows}


def write(archive: Archive, run_id: int, finals: Iterable[Final], now: str) -> None:
    """Replace the run's figures with ``finals`` (one transaction)."""
    with schema_lock(archive.engine):
        FinalBase.metadata.create_all(archive.engine)
    with archive.session() as s, s.begin():
        s.execute(delete(FinalScore).where(FinalScore.run_id == run_id))
        s.add_all(FinalScore(run_id=run_id, program_id=f.program_id, generation=f.generation,
                             eval_generation=f.evaluation[0], eval_seq=f.evaluation[1],
                             metrics=f.metrics, created_at=now) for f in finals)


def current(finals: dict[str, Final], program_id: str,
            evaluation: tuple[int, int] | None) -> dict[str, dict[str, Any]] | None:
    """The stored figures of ``program_id`` if they belong to ``evaluation`` (its latest
    accepted one), else None."""
    f = finals.get(program_id)
    return f.metrics if f is not None and evaluation == f.evaluation else None
